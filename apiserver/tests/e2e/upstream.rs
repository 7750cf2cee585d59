//! What virt-api sees and sends back: only the configured identity reaches it, and its
//! `Status` errors come back to the client.

use kube_api_rewriter_testkit as tk;

use crate::client::vm_path;
use crate::env::{Env, Mode, SA};

/// Whatever identity the caller claims, virt-api sees only the service account: the server
/// replaces the aggregator's `X-Remote-*`; in sidecar mode a process that reaches the sidecar
/// itself with forged headers gets the same.
pub fn identity(e: &Env) {
    let last = || e.fake.all().last().cloned().expect("a request reached virt-api");
    let (code, body) = e.as_user(
        &e.server,
        "admin",
        &["system:masters", "system:authenticated"],
        &["-X", "PUT", "-d", "{}", "-H", "X-Remote-Extra-Scopes: all"],
        &vm_path("vm-running", "unfreeze"),
    );
    assert_eq!(code, 200, "{body}");
    let seen = last();
    assert!(
        seen.path.starts_with("/apis/subresources.kubevirt.io/v1/"),
        "{seen:?}"
    );
    assert_eq!(
        (seen.user.as_str(), seen.groups.clone()),
        (SA, vec!["system:serviceaccounts".to_owned()])
    );
    if e.mode == Mode::Direct {
        return;
    }
    let sidecar = &e.sidecars[0];
    let url = sidecar.url(
        "/apis/subresources.virtualization.deckhouse.io/v1alpha2/namespaces/demo/virtualmachineinstances/vm-running/unfreeze",
    );
    let out = tk::ok(&tk::curl(&[
        "-sS",
        "-X",
        "PUT",
        "-d",
        "{}",
        "-H",
        "X-Remote-User: system:admin",
        "-H",
        "X-Remote-Group: system:masters",
        "-H",
        "X-Remote-Extra-Scopes: all",
        "-w",
        "%{http_code}",
        &url,
    ]));
    assert_eq!(out, "200");
    let seen = last();
    assert_eq!(
        seen.path,
        "/apis/subresources.kubevirt.io/v1/namespaces/demo/virtualmachineinstances/vm-running/unfreeze"
    );
    assert_eq!(
        (seen.user.as_str(), seen.groups.clone()),
        (SA, vec!["system:serviceaccounts".to_owned()])
    );
    assert!(!seen.extra, "{seen:?}");
    // The sidecar is ready while virt-api answers its /readyz; the one in front of a closed
    // port is not.
    assert_eq!(sidecar.readyz(), "200");
    assert_ne!(e.sidecars[1].readyz(), "200");
}

/// A `Status` error from virt-api reaches the client: in direct mode as virt-api wrote it, in
/// sidecar mode with the group renamed back to ours.
pub fn virt_api_errors(e: &Env) {
    let (code, body) = e.admin(
        &e.server,
        &["-X", "PUT", "-d", "{}"],
        &vm_path("vm-stopped", "removevolume"),
    );
    assert_eq!(code, 404, "{body}");
    let st = tk::parse_json(&body);
    assert_eq!(
        (st["kind"].as_str(), st["reason"].as_str()),
        (Some("Status"), Some("NotFound")),
        "{body}"
    );
    let group = match e.mode {
        Mode::Direct => "subresources.kubevirt.io",
        Mode::Sidecar | Mode::KubeVirt => "subresources.virtualization.deckhouse.io",
    };
    assert_eq!(st["details"]["group"], group, "{body}");
    assert_eq!(st["details"]["kind"], "virtualmachineinstances", "{body}");
}
