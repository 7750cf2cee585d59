//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`).
//!
//! kubectl and client-go send built-in kinds as protobuf: a `k8s\0` magic, then a
//! `runtime.Unknown` whose `raw` field holds the object. Without schemas for every kind, the
//! rewriter reads the wire format generically and rewrites only what it knows exactly: the
//! object's `metadata` (field 1 of every kind: labels, annotations, finalizers, owner
//! references, managed fields), the `resourceAttributes` of access reviews (so that
//! `kubectl auth can-i` works through the proxy) and the `spec.group` of APIServices (which
//! virt-operator's aggregator client sends as protobuf). A kind whose rule locations go beyond those
//! is refused with [`Error::UnsupportedMediaType`] rather than passed on half rewritten.
//!
//! Field numbers are Kubernetes' (`k8s.io/api` and `k8s.io/apimachinery` `generated.proto`).

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::object::walk;
use crate::rules::gvk;
use crate::{Direction, Rules};

/// The 4-byte prefix of Kubernetes protobuf bodies.
pub const MAGIC: &[u8] = b"k8s\0";

const ACCESS_REVIEWS: &[&str] = &[
    "SelfSubjectAccessReview",
    "SubjectAccessReview",
    "LocalSubjectAccessReview",
];

/// Rewrites a protobuf request body; the result is still protobuf.
pub fn rewrite(rules: &Rules, dir: Direction, body: &[u8]) -> Result<Vec<u8>> {
    let bad = |m: &str| Error::Patch(format!("invalid protobuf body: {m}"));
    let unknown = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s magic"))?;
    // runtime.Unknown: 1 typeMeta {1 apiVersion, 2 kind}, 2 raw, 3 contentEncoding, 4 contentType.
    let mut api_version = String::new();
    let mut kind = String::new();
    for f in fields(unknown)? {
        if f.num == 1 {
            for t in fields(f.bytes()?)? {
                match t.num {
                    1 => api_version = t.string()?.to_owned(),
                    2 => kind = t.string()?.to_owned(),
                    _ => {}
                }
            }
        }
    }
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    let review = group == "authorization.k8s.io" && ACCESS_REVIEWS.contains(&kind.as_str());
    let api_service = group == "apiregistration.k8s.io" && kind == "APIService";
    if !review && !api_service && !rules.plans.is_metadata_only(group, &kind) {
        return Err(Error::UnsupportedMediaType(format!(
            "application/vnd.kubernetes.protobuf ({kind}: send it as JSON, the rules rewrite more than its metadata)"
        )));
    }
    let out = edit(unknown, |f| match f.num {
        2 => edit(f.bytes()?, |o| match o.num {
            1 => edit(o.bytes()?, |m| metadata(rules, dir, m)),
            2 if review => edit(o.bytes()?, |s| match s.num {
                1 => resource_attributes(rules, dir, s.bytes()?),
                _ => Ok(None),
            }),
            // APIServiceSpec: 2 group.
            2 if api_service => edit(o.bytes()?, |s| match s.num {
                2 => {
                    let g = s.string()?;
                    let n = gvk::rewrite_group(rules, dir, g, None);
                    Ok((n != g).then(|| n.as_bytes().to_vec()))
                }
                _ => Ok(None),
            }),
            _ => Ok(None),
        }),
        _ => Ok(None),
    })?;
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&out.unwrap_or_else(|| unknown.to_vec()));
    Ok(v)
}

