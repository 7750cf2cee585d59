//! The snapshot API is optional: on a control plane without the `snapshot.storage.k8s.io` CRDs
//! the controller is ready all the same, a VM runs, and a VM snapshot waits with a condition
//! naming the missing API (nothing frozen); once the CRDs are applied, the same snapshot goes on
//! to Ready without a restart. On the way: a required API missing keeps it unready and is named
//! in `/readyz` and the log, and every failed list or watch names what it asked for.

use std::path::Path;

use kube_api_rewriter_testkit::*;

use crate::env::*;
use crate::snapshot::{handler_actions, running_vm_with_disks};

/// The served-API gauge of VolumeSnapshots, as `/metrics` writes it.
const GAUGE: &str = "virtualization_controller_api_served{group=\"snapshot.storage.k8s.io\",version=\"v1\",resource=\"volumesnapshots\"}";

fn snapshot_crds() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata/snapshot-crds")
        .to_str()
        .expect("utf-8")
        .to_owned()
}

/// Whether kube-apiserver's discovery serves VolumeSnapshots.
fn served(env: &Env) -> bool {
    let o = env
        .cp
        .kubectl(&["get", "--raw", "/apis/snapshot.storage.k8s.io/v1"]);
    o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"volumesnapshots\"")
}

/// Our VirtualMachinePools' CRD, which the case removes for a while: a required API.
fn pools_crd() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crds/virtualmachinepools.yaml")
        .to_str()
        .expect("utf-8")
        .to_owned()
}

/// Applies the CRDs the case removes again when dropped, so that a failure of the case does
/// not fail the cases after it.
struct Restore<'a>(&'a Env);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        for crds in [snapshot_crds(), pools_crd()] {
            let _ = self.0.cp.kubectl(&["apply", "-f", &crds]);
        }
    }
}

