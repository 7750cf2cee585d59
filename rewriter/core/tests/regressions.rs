//! Inputs the fuzzers found (`tests/regressions/<target>-<n>.bin`, the fuzz targets' byte
//! layout: for the stream targets a direction byte, a split byte, then the body; for `object` a
//! flags byte, then the body). Stream inputs must give the same verdict whole and in 1-byte
//! pieces, and any output must be valid JSON; object inputs are accepted exactly when
//! serde_json accepts them.

use kube_api_rewriter::object::Context;
use kube_api_rewriter::stream::{ListRewriter, WatchRewriter};
use kube_api_rewriter::{Direction, Rules};

fn run(kind: &str, dir: Direction, body: &[u8], pieces: usize) -> (Vec<u8>, bool) {
    let rules = Rules::builtin_kubevirt();
    let mut out = Vec::new();
    let ok = if kind == "list_stream" {
        let mut l = ListRewriter::new(&rules, dir, Context::default());
        body.chunks(pieces)
            .try_for_each(|c| l.feed(c, &mut out))
            .and_then(|()| l.finish(&mut out))
            .is_ok()
    } else {
        let mut w = WatchRewriter::new(&rules, dir, Context::default());
        body.chunks(pieces)
            .try_for_each(|c| w.feed(c, &mut out))
            .and_then(|()| w.finish(&mut out))
            .is_ok()
    };
    (out, ok)
}

#[test]
fn fuzzer_findings_stay_fixed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("object-") {
            object_verdict_matches_serde(&name, &std::fs::read(&path).unwrap());
            n += 1;
            continue;
        }
        let Some(kind) = ["list_stream", "watch_stream"]
            .into_iter()
            .find(|k| name.starts_with(k))
        else {
            continue;
        };
        let data = std::fs::read(&path).unwrap();
        let d = if data[0] & 1 == 1 {
            Direction::Rename
        } else {
            Direction::Restore
        };
        let body = &data[2..];
        let (whole, ok_whole) = run(kind, d, body, body.len().max(1));
        let (ones, ok_ones) = run(kind, d, body, 1);
        assert_eq!(ok_whole, ok_ones, "{name}: verdict depends on the split");
        if ok_whole {
            assert_eq!(whole, ones, "{name}: output depends on the split");
            let docs: Result<Vec<serde_json::Value>, _> =
                serde_json::Deserializer::from_slice(&whole).into_iter().collect();
            assert!(
                docs.is_ok(),
                "{name}: invalid output {:?}",
                String::from_utf8_lossy(&whole)
            );
        }
        n += 1;
    }
    assert!(n >= 3, "regression inputs found: {n}");
}

fn object_verdict_matches_serde(name: &str, data: &[u8]) {
    let rules = Rules::builtin_kubevirt();
    let body = &data[1..];
    let theirs = serde_json::from_slice::<serde_json::Value>(body).is_ok();
    for d in [Direction::Rename, Direction::Restore] {
        let ours = kube_api_rewriter::object::rewrite(&rules, d, body, &Context::default());
        assert_eq!(ours.is_ok(), theirs, "{name} {d:?}: {ours:?}");
    }
}