/// ObjectMeta: 11 labels, 12 annotations (map entries {1 key, 2 value}), 13 ownerReferences
/// {1 kind, 5 apiVersion}, 14 finalizers, 17 managedFields {3 apiVersion, 7 fieldsV1 {1 raw}}.
fn metadata(rules: &Rules, dir: Direction, f: &Field<'_>) -> Result<Option<Vec<u8>>> {
    fn names<'s>(
        r: &crate::rules::NameRules,
        dir: Direction,
        k: &'s str,
        v: &'s str,
    ) -> crate::rules::names::Renamed<'s> {
        match dir {
            Direction::Rename => r.rename(k, v),
            Direction::Restore => r.restore(k, v),
        }
    }
    match f.num {
        11 | 12 => {
            let r = if f.num == 11 {
                &rules.labels
            } else {
                &rules.annotations
            };
            let (mut k, mut v) = (String::new(), String::new());
            for e in fields(f.bytes()?)? {
                match e.num {
                    1 => k = e.string()?.to_owned(),
                    2 => v = e.string()?.to_owned(),
                    _ => {}
                }
            }
            let (nk, nv) = names(r, dir, &k, &v);
            if nk == k && nv == v {
                return Ok(None);
            }
            let mut entry = Vec::new();
            put_bytes(&mut entry, 1, nk.as_bytes());
            put_bytes(&mut entry, 2, nv.as_bytes());
            Ok(Some(entry))
        }
        14 => {
            let s = f.string()?;
            let n = names(&rules.finalizers, dir, s, "").0;
            Ok((n != s).then(|| n.into_owned().into_bytes()))
        }
        13 => {
            let (mut k, mut av) = (None, None);
            for e in fields(f.bytes()?)? {
                match e.num {
                    1 => k = Some(e.string()?.to_owned()),
                    5 => av = Some(e.string()?.to_owned()),
                    _ => {}
                }
            }
            let (nav, nk) = gvk::rewrite_gvk(rules, dir, av.as_deref(), k.as_deref(), None);
            if nav.is_none() && nk.is_none() {
                return Ok(None);
            }
            edit(f.bytes()?, |e| {
                Ok(match e.num {
                    1 => nk.clone().map(String::into_bytes),
                    5 => nav.clone().map(String::into_bytes),
                    _ => None,
                })
            })
        }
        17 => edit(f.bytes()?, |e| match e.num {
            3 => {
                let av = e.string()?;
                let n = match dir {
                    Direction::Rename => rules.rename_api_version(av),
                    Direction::Restore => rules.restore_api_version(av, None),
                };
                Ok(n.map(String::into_bytes))
            }
            7 => edit(e.bytes()?, |raw| match raw.num {
                1 => {
                    let json = raw.bytes()?;
                    let plan: &crate::rules::plan::Node = rules.plans.get("", "");
                    let Some(node) = ["metadata", "managedFields", "0", "fieldsV1"]
                        .iter()
                        .try_fold(plan, |n, k| n.step(k))
                    else {
                        return Ok(None);
                    };
                    let mut w = walk::Walker::new(rules, dir, json);
                    w.node(node)?;
                    w.sc.end()?;
                    let out = w.output();
                    Ok((out.as_ref() != json).then(|| out.into_owned()))
                }
                _ => Ok(None),
            }),
            _ => Ok(None),
        }),
        _ => Ok(None),
    }
}

/// ResourceAttributes: 3 group, 4 version, 5 resource.
fn resource_attributes(rules: &Rules, dir: Direction, attrs: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut v = json!({});
    for f in fields(attrs)? {
        let key = match f.num {
            3 => "group",
            4 => "version",
            5 => "resource",
            _ => continue,
        };
        v[key] = Value::String(f.string()?.to_owned());
    }
    let before = v.clone();
    if !gvk::resource_attributes(rules, dir, &mut v) || v == before {
        return Ok(None);
    }
    let out = edit(attrs, |f| {
        let key = match f.num {
            3 => "group",
            4 => "version",
            5 => "resource",
            _ => return Ok(None),
        };
        Ok(v[key].as_str().map(|s| s.as_bytes().to_vec()))
    })?;
    Ok(Some(out.unwrap_or_else(|| attrs.to_vec())))
}

/// One field of a protobuf message.
struct Field<'a> {
    num: u64,
    /// Wire type 2 (length-delimited) payload, or the raw value bytes of other types.
    payload: &'a [u8],
    /// The whole field as encoded (tag included).
    raw: &'a [u8],
    delimited: bool,
}

impl<'a> Field<'a> {
    fn bytes(&self) -> Result<&'a [u8]> {
        if self.delimited {
            Ok(self.payload)
        } else {
            Err(Error::Patch("invalid protobuf body: expected bytes".into()))
        }
    }

    fn string(&self) -> Result<&'a str> {
        std::str::from_utf8(self.bytes()?)
            .map_err(|_| Error::Patch("invalid protobuf body: string is not UTF-8".into()))
    }
}

fn varint(buf: &[u8], i: &mut usize) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let &b = buf
            .get(*i)
            .ok_or_else(|| Error::Patch("invalid protobuf body: truncated varint".into()))?;
        *i += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(Error::Patch("invalid protobuf body: varint too long".into()))
}

