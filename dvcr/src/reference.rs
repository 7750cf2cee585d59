//! Image references: `host[:port]/path[:tag]` or `host[:port]/path@sha256:...`.

use std::fmt;

use crate::{Error, Result};

/// A parsed image reference. The first component is always the registry host (DVCR and the
/// registries images are imported from are named explicitly; there is no Docker Hub default).
///
/// ```
/// use virtualization_dvcr::ImageReference;
///
/// let r: ImageReference = "127.0.0.1:5000/vi/ns/name:uid".parse().unwrap();
/// assert_eq!(r.host, "127.0.0.1:5000");
/// assert_eq!(r.repository, "vi/ns/name");
/// assert_eq!(r.reference, "uid");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageReference {
    /// `host[:port]` of the registry.
    pub host: String,
    /// The repository's name (`path/to/image`).
    pub repository: String,
    /// The tag, or a digest `sha256:...` (default tag `latest`).
    pub reference: String,
}

impl ImageReference {
    /// Whether [`ImageReference::reference`] is a digest rather than a tag.
    pub fn is_digest(&self) -> bool {
        self.reference.contains(':')
    }
}

impl std::str::FromStr for ImageReference {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::Config(format!("image reference {s:?}: {why}"));
        let s = s.trim();
        let s = s
            .strip_prefix("docker://")
            .or_else(|| s.strip_prefix("oci://"))
            .unwrap_or(s);
        let (host, rest) = s.split_once('/').ok_or_else(|| bad("expected host/path"))?;
        if host.is_empty() || rest.is_empty() {
            return Err(bad("expected host/path"));
        }
        let (repository, reference) = if let Some((repo, digest)) = rest.split_once('@') {
            let hex = digest
                .strip_prefix("sha256:")
                .ok_or_else(|| bad("only sha256 digests are supported"))?;
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad("malformed sha256 digest"));
            }
            (repo, digest.to_ascii_lowercase())
        } else {
            let last = rest.rfind('/').map_or(0, |i| i + 1);
            match rest[last..].rfind(':') {
                Some(i) => (&rest[..last + i], rest[last + i + 1..].to_owned()),
                None => (rest, "latest".to_owned()),
            }
        };
        let repo_ok = repository.split('/').all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
        });
        if !repo_ok {
            return Err(bad("the repository must be lowercase path components"));
        }
        let tag_ok = !reference.is_empty()
            && reference.len() <= 128
            && reference
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'));
        if !tag_ok {
            return Err(bad("malformed tag"));
        }
        Ok(ImageReference {
            host: host.to_owned(),
            repository: repository.to_owned(),
            reference,
        })
    }
}

impl fmt::Display for ImageReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sep = if self.is_digest() { '@' } else { ':' };
        write!(f, "{}/{}{sep}{}", self.host, self.repository, self.reference)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ImageReference> {
        s.parse()
    }

    #[test]
    fn tags_digests_and_defaults() {
        let r = parse("registry.example.com/a/b").unwrap();
        assert_eq!((r.repository.as_str(), r.reference.as_str()), ("a/b", "latest"));
        let d = format!("sha256:{}", "a".repeat(64));
        let r = parse(&format!("h:5000/x@{d}")).unwrap();
        assert!(r.is_digest());
        assert_eq!(r.reference, d);
        assert_eq!(r.to_string(), format!("h:5000/x@{d}"));
        assert_eq!(parse("h:5000/x:v1").unwrap().to_string(), "h:5000/x:v1");
    }

    #[test]
    fn malformed_references_are_refused() {
        for s in [
            "",
            "noslash",
            "h/",
            "h/UPPER",
            "h/x@md5:ab",
            "h/x@sha256:12",
            "h/x:",
            "h//x",
        ] {
            assert!(parse(s).is_err(), "{s}");
        }
    }
}
