//! The CLI contract: `rewrite`, `rewrite-path`, `rules check`, `rules generate`; malformed input
//! exits 2 with one line naming the byte offset and nothing on stdout.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn fixtures() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-api-rewriter"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn rewrite_restores_a_list_and_renames_it_back() {
    let list = std::fs::read(fixtures().join("kube-apiserver-1.36/vm-list.json")).unwrap();
    let out = run(&["rewrite", "--restore"], &list);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let restored = text(&out.stdout);
    assert!(restored.contains(r#""kind":"VirtualMachineList""#));
    assert!(restored.contains(r#""kubevirt.io/created-by":"virt-controller""#));
    let back = run(&["rewrite", "--rename"], &out.stdout);
    assert!(back.status.success(), "{}", text(&back.stderr));
    assert_eq!(back.stdout, list);
}

#[test]
fn rewrite_with_a_path_makes_the_proxys_decisions() {
    // A path no rule touches: the body passes through unchanged, even if it looks renamed.
    let body =
        br#"{"apiVersion":"v1","kind":"ConfigMap","data":{"x":"internal.virtualization.deckhouse.io/v1"}}"#;
    let out = run(
        &[
            "rewrite",
            "--restore",
            "--path",
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/b",
        ],
        body,
    );
    assert!(out.status.success());
    assert_eq!(out.stdout, body);
    // A JSON patch for a VM, chosen by content type.
    let p = br#"[{"op":"add","path":"/metadata/labels/kubevirt.io~1x","value":"y"}]"#;
    let out = run(
        &[
            "rewrite",
            "--rename",
            "--method",
            "PATCH",
            "--path",
            "/apis/kubevirt.io/v1/namespaces/a/virtualmachines/b",
            "--content-type",
            "application/json-patch+json",
        ],
        p,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        r#"[{"op":"add","path":"/metadata/labels/kubevirt.internal.virtualization.deckhouse.io~1x","value":"y"}]"#
    );
}

#[test]
fn rewrite_watch_streams_events_one_per_line() {
    let w = std::fs::read(fixtures().join("kube-apiserver-1.36/watch-vm-events.json")).unwrap();
    let out = run(&["rewrite", "--restore", "--watch"], &w);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    // One line per event of the capture (its changes and bookmarks).
    assert_eq!(s.lines().count(), w.iter().filter(|&&b| b == b'\n').count());
    assert!(
        s.lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
    );
    assert!(!s.contains("InternalVirtualizationVirtualMachine"));
}

#[test]
fn malformed_input_exits_2_with_the_offset_and_no_output() {
    for (args, body) in [
        (
            &["rewrite", "--restore"][..],
            &br#"{"kind":"VirtualMachine","metadata":{"name":}}"#[..],
        ),
        (
            &["rewrite", "--restore"][..],
            br#"{"apiVersion":"v1","items":[{"a":1},{"b":]}"#,
        ),
        (
            &["rewrite", "--restore", "--watch"][..],
            b"{\"type\":\"ADDED\",\"object\":{}}\n{\"type\":",
        ),
    ] {
        let out = run(args, body);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("at byte "), "{err}");
    }
}

/// Every body kind the CLI parses, each malformed: exit 2, one line with the byte offset.
#[test]
fn malformed_input_of_every_body_kind_exits_2() {
    let vm = "/apis/kubevirt.io/v1/namespaces/a/virtualmachines";
    let crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io";
    let patch = |ct: &'static str| -> Vec<&'static str> {
        vec![
            "rewrite",
            "--rename",
            "--method",
            "PATCH",
            "--path",
            "/apis/kubevirt.io/v1/namespaces/a/virtualmachines/b",
            "--content-type",
            ct,
        ]
    };
    let review = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"metadata":{"labels":{"a":}}}}}"#;
    let cases: Vec<(Vec<&str>, &[u8])> = vec![
        // objects, lists and watches with a path
        (
            vec![
                "rewrite",
                "--restore",
                "--path",
                &*Box::leak(format!("{vm}/b").into_boxed_str()),
            ],
            br#"{"kind":"VirtualMachine","metadata":{"name":1,}}"#,
        ),
        (
            vec!["rewrite", "--restore", "--path", vm],
            br#"{"kind":"VirtualMachineList","items":[{"metadata":{"labels":{"a":"b"}}},]}"#,
        ),
        (
            vec![
                "rewrite",
                "--restore",
                "--path",
                &*Box::leak(format!("{vm}?watch=1").into_boxed_str()),
            ],
            b"{\"type\":\"ADDED\",\"object\":{\"kind\":}}\n",
        ),
        (
            vec!["rewrite", "--rename", "--method", "POST", "--path", vm],
            br#"{"kind":"VirtualMachine","metadata":{"name":"x"}"#,
        ),
        (
            vec!["rewrite", "--rename", "--method", "PUT", "--path", crd],
            br#"{"kind":"CustomResourceDefinition","spec":{"group":"kubevirt.io",,}}"#,
        ),
        (
            vec!["rewrite", "--restore", "--path", "/apis"],
            br#"{"kind":"APIGroupList","groups":[{"name":}]}"#,
        ),
        // patches by content type, with and without a path
        (
            patch("application/json-patch+json"),
            br#"[{"op":"add","path":"/metadata/labels","value":{"a":}}]"#,
        ),
        (
            patch("application/merge-patch+json"),
            br#"{"metadata":{"labels":{"a":"b"}}"#,
        ),
        (
            patch("application/strategic-merge-patch+json"),
            br#"{"metadata":{"labels":["#,
        ),
        (
            vec![
                "rewrite",
                "--rename",
                "--content-type",
                "application/json-patch+json",
            ],
            br#"[{"op":"add""#,
        ),
        // an AdmissionReview on a webhook path the rules name, without --webhook: both sides
        (
            vec![
                "rewrite",
                "--restore",
                "--method",
                "POST",
                "--path",
                "/virtualmachines-validate",
            ],
            review,
        ),
        (
            vec![
                "rewrite",
                "--rename",
                "--method",
                "POST",
                "--path",
                "/virtualmachines-validate",
            ],
            br#"{"kind":"AdmissionReview","response":{"uid":"u","allowed":tru}}"#,
        ),
    ];
    for (args, body) in cases {
        let out = run(&args, body);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: stdout: {}", text(&out.stdout));
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("at byte "), "{args:?}: {err}");
    }
    // A well-formed review on that path is restored without --webhook.
    let ok = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","resource":{"group":"internal.virtualization.deckhouse.io","version":"v1","resource":"internalvirtualizationvirtualmachines"},"requestResource":{"group":"internal.virtualization.deckhouse.io","version":"v1","resource":"internalvirtualizationvirtualmachines"},"object":{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{"name":"x"}}}}"#;
    let out = run(
        &[
            "rewrite",
            "--restore",
            "--method",
            "POST",
            "--path",
            "/virtualmachines-validate",
        ],
        ok,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["request"]["object"]["apiVersion"], "kubevirt.io/v1", "{v}");
    assert_eq!(v["request"]["resource"]["resource"], "virtualmachines", "{v}");
}

