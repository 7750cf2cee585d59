//! PEM files into rustls's types: certificate chains, private keys, CA bundles.

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::{self, PemObject as _};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::Error;

/// Reads every certificate of a PEM file; none is an error.
///
/// ```no_run
/// let chain = kube_api_rewriter_tls::load_certs(std::path::Path::new("/certs/tls.crt"))?;
/// # let _ = chain; Ok::<(), kube_api_rewriter_tls::Error>(())
/// ```
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let what = path.display().to_string();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|source| Error::Pem {
            path: what.clone(),
            source,
        })?;
    if certs.is_empty() {
        return Err(Error::NoCertificate(what));
    }
    Ok(certs)
}

/// Certificates from PEM text (a ConfigMap value, a kubeconfig's data); `what` names it in
/// errors. None is an error.
///
/// ```
/// use kube_api_rewriter_tls::{Error, certs_from_pem};
///
/// let err = certs_from_pem(b"not PEM", "requestheader-client-ca-file").unwrap_err();
/// assert!(matches!(err, Error::NoCertificate(_)));
/// assert_eq!(err.to_string(), "requestheader-client-ca-file: no certificate found");
/// ```
pub fn certs_from_pem(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| Error::Pem {
            path: what.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(Error::NoCertificate(what.to_owned()));
    }
    Ok(certs)
}

/// Reads the first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file. The error names the file
/// and the kind of problem, never the file's contents.
///
/// ```no_run
/// let key = kube_api_rewriter_tls::load_key(std::path::Path::new("/certs/tls.key"))?;
/// # let _ = key; Ok::<(), kube_api_rewriter_tls::Error>(())
/// ```
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| Error::Key {
        path: path.display().to_string(),
        reason: key_reason(&e),
    })
}

/// What is wrong with a key file, in words that quote none of it: the PEM error's own text
/// can hold a line of the file or a byte of the key.
fn key_reason(e: &pem::Error) -> String {
    match e {
        pem::Error::Io(e) => format!("I/O error: {e}"),
        pem::Error::NoItemsFound => "no private key found".to_owned(),
        pem::Error::Base64Decode(_) => "not a PEM private key (bad base64)".to_owned(),
        pem::Error::MissingSectionEnd { .. } => "not a PEM private key (no END line)".to_owned(),
        pem::Error::IllegalSectionStart { .. } => "not a PEM private key (bad BEGIN line)".to_owned(),
        _ => "not a PEM private key".to_owned(),
    }
}

/// A root store of CA certificates; `what` names them in errors. None usable is an error.
///
/// ```no_run
/// use kube_api_rewriter_tls::{load_certs, root_store};
///
/// let ca = std::path::Path::new("/certs/ca.crt");
/// let roots = root_store(load_certs(ca)?, &ca.display().to_string())?;
/// # let _ = roots; Ok::<(), kube_api_rewriter_tls::Error>(())
/// ```
pub fn root_store(certs: Vec<CertificateDer<'static>>, what: &str) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::NoCa(what.to_owned()));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{TempDir, cert};

    #[test]
    fn a_missing_key_file_names_the_file() {
        let dir = TempDir::new("missing-key");
        let missing = dir.path().join("tls.key");
        let e = load_key(&missing).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with(&format!("{}: ", missing.display())), "{text}");
        assert!(text.contains("No such file"), "{text}");
    }

    #[test]
    fn a_broken_key_is_reported_without_its_contents() {
        let dir = TempDir::new("broken-key");
        let (_, key) = cert(dir.path(), "a", "first");
        let pem = std::fs::read_to_string(&key).expect("key");
        // The key's own base64, with one character made illegal: the PEM error would quote it.
        let body: Vec<&str> = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let secret = body[0];
        let broken = pem.replacen(secret, &format!("{}!{}", &secret[..10], &secret[11..]), 1);
        std::fs::write(&key, &broken).expect("write");
        let text = load_key(&key).unwrap_err().to_string();
        assert!(
            text.starts_with(&format!("{}: not a PEM private key", key.display())),
            "{text}"
        );
        for l in &body {
            assert!(!text.contains(&l[..16]), "{text}");
        }
        assert!(!text.contains('!'), "{text}");

        std::fs::write(&key, format!("-----BEGIN PRIVATE KEY----- {secret}\n")).expect("write");
        let text = load_key(&key).unwrap_err().to_string();
        assert!(!text.contains(&secret[..16]), "{text}");
        std::fs::write(&key, "").expect("write");
        assert_eq!(
            load_key(&key).unwrap_err().to_string(),
            format!("{}: no private key found", key.display())
        );
    }

    #[test]
    fn certificates_are_read_and_their_absence_is_an_error() {
        let dir = TempDir::new("certs");
        let (crt, key) = cert(dir.path(), "a", "first");
        assert_eq!(load_certs(&crt).expect("certificate").len(), 1);
        let pem = std::fs::read(&crt).expect("read");
        assert_eq!(certs_from_pem(&pem, "inline").expect("certificate").len(), 1);
        assert!(root_store(load_certs(&crt).expect("certificate"), "ca").is_ok());
        // A key file has no certificate.
        let e = load_certs(&key).unwrap_err();
        assert_eq!(e.to_string(), format!("{}: no certificate found", key.display()));
        let e = load_certs(&dir.path().join("nope.crt")).unwrap_err();
        assert!(matches!(e, Error::Pem { .. }), "{e}");
        let e = certs_from_pem(
            b"-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
            "ca",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("ca: "), "{e}");
        assert_eq!(
            root_store(Vec::new(), "ca").unwrap_err().to_string(),
            "ca: no usable CA certificate"
        );
    }
}
