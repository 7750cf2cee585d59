//! OpenAPI v2 as protobuf: gnostic's `openapi.v2.Document`
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), the form kubectl and
//! client-go ask `/openapi/v2` for.
//!
//! The document is rewritten on the wire with prost's encoding primitives: the walker follows
//! only the messages that can hold a name (paths, definitions, schemas and their `_ref`s,
//! parameters and responses, vendor extensions), replaces the few fields that change and copies
//! every other field's bytes as they are, so the output is the input except for the renamed
//! names. A message whose subtree changes is re-encoded with its new length; an unchanged one
//! is never copied into a new buffer. The field numbers are gnostic's `OpenAPIv2.proto`.
//!
//! The vendor extensions that carry names (`x-kubernetes-group-version-kind`) are decoded and
//! encoded with `#[derive(prost::Message)]` types (`NamedAny`, `Any`): their messages are
//! known completely. The rest of the document is deliberately not decoded into derived types:
//! prost keeps no unknown fields (see the `prost_drops_unknown_fields` test), so decoding
//! through a hand-written subset of gnostic's ~60 message types would lose every field left
//! out, and decoding through all of them would build a tree several times the document's size
//! only to encode the same bytes again.

use prost::Message;
use prost::bytes::Buf;
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};

use crate::Rules;
use crate::error::{Error, Result};

/// gnostic `openapi.v2.NamedAny`: one vendor extension.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct NamedAny {
    /// The extension's name (`x-kubernetes-group-version-kind`).
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    /// Its value.
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<Any>,
}

/// gnostic `openapi.v2.Any`: a value as YAML text (kube-apiserver sets `yaml`).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct Any {
    /// A `google.protobuf.Any` (unused by kube-apiserver).
    #[prost(message, optional, tag = "1")]
    pub(crate) value: Option<ProtoAny>,
    /// The value as YAML.
    #[prost(string, tag = "2")]
    pub(crate) yaml: String,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct ProtoAny {
    /// Type URL.
    #[prost(string, tag = "1")]
    pub(crate) type_url: String,
    /// Encoded message.
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) value: Vec<u8>,
}

/// The messages the walker descends into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Document,
    Paths,
    NamedPathItem,
    PathItem,
    Operation,
    ParametersItem,
    Parameter,
    BodyParameter,
    JsonReference,
    Responses,
    NamedResponseValue,
    ResponseValue,
    Response,
    SchemaItem,
    Schema,
    AdditionalPropertiesItem,
    ItemsItem,
    Properties,
    NamedSchema,
    /// A `NamedSchema` of `definitions`: its name is a definition name.
    DefinitionEntry,
    Definitions,
    ParameterDefinitions,
    NamedParameter,
    ResponseDefinitions,
    NamedResponse,
}

/// What a length-delimited field of a message is.
enum Field {
    /// A message to walk.
    Msg(Msg),
    /// A definition (schema) name.
    DefinitionName,
    /// A path of `paths`.
    PathName,
    /// A `_ref`.
    Ref,
    /// A `NamedAny` vendor extension.
    Extension,
}