pub fn optional_snapshot_api(env: &Env) {
    let _restore = Restore(env);
    // The snapshot CRDs and one of ours go while the controller runs: the watches that fail
    // say which.
    ok(&env.cp.kubectl(&["delete", "-f", &snapshot_crds(), "--wait=true"]));
    ok(&env.cp.kubectl(&["delete", "-f", &pools_crd(), "--wait=true"]));
    env.wait("the snapshot API no longer served", || {
        if served(env) { Err("served".into()) } else { Ok(()) }
    });
    let line = env.wait("a log line naming the failed VolumeSnapshot watch", || {
        env.logs()
            .lines()
            .find(|l| {
                l.contains("\"watch failed\"")
                    && l.contains(
                        " volumesnapshots.snapshot.storage.k8s.io/v1 in all namespaces: 404 page not found",
                    )
            })
            .map(str::to_owned)
            .ok_or_else(|| "none yet".to_owned())
    });
    assert!(line.contains("\"controller\":\"VirtualDiskSnapshot\""), "{line}");
    assert!(!line.contains("Failed to parse error data"), "{line}");

    // Started without a required API: not ready, and /readyz and the log say which; the list
    // that fails names itself.
    env.restart_unready(env.mode());
    let body = env.wait("/readyz names the missing required API", || {
        let body = env.readyz();
        if body.contains("virtualmachinepools.virtualization.deckhouse.io/v1alpha2 (the controller's CRDs") {
            Ok(body)
        } else {
            Err(body)
        }
    });
    assert!(body.starts_with("not ready: required APIs not served:"), "{body}");
    let ctl = env.ctl();
    assert_eq!(ctl.get(ctl.health_port, "/readyz"), "503");
    drop(ctl);
    env.wait("the list of a required API that fails, named", || {
        env.logs()
            .lines()
            .find(|l| {
                l.contains("\"not ready\"")
                    && l.contains(
                        "list virtualmachinepools.virtualization.deckhouse.io/v1alpha2 in all namespaces: 404 page not found",
                    )
            })
            .map(str::to_owned)
            .ok_or_else(|| "none yet".to_owned())
    });
    env.wait("the log names the missing required API", || {
        let logs = env.logs();
        let named = logs.lines().any(|l| {
            l.contains("required API not served") && l.contains("\"resource\":\"virtualmachinepools\"")
        });
        if named { Ok(()) } else { Err("not yet".into()) }
    });

    // The required CRD comes back: ready, with the snapshot API still missing; what waits is
    // said once.
    ok(&env.cp.kubectl(&["apply", "-f", &pools_crd()]));
    env.wait_ready();
    let logs = env.logs();
    let said: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("optional API not served"))
        .collect();
    assert_eq!(said.len(), 1, "{logs}");
    for field in [
        "\"group\":\"snapshot.storage.k8s.io\"",
        "\"resource\":\"volumesnapshots\"",
        "\"version\":\"v1\"",
    ] {
        assert!(said[0].contains(field), "{}", said[0]);
    }
    assert!(
        env.metrics().contains(&format!("{GAUGE} 0\n")),
        "{}",
        env.metrics()
    );

    let ns = env.namespace("no-snapshot-api");
    let ns = ns.as_str();
    running_vm_with_disks(env, ns, "app");
    env.apply(&format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineSnapshot\nmetadata: {{name: waits, namespace: {ns}}}\nspec: {{virtualMachineName: app, requiredConsistency: true}}\n"
    ));
    let s = env.wait("the VM snapshot names the missing API", || {
        let s = env.get(VMSNAPSHOT, ns, "waits").ok_or("no snapshot")?;
        match cond(&s, "Ready") {
            Some((st, reason, msg)) if st == "False" && reason == "SnapshotAPINotServed" => Ok((s, msg)),
            _ => Err(s["status"].to_string()),
        }
    });
    let (s, msg) = s;
    assert_eq!(s["status"]["phase"], "Pending", "{s}");
    assert!(
        msg.contains("volumesnapshots.snapshot.storage.k8s.io/v1"),
        "{msg}"
    );
    assert!(
        handler_actions(env, ns, "app").is_empty(),
        "the guest was frozen while nothing could be taken"
    );
    assert!(
        env.get(VDSNAPSHOT, ns, "waits-app-root").is_none(),
        "a disk snapshot was made"
    );
    assert!(env.ctl().alive(), "{}", env.logs());

    // The CRDs come back: the same snapshot is taken, consistently, by the same process.
    let pid = env.ctl().child.id();
    ok(&env.cp.kubectl(&["apply", "-f", &snapshot_crds()]));
    if let Some(err) = wait_crd_established(&env.sidecar, VOLUME_SNAPSHOT) {
        panic!("{VOLUME_SNAPSHOT}: {err}");
    }
    let s = env.wait("the VM snapshot Ready once the API is served", || {
        let s = env.get(VMSNAPSHOT, ns, "waits").ok_or("no snapshot")?;
        match s["status"]["phase"].as_str() {
            Some("Ready") => Ok(s),
            Some("Failed") => panic!("failed: {s}"),
            _ => Err(s["status"].to_string()),
        }
    });
    assert_eq!(s["status"]["consistent"], true, "{s}");
    assert_eq!(handler_actions(env, ns, "app"), ["freeze", "unfreeze"]);
    let vds = env.get(VDSNAPSHOT, ns, "waits-app-root").expect("disk snapshot");
    assert_eq!(vds["status"]["phase"], "Ready", "{vds}");
    assert_eq!(env.ctl().child.id(), pid, "the controller was restarted");
    env.wait("the gauge says served", || {
        let m = env.metrics();
        if m.contains(&format!("{GAUGE} 1\n")) {
            Ok(())
        } else {
            Err(m)
        }
    });
    assert_eq!(
        env.logs()
            .lines()
            .filter(|l| l.contains("\"API served now\"") && l.contains("\"resource\":\"volumesnapshots\""))
            .count(),
        1,
        "{}",
        env.logs()
    );
}
