//! JSON to YAML for clients that ask for `application/yaml`.
//!
//! kube-apiserver serves YAML for single objects, non-streaming lists, Tables and errors when
//! asked; a rewriting proxy asks upstream for JSON (the only text form it rewrites), restores
//! it, and converts the result here. The conversion goes through a `serde_json::Value` (with
//! `preserve_order`, so keys stay in the order the server sent them; kube-apiserver's own YAML
//! sorts them, which no client relies on) and serde-saphyr's emitter, which quotes every string
//! a YAML 1.1 or 1.2 reader would take for something else (`"yes"`, `"1.0"`, `"null"`,
//! `"0x1F"`), as Go's YAML emitter does: the YAML read back is the JSON value, key for key.

use serde_json::Value;

use crate::error::{Error, Result};

/// Converts a JSON document to YAML (one document, no `---`).
///
/// Bodies are read with serde_json's limits (128 levels of nesting): a deeper one is an error,
/// as is anything that is not a single JSON value.
///
/// ```
/// let yaml = kube_api_rewriter::yaml::json_to_yaml(
///     br#"{"kind":"ConfigMap","apiVersion":"v1","data":{"a":"yes","b":"1.0","n":1}}"#,
/// ).unwrap();
/// // `n` is a boolean to a YAML 1.1 reader, so even the key is quoted.
/// assert_eq!(yaml, "kind: ConfigMap\napiVersion: v1\ndata:\n  a: \"yes\"\n  b: \"1.0\"\n  \"n\": 1\n");
/// ```
pub fn json_to_yaml(json: &[u8]) -> Result<String> {
    let v: Value =
        serde_json::from_slice(json).map_err(|e| Error::Yaml(format!("converting JSON to YAML: {e}")))?;
    serde_saphyr::to_string(&v).map_err(|e| Error::Yaml(format!("converting JSON to YAML: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The YAML read back (as kube-apiserver's YAML 1.1 reading of request bodies does, and as
    /// a YAML 1.2 reader does) is the JSON value.
    fn round_trips(json: &str) {
        let yaml = json_to_yaml(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"));
        let want: Value = serde_json::from_str(json).expect("json");
        // What `patch::yaml_to_json` reads request bodies with (not through its JSON text:
        // serde_json reads some floats one ULP off).
        let opts = serde_saphyr::options! { legacy_octal_numbers: true };
        let back: Value = serde_saphyr::from_str_with_options(&yaml, opts).expect("yaml 1.1");
        assert_eq!(back, want, "YAML 1.1 reading of {yaml}");
        let back: Value = serde_saphyr::from_str(&yaml).expect("yaml");
        assert_eq!(back, want, "YAML reading of {yaml}");
    }

    #[test]
    fn keys_keep_their_order() {
        let yaml =
            json_to_yaml(br#"{"kind":"X","apiVersion":"v1","metadata":{"name":"a"},"b":[],"a":{}}"#).unwrap();
        assert_eq!(
            yaml,
            "kind: X\napiVersion: v1\nmetadata:\n  name: a\nb: []\na: {}\n"
        );
    }

    #[test]
    fn ambiguous_strings_and_numbers_round_trip() {
        for s in [
            "yes",
            "no",
            "on",
            "off",
            "y",
            "n",
            "true",
            "null",
            "~",
            "",
            " ",
            "1",
            "1.0",
            "-1",
            "0x1F",
            "0o17",
            "0777",
            "1e3",
            ".inf",
            "-.nan",
            "1:20",
            "2026-12-01",
            "2026-12-01T00:51:14Z",
            "- x",
            "? x",
            ": x",
            "#c",
            "a #c",
            "a: b",
            "&a",
            "*a",
            "!t",
            "|",
            ">",
            "%x",
            "@x",
            "`x",
            "'q'",
            "\"q\"",
            "  lead",
            "trail  ",
            "multi\nline\n",
            "multi\nline",
            "\n",
            "\n\n",
            "a\n\n",
            " \nx",
            "tab\tx",
            "cr\rx",
            "\u{0}\u{7}\u{1b}",
            "\u{85}\u{2028}\u{feff}",
            "é😀",
            "{a}",
            "[a]",
            "a,b",
            "=",
            "<<",
        ] {
            let json = serde_json::to_string(&serde_json::json!({ "k": s, "l": [s], s: 1 })).unwrap();
            round_trips(&json);
        }
        let long = "word ".repeat(40);
        round_trips(&serde_json::to_string(&serde_json::json!({ "k": long, "m": long.trim_end() })).unwrap());
        for n in [
            "0",
            "-0",
            "1",
            "-1",
            "1.5",
            "-0.0",
            "1e21",
            "1E-7",
            "9223372036854775807",
            "18446744073709551615",
            "-9223372036854775808",
            "0.1",
            "123456789.123456789",
        ] {
            round_trips(&format!("{{\"n\":{n},\"l\":[{n}]}}"));
        }
        round_trips(r#"{"a":null,"b":true,"c":false,"d":[[],{},[{}]],"e":{"f":{"g":[1,[2,[3]]]}}}"#);
        round_trips(r#"[1,"a",{"b":[]}]"#);
        round_trips(r#""just a string""#);
    }

    #[test]
    fn not_json_is_an_error() {
        for bad in [&b"{"[..], b"", b"{} {}", b"\xff"] {
            let e = json_to_yaml(bad).unwrap_err();
            assert!(matches!(e, Error::Yaml(_)), "{e}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(json_to_yaml(deep.as_bytes()).is_err());
    }
}