/// The fields of `m` that can hold names (gnostic `OpenAPIv2.proto` numbers).
fn field(m: Msg, num: u32) -> Option<Field> {
    use Field::{DefinitionName, Extension, PathName, Ref};
    let msg = |m| Some(Field::Msg(m));
    match (m, num) {
        (Msg::Document, 8) => msg(Msg::Paths),
        (Msg::Document, 9) => msg(Msg::Definitions),
        (Msg::Document, 10) => msg(Msg::ParameterDefinitions),
        (Msg::Document, 11) => msg(Msg::ResponseDefinitions),
        (Msg::Document, 16) => Some(Extension),
        (Msg::Paths, 1) => Some(Extension),
        (Msg::Paths, 2) => msg(Msg::NamedPathItem),
        (Msg::NamedPathItem, 1) => Some(PathName),
        (Msg::NamedPathItem, 2) => msg(Msg::PathItem),
        (Msg::PathItem, 1) => Some(Ref),
        (Msg::PathItem, 2..=8) => msg(Msg::Operation),
        (Msg::PathItem, 9) => msg(Msg::ParametersItem),
        (Msg::PathItem, 10) => Some(Extension),
        (Msg::Operation, 8) => msg(Msg::ParametersItem),
        (Msg::Operation, 9) => msg(Msg::Responses),
        (Msg::Operation, 13) => Some(Extension),
        (Msg::ParametersItem, 1) => msg(Msg::Parameter),
        (Msg::ParametersItem, 2) => msg(Msg::JsonReference),
        (Msg::Parameter, 1) => msg(Msg::BodyParameter),
        (Msg::BodyParameter, 5) => msg(Msg::Schema),
        (Msg::BodyParameter, 6) => Some(Extension),
        (Msg::JsonReference, 1) => Some(Ref),
        (Msg::Responses, 1) => msg(Msg::NamedResponseValue),
        (Msg::Responses, 2) => Some(Extension),
        (Msg::NamedResponseValue, 2) => msg(Msg::ResponseValue),
        (Msg::ResponseValue, 1) => msg(Msg::Response),
        (Msg::ResponseValue, 2) => msg(Msg::JsonReference),
        (Msg::Response, 2) => msg(Msg::SchemaItem),
        (Msg::Response, 5) => Some(Extension),
        (Msg::SchemaItem, 1) => msg(Msg::Schema),
        (Msg::Schema, 1) => Some(Ref),
        (Msg::Schema, 21) => msg(Msg::AdditionalPropertiesItem),
        (Msg::Schema, 23) => msg(Msg::ItemsItem),
        (Msg::Schema, 24) => msg(Msg::Schema),
        (Msg::Schema, 25) => msg(Msg::Properties),
        (Msg::Schema, 31) => Some(Extension),
        (Msg::AdditionalPropertiesItem, 1) => msg(Msg::Schema),
        (Msg::ItemsItem, 1) => msg(Msg::Schema),
        (Msg::Properties, 1) => msg(Msg::NamedSchema),
        (Msg::NamedSchema, 2) => msg(Msg::Schema),
        (Msg::Definitions, 1) => msg(Msg::DefinitionEntry),
        (Msg::DefinitionEntry, 1) => Some(DefinitionName),
        (Msg::DefinitionEntry, 2) => msg(Msg::Schema),
        (Msg::ParameterDefinitions, 1) => msg(Msg::NamedParameter),
        (Msg::NamedParameter, 2) => msg(Msg::Parameter),
        (Msg::ResponseDefinitions, 1) => msg(Msg::NamedResponse),
        (Msg::NamedResponse, 2) => msg(Msg::Response),
        _ => None,
    }
}

/// Schemas nest this deep at most (kube-apiserver's are a few dozen levels).
const MAX_DEPTH: u32 = 100;

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::OpenApi(format!("invalid OpenAPI v2 protobuf: {msg}"))
}

/// Restores an OpenAPI v2 protobuf document for clients; `None` when nothing changes.
///
/// ```
/// use kube_api_rewriter::{Rules, openapi};
/// let rules = Rules::builtin_kubevirt();
/// assert_eq!(openapi::proto::restore(&rules, b"\n\x032.0").unwrap(), None);
/// assert!(openapi::proto::restore(&rules, b"\n\x09").is_err());
/// ```
pub fn restore(rules: &Rules, doc: &[u8]) -> Result<Option<Vec<u8>>> {
    Walker { rules }.message(Msg::Document, doc, 0)
}

struct Walker<'r> {
    rules: &'r Rules,
}

impl Walker<'_> {
    /// Walks one message; returns its new encoding when something in it changed.
    fn message(&self, m: Msg, buf: &[u8], depth: u32) -> Result<Option<Vec<u8>>> {
        if depth > MAX_DEPTH {
            return Err(bad("nested too deep"));
        }
        let mut out: Option<Vec<u8>> = None;
        let mut rest = buf;
        while !rest.is_empty() {
            let field_start = buf.len() - rest.len();
            let (num, wt) = decode_key(&mut rest).map_err(bad)?;
            let new = if wt == WireType::LengthDelimited {
                let len = decode_varint(&mut rest).map_err(bad)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= rest.len())
                    .ok_or_else(|| bad("truncated field"))?;
                let value = &rest[..len];
                rest.advance(len);
                match field(m, num) {
                    Some(f) => self.field(f, value, depth)?,
                    None => None,
                }
            } else {
                skip(wt, &mut rest)?;
                None
            };
            let field_end = buf.len() - rest.len();
            match (new, &mut out) {
                (Some(v), o) => {
                    let o = o.get_or_insert_with(|| {
                        let mut o = Vec::with_capacity(buf.len() + 64);
                        o.extend_from_slice(&buf[..field_start]);
                        o
                    });
                    encode_key(num, WireType::LengthDelimited, o);
                    encode_varint(v.len() as u64, o);
                    o.extend_from_slice(&v);
                }
                (None, Some(o)) => o.extend_from_slice(&buf[field_start..field_end]),
                (None, None) => {}
            }
        }
        Ok(out)
    }

    fn field(&self, f: Field, value: &[u8], depth: u32) -> Result<Option<Vec<u8>>> {
        let text = || std::str::from_utf8(value).map_err(|_| bad("a string is not UTF-8"));
        Ok(match f {
            Field::Msg(m) => self.message(m, value, depth + 1)?,
            Field::DefinitionName => super::restore_definition(self.rules, text()?).map(String::into_bytes),
            Field::PathName => super::restore_api_path(self.rules, text()?).map(String::into_bytes),
            Field::Ref => super::restore_ref(self.rules, text()?).map(String::into_bytes),
            Field::Extension => self.extension(value)?,
        })
    }

    /// A vendor extension: `x-kubernetes-group-version-kind` entries restored in its YAML.
    fn extension(&self, value: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut ext = NamedAny::decode(value).map_err(bad)?;
        if ext.name != "x-kubernetes-group-version-kind" {
            return Ok(None);
        }
        let Some(any) = ext.value.as_mut() else {
            return Ok(None);
        };
        let Some(yaml) = restore_gvk_yaml(self.rules, &any.yaml) else {
            return Ok(None);
        };
        any.yaml = yaml;
        Ok(Some(ext.encode_to_vec()))
    }
}