#[test]
fn rewrite_path_both_ways() {
    let out = run(
        &[
            "rewrite-path",
            "--rename",
            "--method",
            "GET",
            "--path",
            "/apis/kubevirt.io/v1/virtualmachines?labelSelector=kubevirt.io%2Fcreated-by%3Dx",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "/apis/internal.virtualization.deckhouse.io/v1/internalvirtualizationvirtualmachines?labelSelector=kubevirt.internal.virtualization.deckhouse.io%2Fcreated-by%3Dx"
    );
    let out = run(
        &[
            "rewrite-path",
            "--restore",
            "--path",
            "/apis/internal.virtualization.deckhouse.io/v1/internalvirtualizationvirtualmachines",
        ],
        b"",
    );
    assert_eq!(text(&out.stdout).trim(), "/apis/kubevirt.io/v1/virtualmachines");
}

#[test]
fn rules_check_and_generate() {
    let dir = std::env::temp_dir().join(format!("kar-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "kindPrefix: X\nlabels:\n  prefixes:\n    - {original: a.io, renamed: b.io, bogus: 1}\n",
    )
    .unwrap();
    let out = run(&["rules", "check", bad.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.yaml:4:"), "{err}");
    assert!(err.contains("bogus"), "{err}");

    let crds = fixtures().join("kubevirt-crds/original");
    let mut args = vec!["rules", "generate"];
    let files: Vec<String> = [
        "virtualmachines.yaml",
        "virtualmachineinstances.yaml",
        "kubevirt.yaml",
    ]
    .iter()
    .map(|f| crds.join(f).display().to_string())
    .collect();
    for f in &files {
        args.extend(["--crd", f]);
    }
    args.extend([
        "--group-map",
        "kubevirt.io=internal.virtualization.deckhouse.io",
        "--kind-prefix",
        "InternalVirtualization",
        "--resource-prefix",
        "internalvirtualization",
        "--short-name-prefix",
        "intvirt",
    ]);
    let out = run(&args, b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let generated = dir.join("generated.yaml");
    std::fs::write(&generated, &out.stdout).unwrap();
    let yaml = text(&out.stdout);
    assert!(
        yaml.contains("renamed: internal.virtualization.deckhouse.io"),
        "{yaml}"
    );
    assert!(yaml.contains("kind: VirtualMachineInstance"));
    // The generated rules rename a VM path exactly like the built-in set.
    let p = "/apis/kubevirt.io/v1/namespaces/a/virtualmachines/b";
    let a = run(
        &[
            "rewrite-path",
            "--rename",
            "--rules",
            generated.to_str().unwrap(),
            "--path",
            p,
        ],
        b"",
    );
    let b = run(&["rewrite-path", "--rename", "--path", p], b"");
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(a.stdout, b.stdout);
    let out = run(&["rules", "check", generated.to_str().unwrap()], b"");
    assert!(out.status.success());
    assert!(
        text(&out.stdout).starts_with("ok: 1 groups, 3 resources"),
        "{}",
        text(&out.stdout)
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn rules_diff_prints_changed_names_and_exits_1() {
    let dir = std::env::temp_dir().join(format!("kar-rules-diff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let old = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../rules/kubevirt.yaml"),
    )
    .unwrap();
    let new = old.replace(
        "renamed: clone.internal.virtualization.deckhouse.io",
        "renamed: clone.x.virtualization.deckhouse.io",
    );
    assert_ne!(old, new);
    let (a, b) = (dir.join("old.yaml"), dir.join("new.yaml"));
    std::fs::write(&a, &old).unwrap();
    std::fs::write(&b, &new).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let same = run(&["rules", "diff", a, a], b"");
    assert_eq!(same.status.code(), Some(0), "{}", text(&same.stderr));
    assert!(same.stdout.is_empty());
    let out = run(&["rules", "diff", a, b], b"");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let lines = text(&out.stdout);
    for want in [
        "- group clone.kubevirt.io -> clone.internal.virtualization.deckhouse.io",
        "+ group clone.kubevirt.io -> clone.x.virtualization.deckhouse.io",
        "- kind clone.kubevirt.io/VirtualMachineClone -> clone.internal.virtualization.deckhouse.io/InternalVirtualizationVirtualMachineClone",
        "+ resource clone.kubevirt.io/vmclone -> clone.x.virtualization.deckhouse.io/intvirtvmclone",
    ] {
        assert!(lines.lines().any(|l| l == want), "missing {want:?}:\n{lines}");
    }
    // Only the clone group's names differ.
    assert!(lines.lines().all(|l| l.contains("clone")), "{lines}");
    let bad = run(&["rules", "diff", a, "/nonexistent.yaml"], b"");
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
