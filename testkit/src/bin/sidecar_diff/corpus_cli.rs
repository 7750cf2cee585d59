//! The kubectl and kube-rs part of the corpus.

use super::{Case, KubeRsCase, Step, Touch};

fn cmd(name: &'static str, touch: Touch, args: &[&'static str]) -> Case {
    Case {
        name,
        touch,
        step: Step::Kubectl {
            args: args.to_vec(),
            stdin: None,
        },
    }
}

fn cmd_in(name: &'static str, touch: Touch, args: &[&'static str], stdin: &str) -> Case {
    Case {
        name,
        touch,
        step: Step::Kubectl {
            args: args.to_vec(),
            stdin: Some(stdin.to_owned()),
        },
    }
}

fn vm_yaml(name: &str, extra_label: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: {name}\n  namespace: '{{ns}}'\n  labels:\n    kubevirt.io/vm: {name}\n    side: '{{ns}}'{extra_label}\n  annotations:\n    kubevirt.io/note: diff\nspec:\n  running: false\n  template:\n    metadata:\n      labels: {{kubevirt.io/domain: {name}}}\n    spec:\n      domain:\n        devices: {{}}\n        resources: {{requests: {{memory: 64Mi}}}}\n"
    )
}

pub fn kubectl_cases() -> Vec<Case> {
    vec![
        cmd("kubectl_get", Touch::Renamed, &["get", "vm", "-n", "{ns}"]),
        cmd(
            "kubectl_get_wide",
            Touch::Renamed,
            &["get", "vm", "-n", "{ns}", "-o", "wide"],
        ),
        cmd(
            "kubectl_get_json",
            Touch::Renamed,
            &["get", "virtualmachines", "-n", "{ns}", "-o", "json"],
        ),
        cmd(
            "kubectl_get_yaml",
            Touch::Renamed,
            &["get", "vm", "vm1", "-n", "{ns}", "-o", "yaml"],
        ),
        cmd(
            "kubectl_get_short_name",
            Touch::Renamed,
            &["get", "vmi", "-n", "{ns}", "-o", "name"],
        ),
        cmd(
            "kubectl_get_qualified",
            Touch::Renamed,
            &[
                "get",
                "virtualmachines.v1.kubevirt.io",
                "-n",
                "{ns}",
                "-o",
                "name",
            ],
        ),
        cmd(
            "kubectl_get_selector",
            Touch::Renamed,
            &[
                "get",
                "vm",
                "-n",
                "{ns}",
                "-l",
                "kubevirt.io/vm=vm1",
                "-o",
                "name",
            ],
        ),
        cmd(
            "kubectl_get_renamed_short_name",
            Touch::Renamed,
            &["get", "intvirtvm", "-n", "{ns}", "-o", "name"],
        ),
        cmd(
            "kubectl_get_missing",
            Touch::Renamed,
            &["get", "vm", "nope", "-n", "{ns}"],
        ),
        cmd(
            "kubectl_get_pods_by_label",
            Touch::RoundTrip,
            &[
                "get",
                "pods",
                "-n",
                "{ns}",
                "-l",
                "kubevirt.io=virt-launcher",
                "-o",
                "name",
            ],
        ),
        cmd(
            "kubectl_get_events_field_selector",
            Touch::RoundTrip,
            &[
                "get",
                "events",
                "-n",
                "{ns}",
                "--field-selector",
                "involvedObject.kind=VirtualMachine",
                "-o",
                "name",
            ],
        ),
        cmd(
            "kubectl_api_resources",
            Touch::Renamed,
            &["api-resources", "--api-group=kubevirt.io"],
        ),
        cmd(
            "kubectl_api_resources_all",
            Touch::Renamed,
            &["api-resources", "-o", "name"],
        ),
        cmd("kubectl_api_versions", Touch::Renamed, &["api-versions"]),
        cmd(
            "kubectl_explain",
            Touch::Renamed,
            &["explain", "virtualmachine.spec.runStrategy"],
        ),
        cmd(
            "kubectl_get_crd",
            Touch::Renamed,
            &[
                "get",
                "crd",
                "virtualmachines.kubevirt.io",
                "-o",
                "jsonpath={.spec.names}",
            ],
        ),
        cmd(
            "kubectl_auth_can_i",
            Touch::Renamed,
            &[
                "auth",
                "can-i",
                "list",
                "virtualmachines.kubevirt.io",
                "-n",
                "{ns}",
            ],
        ),
        cmd_in(
            "kubectl_apply",
            Touch::Renamed,
            &["apply", "-f", "-"],
            &vm_yaml("vm4", ""),
        ),
        cmd_in(
            "kubectl_apply_unchanged",
            Touch::Renamed,
            &["apply", "-f", "-"],
            &vm_yaml("vm4", ""),
        ),
        cmd_in(
            "kubectl_apply_changed",
            Touch::Renamed,
            &["apply", "-f", "-"],
            &vm_yaml("vm4", "\n    kubevirt.io/changed: 'yes'"),
        ),
        cmd_in(
            "kubectl_apply_server_side",
            Touch::Renamed,
            &["apply", "--server-side", "-f", "-"],
            &vm_yaml("vm5", ""),
        ),
        cmd_in(
            "kubectl_apply_server_side_dry_run",
            Touch::Renamed,
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-o",
                "json",
                "-f",
                "-",
            ],
            &vm_yaml("vm5", "\n    kubevirt.io/dry: run"),
        ),
        cmd(
            "kubectl_label",
            Touch::Renamed,
            &["label", "vm", "vm1", "-n", "{ns}", "kubevirt.io/labelled=yes"],
        ),
        cmd(
            "kubectl_annotate",
            Touch::Renamed,
            &["annotate", "vm", "vm1", "-n", "{ns}", "kubevirt.io/annotated=yes"],
        ),
        cmd(
            "kubectl_patch_merge",
            Touch::Renamed,
            &[
                "patch",
                "vm",
                "vm1",
                "-n",
                "{ns}",
                "--type=merge",
                "-p",
                r#"{"metadata":{"labels":{"kubevirt.io/merge":"kubectl"}}}"#,
                "-o",
                "json",
            ],
        ),
        cmd(
            "kubectl_patch_json",
            Touch::Renamed,
            &[
                "patch",
                "vm",
                "vm1",
                "-n",
                "{ns}",
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/labels/kubevirt.io~1merge"}]"#,
                "-o",
                "json",
            ],
        ),
        cmd(
            "kubectl_get_after_patches",
            Touch::Renamed,
            &["get", "vm", "vm1", "-n", "{ns}", "-o", "json"],
        ),
        cmd(
            "kubectl_delete",
            Touch::Renamed,
            &["delete", "vm", "vm4", "-n", "{ns}"],
        ),
        cmd(
            "kubectl_get_configmap",
            Touch::Nothing,
            &["get", "configmap", "plain", "-n", "{ns}", "-o", "json"],
        ),
    ]
}

pub fn kube_rs_cases() -> Vec<Case> {
    [
        ("kube_rs_list", KubeRsCase::List),
        ("kube_rs_get", KubeRsCase::Get),
        ("kube_rs_get_missing", KubeRsCase::GetMissing),
        ("kube_rs_list_metadata", KubeRsCase::ListMetadata),
        ("kube_rs_watcher", KubeRsCase::Watcher),
        ("kube_rs_apply", KubeRsCase::Apply),
        ("kube_rs_discovery", KubeRsCase::Discovery),
    ]
    .into_iter()
    .map(|(name, c)| Case {
        name,
        touch: Touch::Renamed,
        step: Step::KubeRs(c),
    })
    .collect()
}