fn fields(buf: &[u8]) -> Result<Vec<Field<'_>>> {
    let bad = |m: &str| Error::Patch(format!("invalid protobuf body: {m}"));
    let mut out = Vec::new();
    let mut i = 0;
    while i < buf.len() {
        let start = i;
        let tag = varint(buf, &mut i)?;
        let (num, wire) = (tag >> 3, tag & 7);
        let (payload, delimited) = match wire {
            0 => {
                let s = i;
                varint(buf, &mut i)?;
                (&buf[s..i], false)
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                let p = buf.get(i..i + n).ok_or_else(|| bad("truncated fixed field"))?;
                i += n;
                (p, false)
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut i)?).map_err(|_| bad("length too large"))?;
                let end = i
                    .checked_add(len)
                    .filter(|&e| e <= buf.len())
                    .ok_or_else(|| bad("truncated field"))?;
                let p = &buf[i..end];
                i = end;
                (p, true)
            }
            _ => return Err(bad("unsupported wire type")),
        };
        out.push(Field {
            num,
            payload,
            raw: &buf[start..i],
            delimited,
        });
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, num: u64, b: &[u8]) {
    put_varint(out, (num << 3) | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Re-encodes a message, replacing the payload of length-delimited fields for which `f` returns
/// new bytes; `None` when nothing changed.
fn edit(buf: &[u8], mut f: impl FnMut(&Field<'_>) -> Result<Option<Vec<u8>>>) -> Result<Option<Vec<u8>>> {
    let mut out: Option<Vec<u8>> = None;
    let fs = fields(buf)?;
    for (i, field) in fs.iter().enumerate() {
        let new = if field.delimited { f(field)? } else { None };
        match (new, &mut out) {
            (Some(n), o) => {
                let o = o.get_or_insert_with(|| fs[..i].iter().flat_map(|x| x.raw.iter().copied()).collect());
                put_bytes(o, field.num, &n);
            }
            (None, Some(o)) => o.extend_from_slice(field.raw),
            (None, None) => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut tm = Vec::new();
        put_bytes(&mut tm, 1, api_version.as_bytes());
        put_bytes(&mut tm, 2, kind.as_bytes());
        let mut u = Vec::new();
        put_bytes(&mut u, 1, &tm);
        put_bytes(&mut u, 2, raw);
        put_bytes(&mut u, 4, b"application/vnd.kubernetes.protobuf");
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&u);
        v
    }

    fn find<'a>(buf: &'a [u8], path: &[u64]) -> Vec<&'a [u8]> {
        let Some((first, rest)) = path.split_first() else {
            return vec![buf];
        };
        fields(buf)
            .unwrap()
            .into_iter()
            .filter(|f| f.num == *first)
            .flat_map(|f| find(f.payload, rest))
            .collect()
    }

    #[test]
    fn renames_namespace_metadata() {
        let rules = Rules::builtin_kubevirt();
        let mut label = Vec::new();
        put_bytes(&mut label, 1, b"kubevirt.io/x");
        put_bytes(&mut label, 2, b"y");
        let mut meta = Vec::new();
        put_bytes(&mut meta, 1, b"ns1");
        put_bytes(&mut meta, 11, &label);
        put_bytes(&mut meta, 14, b"kubevirt.io/f");
        let mut ns = Vec::new();
        put_bytes(&mut ns, 1, &meta);
        put_bytes(&mut ns, 2, b"");
        let body = envelope("v1", "Namespace", &ns);
        let out = rewrite(&rules, Direction::Rename, &body).unwrap();
        let raw = find(&out[4..], &[2])[0];
        assert_eq!(
            find(raw, &[1, 11, 1]),
            [&b"kubevirt.internal.virtualization.deckhouse.io/x"[..]]
        );
        assert_eq!(find(raw, &[1, 11, 2]), [&b"y"[..]]);
        assert_eq!(
            find(raw, &[1, 14]),
            [&b"kubevirt.internal.virtualization.deckhouse.io/f"[..]]
        );
        assert_eq!(find(raw, &[1, 1]), [&b"ns1"[..]]);
        assert_eq!(rewrite(&rules, Direction::Restore, &out).unwrap(), body);
        // Nothing to change: the same bytes.
        let plain = envelope("v1", "Namespace", &[]);
        assert_eq!(rewrite(&rules, Direction::Rename, &plain).unwrap(), plain);
    }

    #[test]
    fn renames_access_review_attributes() {
        let rules = Rules::builtin_kubevirt();
        let mut attrs = Vec::new();
        put_bytes(&mut attrs, 1, b"demo");
        put_bytes(&mut attrs, 2, b"list");
        put_bytes(&mut attrs, 3, b"kubevirt.io");
        put_bytes(&mut attrs, 5, b"virtualmachines");
        let mut spec = Vec::new();
        put_bytes(&mut spec, 1, &attrs);
        let mut review = Vec::new();
        put_bytes(&mut review, 1, b"");
        put_bytes(&mut review, 2, &spec);
        let body = envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", &review);
        let out = rewrite(&rules, Direction::Rename, &body).unwrap();
        let raw = find(&out[4..], &[2])[0];
        assert_eq!(
            find(raw, &[2, 1, 3]),
            [&b"internal.virtualization.deckhouse.io"[..]]
        );
        assert_eq!(
            find(raw, &[2, 1, 5]),
            [&b"internalvirtualizationvirtualmachines"[..]]
        );
        assert_eq!(find(raw, &[2, 1, 2]), [&b"list"[..]]);
    }

    /// An APIService as virt-operator's aggregator client sends it: its labels and, where the
    /// rules rename it, its spec.group.
    #[test]
    fn rewrites_api_service_labels_and_group() {
        let mut label = Vec::new();
        put_bytes(&mut label, 1, b"kubevirt.io");
        put_bytes(&mut label, 2, b"virt-api-aggregator");
        let mut meta = Vec::new();
        put_bytes(&mut meta, 1, b"v1.subresources.kubevirt.io");
        put_bytes(&mut meta, 11, &label);
        let mut spec = Vec::new();
        put_bytes(&mut spec, 2, b"subresources.kubevirt.io");
        put_bytes(&mut spec, 3, b"v1");
        let mut obj = Vec::new();
        put_bytes(&mut obj, 1, &meta);
        put_bytes(&mut obj, 2, &spec);
        let body = envelope("apiregistration.k8s.io/v1", "APIService", &obj);

        let kubevirt = Rules::builtin_kubevirt();
        let out = rewrite(&kubevirt, Direction::Rename, &body).expect("rewritten");
        let raw = &find(&out[MAGIC.len()..], &[2])[0];
        assert_eq!(
            find(raw, &[1, 11, 1]),
            [&b"kubevirt.internal.virtualization.deckhouse.io"[..]]
        );
        // The KubeVirt rules leave subresources.kubevirt.io alone.
        assert_eq!(find(raw, &[2, 2]), [&b"subresources.kubevirt.io"[..]]);
        assert_eq!(
            rewrite(&kubevirt, Direction::Restore, &out).expect("restored"),
            body
        );

        let api = Rules::parse(&[crate::rules::Source {
            name: "rules/virtualization-api.yaml",
            text: include_str!("../../../rules/virtualization-api.yaml"),
        }])
        .expect("rules");
        let mut spec = Vec::new();
        put_bytes(&mut spec, 2, b"subresources.virtualization.deckhouse.io");
        let mut obj = Vec::new();
        put_bytes(&mut obj, 2, &spec);
        let body = envelope("apiregistration.k8s.io/v1", "APIService", &obj);
        let out = rewrite(&api, Direction::Rename, &body).expect("rewritten");
        let raw = &find(&out[MAGIC.len()..], &[2])[0];
        assert_eq!(find(raw, &[2, 2]), [&b"subresources.kubevirt.io"[..]]);
    }

    #[test]
    fn refuses_kinds_with_more_than_metadata_and_garbage() {
        let rules = Rules::builtin_kubevirt();
        let body = envelope("apps/v1", "Deployment", &[]);
        assert!(matches!(
            rewrite(&rules, Direction::Rename, &body),
            Err(Error::UnsupportedMediaType(_))
        ));
        for bad in [&b"k8s"[..], b"k8s\0\x0a\xff", b"k8s\0\x0a\x05ab", b"json"] {
            assert!(rewrite(&rules, Direction::Rename, bad).is_err());
        }
    }
}