/// Skips a field value that is not length-delimited.
fn skip(wt: WireType, rest: &mut &[u8]) -> Result<()> {
    let n = match wt {
        WireType::Varint => {
            decode_varint(rest).map_err(bad)?;
            0
        }
        WireType::SixtyFourBit => 8,
        WireType::ThirtyTwoBit => 4,
        WireType::StartGroup | WireType::EndGroup => return Err(bad("groups are not used by OpenAPI")),
        WireType::LengthDelimited => unreachable!("handled by the caller"),
    };
    if rest.len() < n {
        return Err(bad("truncated field"));
    }
    rest.advance(n);
    Ok(())
}

/// Restores the entries of an `x-kubernetes-group-version-kind` value written as YAML
/// (`- group: G\n  kind: K\n  version: V\n`, or one mapping); `None` when nothing changes.
/// Only the three values are replaced; the text around them is kept.
pub(crate) fn restore_gvk_yaml(rules: &Rules, yaml: &str) -> Option<String> {
    let v: serde_json::Value = serde_saphyr::from_str(yaml).ok()?;
    let entries: Vec<&serde_json::Value> = match &v {
        serde_json::Value::Array(a) => a.iter().collect(),
        o @ serde_json::Value::Object(_) => vec![o],
        _ => return None,
    };
    // One restored triple per entry, in order; the text is edited entry by entry.
    let mut restored = Vec::with_capacity(entries.len());
    let mut any = false;
    for e in &entries {
        let s = |k: &str| e.get(k).and_then(serde_json::Value::as_str);
        let new = match (s("group"), s("version"), s("kind")) {
            (Some(g), Some(v), Some(k)) => super::restore_group_version_kind(rules, g, v, k)
                .map(|n| ([g.to_owned(), v.to_owned(), k.to_owned()], [n.0, n.1, n.2])),
            _ => None,
        };
        any |= new.is_some();
        restored.push(new);
    }
    if !any {
        return None;
    }
    let mut out = String::with_capacity(yaml.len());
    let mut entry = 0usize;
    let mut seen_entry = false;
    for line in yaml.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let starts_entry = trimmed.starts_with("- ");
        if starts_entry {
            if seen_entry {
                entry += 1;
            }
            seen_entry = true;
        }
        let body = trimmed.strip_prefix("- ").unwrap_or(trimmed);
        let mut replaced = None;
        if let Some(Some((old, new))) = restored.get(entry)
            && let Some((key, val)) = body.split_once(':')
        {
            let idx = match key {
                "group" => Some(0),
                "version" => Some(1),
                "kind" => Some(2),
                _ => None,
            };
            if let Some(i) = idx {
                let val_trim = val.trim();
                if val_trim == old[i] && old[i] != new[i] {
                    let pos =
                        line.len() - line.trim_start().len() + (trimmed.len() - body.len()) + key.len() + 1;
                    let lead = &val[..val.len() - val.trim_start().len()];
                    let tail = &val[val.trim_end().len()..];
                    replaced = Some(format!("{}{lead}{}{tail}", &line[..pos], new[i]));
                }
            }
        }
        out.push_str(replaced.as_deref().unwrap_or(line));
    }
    // The edit must say exactly what was meant: check by reading it back.
    let back: serde_json::Value = serde_saphyr::from_str(&out).ok()?;
    let back: Vec<&serde_json::Value> = match &back {
        serde_json::Value::Array(a) => a.iter().collect(),
        o @ serde_json::Value::Object(_) => vec![o],
        _ => return None,
    };
    let ok = back.len() == restored.len()
        && back.iter().zip(&restored).zip(&entries).all(|((b, r), e)| {
            let want = match r {
                Some((_, n)) => n.clone(),
                None => ["group", "version", "kind"]
                    .map(|k| e.get(k).and_then(|x| x.as_str()).unwrap_or("").to_owned()),
            };
            ["group", "version", "kind"]
                .iter()
                .zip(&want)
                .all(|(k, w)| b.get(*k).and_then(|x| x.as_str()).unwrap_or("") == w)
        });
    ok.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GVK: &str = "- group: internal.virtualization.deckhouse.io\n  kind: InternalVirtualizationVirtualMachine\n  version: v1\n";

    fn named_any(name: &str, yaml: &str) -> Vec<u8> {
        NamedAny {
            name: name.into(),
            value: Some(Any {
                value: None,
                yaml: yaml.into(),
            }),
        }
        .encode_to_vec()
    }

    fn put(out: &mut Vec<u8>, num: u32, v: &[u8]) {
        encode_key(num, WireType::LengthDelimited, out);
        encode_varint(v.len() as u64, out);
        out.extend_from_slice(v);
    }

    #[test]
    fn gvk_yaml() {
        let r = Rules::builtin_kubevirt();
        assert_eq!(
            restore_gvk_yaml(&r, GVK).as_deref(),
            Some("- group: kubevirt.io\n  kind: VirtualMachine\n  version: v1\n")
        );
        assert_eq!(
            restore_gvk_yaml(&r, "group: \"\"\nkind: Pod\nversion: v1\n"),
            None
        );
        assert_eq!(restore_gvk_yaml(&r, "not: [yaml"), None);
    }

    #[test]
    fn document() {
        let r = Rules::builtin_kubevirt();
        // Definitions { NamedSchema { name, Schema { 31 gvk, 25 Properties { NamedSchema { metadata, Schema { 1 _ref } } } } } }
        let mut prop_schema = Vec::new();
        put(
            &mut prop_schema,
            1,
            b"#/definitions/io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachineList",
        );
        let mut named_prop = Vec::new();
        put(&mut named_prop, 1, b"spec");
        put(&mut named_prop, 2, &prop_schema);
        let mut props = Vec::new();
        put(&mut props, 1, &named_prop);
        let mut schema = Vec::new();
        put(&mut schema, 4, b"a description");
        put(&mut schema, 25, &props);
        put(
            &mut schema,
            31,
            &named_any("x-kubernetes-group-version-kind", GVK),
        );
        let mut ns = Vec::new();
        put(
            &mut ns,
            1,
            b"io.deckhouse.virtualization.internal.v1.InternalVirtualizationVirtualMachine",
        );
        put(&mut ns, 2, &schema);
        let mut defs = Vec::new();
        put(&mut defs, 1, &ns);
        let mut doc = Vec::new();
        put(&mut doc, 1, b"2.0");
        // A varint and a fixed64 field the walker must copy as they are.
        encode_key(99, WireType::Varint, &mut doc);
        encode_varint(300, &mut doc);
        encode_key(98, WireType::SixtyFourBit, &mut doc);
        doc.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        put(&mut doc, 9, &defs);
        let out = restore(&r, &doc).expect("valid").expect("changed");
        let text = String::from_utf8_lossy(&out);
        for want in [
            "io.kubevirt.v1.VirtualMachine",
            "#/definitions/io.kubevirt.v1.VirtualMachineList",
            "group: kubevirt.io",
            "kind: VirtualMachine\n",
            "a description",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }
        assert!(!text.contains("nternal"), "{text}");
        assert_eq!(&out[..5], &doc[..5]);
        // Nothing to restore: untouched.
        assert_eq!(restore(&r, &doc[..5]).expect("valid"), None);
        // Cut anywhere: an error or a valid prefix, never a panic.
        for n in 0..doc.len() {
            let _ = restore(&r, &doc[..n]);
        }
    }

    /// Why the document is not decoded into derived types: prost drops fields it does not
    /// declare, so a subset of gnostic's messages would lose data on the way through.
    #[test]
    fn prost_drops_unknown_fields() {
        let mut bytes = named_any("x-other", "a: b\n");
        put(&mut bytes, 7, b"a field NamedAny does not declare");
        let decoded = NamedAny::decode(bytes.as_slice()).expect("decodes");
        assert!(decoded.encode_to_vec().len() < bytes.len());
    }
}
