//! OpenAPI v2 and v3 documents as JSON, restored with byte edits.
//!
//! One pass of the span scanner over the document: keys of `paths` (API paths, or the v3
//! index's `apis/GROUP/VERSION`), keys of `definitions` / `components.schemas`, every `$ref`,
//! every `x-kubernetes-group-version-kind` and the v3 index's `serverRelativeURL`s are
//! restored where the rules map them; every other byte is copied as kube-apiserver sent it.
//! Memory: the input, the edits, and one output of about the input's size.

use std::borrow::Cow;

use crate::error::Result;
use crate::json::{Edits, Scanner, Str};
use crate::{Direction, Rules};

/// Restores an OpenAPI v2 document, v3 index or v3 group document (JSON) for clients.
/// Returns the input borrowed when nothing changes.
///
/// ```
/// use kube_api_rewriter::{Rules, openapi};
/// let rules = Rules::builtin_kubevirt();
/// let doc = br#"{"definitions":{"io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachine":{"x-kubernetes-group-version-kind":[{"group":"internal.virtualization.deckhouse.io","kind":"InternalVirtualizationVirtualMachine","version":"v1"}]}}}"#;
/// let out = openapi::json::restore(&rules, doc).unwrap();
/// assert_eq!(
///     std::str::from_utf8(&out).unwrap(),
///     r#"{"definitions":{"io.kubevirt.v1.VirtualMachine":{"x-kubernetes-group-version-kind":[{"group":"kubevirt.io","kind":"VirtualMachine","version":"v1"}]}}}"#
/// );
/// ```
pub fn restore<'a>(rules: &Rules, input: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    let mut w = Walker {
        rules,
        sc: Scanner::new(input),
        edits: Edits::default(),
    };
    w.document()?;
    if w.edits.is_empty() {
        return Ok(Cow::Borrowed(input));
    }
    let mut out = Vec::with_capacity(input.len() + input.len() / 64);
    w.edits.apply_range(input, 0, input.len(), &mut out);
    Ok(Cow::Owned(out))
}

/// What the keys of a map are.
#[derive(Clone, Copy)]
enum Keys {
    /// API paths (`/apis/...`) or v3 index entries (`apis/GROUP/VERSION`).
    Paths,
    /// Schema names.
    Definitions,
}

struct Walker<'r, 'a> {
    rules: &'r Rules,
    sc: Scanner<'a>,
    edits: Edits,
}

impl<'a> Walker<'_, 'a> {
    fn document(&mut self) -> Result<()> {
        if self.sc.peek()? != b'{' {
            self.sc.skip_value()?;
            return Ok(self.sc.end()?);
        }
        self.sc.begin_object()?;
        let mut first = true;
        while let Some(k) = self.sc.next_key(&mut first)? {
            match k.text.as_ref() {
                "paths" => self.map(Keys::Paths)?,
                "definitions" => self.map(Keys::Definitions)?,
                "components" => self.components()?,
                _ => self.value()?,
            }
        }
        Ok(self.sc.end()?)
    }

    fn components(&mut self) -> Result<()> {
        if self.sc.peek()? != b'{' {
            return self.value();
        }
        self.sc.begin_object()?;
        let mut first = true;
        while let Some(k) = self.sc.next_key(&mut first)? {
            if k.text == "schemas" {
                self.map(Keys::Definitions)?;
            } else {
                self.value()?;
            }
        }
        Ok(())
    }

    /// An object whose keys are names of `keys`; values are walked.
    fn map(&mut self, keys: Keys) -> Result<()> {
        if self.sc.peek()? != b'{' {
            return self.value();
        }
        self.sc.begin_object()?;
        let mut first = true;
        while let Some(k) = self.sc.next_key(&mut first)? {
            let new = match keys {
                Keys::Definitions => super::restore_definition(self.rules, &k.text),
                Keys::Paths => restore_path_key(self.rules, &k.text),
            };
            if let Some(n) = new {
                self.edits.replace_quoted(k.start, k.end, &n);
            }
            self.value()?;
        }
        Ok(())
    }

    fn value(&mut self) -> Result<()> {
        match self.sc.peek()? {
            b'{' => self.object(),
            b'[' => {
                self.sc.begin_array()?;
                let mut first = true;
                while self.sc.next_elem(&mut first)? {
                    self.value()?;
                }
                Ok(())
            }
            _ => {
                self.sc.skip_value()?;
                Ok(())
            }
        }
    }

    fn object(&mut self) -> Result<()> {
        self.sc.begin_object()?;
        let mut first = true;
        while let Some(k) = self.sc.next_key_raw(&mut first)? {
            if k.is("$ref") {
                if let Some(s) = self.sc.string_or_skip()?
                    && let Some(n) = super::restore_ref(self.rules, &s.text)
                {
                    self.edits.replace_quoted(s.start, s.end, &n);
                }
            } else if k.is("x-kubernetes-group-version-kind") {
                self.gvks()?;
            } else if k.is("serverRelativeURL") {
                if let Some(s) = self.sc.string_or_skip()?
                    && let Some(n) = super::rewrite_v3_url(self.rules, Direction::Restore, &s.text)
                {
                    self.edits.replace_quoted(s.start, s.end, &n);
                }
            } else {
                self.value()?;
            }
        }
        Ok(())
    }

    /// `x-kubernetes-group-version-kind`: one object or an array of them.
    fn gvks(&mut self) -> Result<()> {
        match self.sc.peek()? {
            b'[' => {
                self.sc.begin_array()?;
                let mut first = true;
                while self.sc.next_elem(&mut first)? {
                    self.gvk()?;
                }
                Ok(())
            }
            _ => self.gvk(),
        }
    }

    fn gvk(&mut self) -> Result<()> {
        if self.sc.peek()? != b'{' {
            return self.value();
        }
        self.sc.begin_object()?;
        let mut first = true;
        let (mut group, mut version, mut kind): (Option<Str<'a>>, Option<Str<'a>>, Option<Str<'a>>) =
            (None, None, None);
        while let Some(k) = self.sc.next_key_raw(&mut first)? {
            let slot = if k.is("group") {
                &mut group
            } else if k.is("version") {
                &mut version
            } else if k.is("kind") {
                &mut kind
            } else {
                self.value()?;
                continue;
            };
            *slot = self.sc.string_or_skip()?;
        }
        let (Some(g), Some(v), Some(k)) = (group, version, kind) else {
            return Ok(());
        };
        if let Some((ng, nv, nk)) = super::restore_group_version_kind(self.rules, &g.text, &v.text, &k.text) {
            self.edits.replace_quoted(g.start, g.end, &ng);
            if nv != v.text {
                self.edits.replace_quoted(v.start, v.end, &nv);
            }
            self.edits.replace_quoted(k.start, k.end, &nk);
        }
        Ok(())
    }
}

/// A key of `paths`: an API path (v2, v3 group documents) or a v3 index entry
/// (`apis/GROUP/VERSION`, no leading slash).
fn restore_path_key(rules: &Rules, key: &str) -> Option<String> {
    if key.starts_with('/') {
        return super::restore_api_path(rules, key);
    }
    let p = format!("/{key}");
    super::restore_api_path(rules, &p).map(|s| s[1..].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restored(doc: &str) -> String {
        let r = Rules::builtin_kubevirt();
        String::from_utf8(restore(&r, doc.as_bytes()).expect("valid").into_owned()).expect("utf-8")
    }

    #[test]
    fn untouched_documents_are_borrowed() {
        let r = Rules::builtin_kubevirt();
        let doc = br##"{"swagger":"2.0","paths":{"/api/v1/pods":{"get":{"x-kubernetes-group-version-kind":{"group":"","kind":"Pod","version":"v1"}}}},"definitions":{"io.k8s.api.core.v1.Pod":{"properties":{"metadata":{"$ref":"#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}}}}"##;
        assert!(matches!(restore(&r, doc).expect("valid"), Cow::Borrowed(_)));
    }

    #[test]
    fn v3_index_and_group_document() {
        let index = r##"{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=A"},"apis/internal.virtualization.deckhouse.io/v1":{"serverRelativeURL":"/openapi/v3/apis/internal.virtualization.deckhouse.io/v1?hash=B"}}}"##;
        assert_eq!(
            restored(index),
            r##"{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=A"},"apis/kubevirt.io/v1":{"serverRelativeURL":"/openapi/v3/apis/kubevirt.io/v1?hash=B"}}}"##
        );
        let group = r##"{"openapi":"3.0.0","paths":{"/apis/internal.virtualization.deckhouse.io/v1/internalvirtualizationvirtualmachines":{"get":{"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachineList"}}}}},"x-kubernetes-group-version-kind":{"group":"internal.virtualization.deckhouse.io","version":"v1","kind":"InternalVirtualizationVirtualMachine"}}}},"components":{"schemas":{"io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachineList":{"type":"object"}}}}"##;
        assert_eq!(
            restored(group),
            r##"{"openapi":"3.0.0","paths":{"/apis/kubevirt.io/v1/virtualmachines":{"get":{"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/io.kubevirt.v1.VirtualMachineList"}}}}},"x-kubernetes-group-version-kind":{"group":"kubevirt.io","version":"v1","kind":"VirtualMachine"}}}},"components":{"schemas":{"io.kubevirt.v1.VirtualMachineList":{"type":"object"}}}}"##
        );
    }

    #[test]
    fn invalid_json_is_an_error() {
        let r = Rules::builtin_kubevirt();
        for bad in [
            &b"{\"paths\":{"[..],
            b"{\"a\":1}x",
            b"",
            b"{\"definitions\":{\"a\":[}}",
        ] {
            assert!(restore(&r, bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
