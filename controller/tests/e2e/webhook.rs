//! The validating webhook, called by kube-apiserver: what it denies, with which message, and
//! what it admits.

use std::process::Command;

use kube_api_rewriter_testkit::*;

use crate::env::*;

/// kube-apiserver calls the webhook (registered for this mode's namespace only) and kubectl
/// shows each denial's message; a good VM is admitted, and a bad update of it denied.
pub fn webhook(env: &Env) {
    use virtualization_controller::webhook::{
        DEFAULT_CLASS_ANNOTATION, DISK_PATH, IMAGE_PATH, KUBEVIRT_KEY_MESSAGE, MUTATE_PATH, PATH,
    };
    let ns = env.namespace("webhook");
    let ns = ns.as_str();
    let mode = env.mode().name();
    ok(&env
        .cp
        .kubectl(&["label", "namespace", ns, &format!("webhook-test={mode}")]));
    let port = env.ctl().webhook_port;
    let ca = ok(&Command::new("base64")
        .arg("-w0")
        .arg(env.cp.dir.join("webhook-ca.crt"))
        .output()
        .expect("base64"));
    assert!(!ca.is_empty());
    let config = format!("vm-validation-{mode}");
    // One webhook of a configuration: `path` of the controller's listener for `resource`,
    // in this mode's namespace only.
    let hook = |name: &str, path: &str, operations: &str, resource: &str| {
        format!(
            r#"- name: {name}.virtualization.deckhouse.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 10
  clientConfig:
    url: https://127.0.0.1:{port}{path}
    caBundle: {ca}
  namespaceSelector: {{matchLabels: {{webhook-test: {mode}}}}}
  rules:
  - apiGroups: [virtualization.deckhouse.io]
    apiVersions: [v1alpha2]
    operations: [{operations}]
    resources: [{resource}]
"#
        )
    };
    let configuration = |kind: &str, hooks: &[String]| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: {kind}\nmetadata: {{name: {config}}}\nwebhooks:\n{}",
            hooks.concat()
        )
    };
    env.apply(&configuration(
        "ValidatingWebhookConfiguration",
        &[
            hook("vm.validate", PATH, "CREATE, UPDATE", "virtualmachines"),
            hook("vi.validate", IMAGE_PATH, "CREATE, UPDATE", "virtualimages"),
            hook("vd.validate", DISK_PATH, "CREATE, UPDATE", "virtualdisks"),
        ],
    ));
    let apply = |yaml: &str| kubectl_in(env.cp.kubeconfig(), &["apply", "-f", "-"], yaml);
    let labelled =
        vm_yaml(ns, "bad", "AlwaysOff", "256Mi").replace("{app: shop}", "{app: shop, kubevirt.io/evil: x}");
    // kube-apiserver picks the configuration up from its own watch: probe with server-side
    // dry runs (the webhook has no side effects, so it is called for them) until it is in force.
    let denied = env.wait("the webhook in force", || {
        let o = kubectl_in(
            env.cp.kubeconfig(),
            &["apply", "--dry-run=server", "-f", "-"],
            &labelled,
        );
        if o.status.success() {
            Err("admitted".to_owned())
        } else {
            Ok(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    });
    assert!(denied.contains(KUBEVIRT_KEY_MESSAGE), "{denied}");

    env.apply(&format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineClass\nmetadata: {{name: small-{mode}}}\nspec:\n  cpu: {{cores: [1]}}\n"
    ));
    let long = "l".repeat(64);
    for (what, yaml, message) in [
        (
            "a kubevirt.io label",
            labelled.clone(),
            KUBEVIRT_KEY_MESSAGE.to_owned(),
        ),
        (
            "a kubevirt.io annotation",
            vm_yaml(ns, "bad", "AlwaysOff", "256Mi").replace(
                "  labels: {app: shop}\n",
                "  annotations: {kubevirt.io/allow-pod-bridge-network-live-migration: x}\n",
            ),
            KUBEVIRT_KEY_MESSAGE.to_owned(),
        ),
        (
            "a name over 63 characters",
            vm_yaml(ns, &long, "AlwaysOff", "256Mi"),
            "longer than 63".to_owned(),
        ),
        (
            "duplicate blockDeviceRefs",
            vm_yaml(ns, "bad", "AlwaysOff", "256Mi")
                + "  blockDeviceRefs:\n  - {kind: VirtualDisk, name: a}\n  - {kind: VirtualDisk, name: a}\n",
            "VirtualDisk a is referred to more than once".to_owned(),
        ),
        (
            "zero cores",
            vm_yaml(ns, "bad", "AlwaysOff", "256Mi").replace("cores: 1", "cores: 0"),
            "spec.cpu.cores must be at least 1".to_owned(),
        ),
        (
            "cores the class does not allow",
            vm_yaml(ns, "bad", "AlwaysOff", "256Mi").replace("cores: 1", "cores: 2")
                + &format!("  virtualMachineClassName: small-{mode}\n"),
            format!("spec.cpu.cores 2 is not allowed by VirtualMachineClass small-{mode}"),
        ),
    ] {
        let err = fails(&apply(&yaml));
        assert!(
            err.contains("denied the request") && err.contains(&message),
            "{what}: {err}"
        );
    }
    assert!(env.get(VM, ns, "bad").is_none(), "a denied VM was stored");

    env.apply(&vm_yaml(ns, "good", "AlwaysOff", "256Mi"));
    env.wait_vm(ns, "good", "Stopped", stopped);
    let err = fails(
        &env.cp
            .kubectl(&["label", VM, "good", "-n", ns, "kubevirt.io/evil=x"]),
    );
    assert!(err.contains(KUBEVIRT_KEY_MESSAGE), "{err}");

    // Images and disks: an http(s) URL, hex checksums, a data source fixed once provisioning
    // started.
    let vi = |name: &str, source: &str| {
        format!(
            "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualImage\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  dataSource: {source}\n"
        )
    };
    let err = fails(&apply(&vi(
        "ftp",
        "{type: HTTP, http: {url: \"ftp://example.com/a.img\"}}",
    )));
    assert!(
        err.contains(
            "spec.dataSource.http.url \"ftp://example.com/a.img\": the scheme must be http or https"
        ),
        "{err}"
    );
    let disk = format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualDisk\nmetadata: {{name: sum, namespace: {ns}}}\nspec:\n  persistentVolumeClaim: {{size: 1Gi}}\n  dataSource: {{type: HTTP, http: {{url: \"https://example.com/a.img\", checksum: {{md5: xyz}}}}}}\n"
    );
    let err = fails(&apply(&disk));
    assert!(
        err.contains("spec.dataSource.http.checksum.md5 \"xyz\" is not 32 hex digits"),
        "{err}"
    );
    let stalled = format!("{ns}-never.img");
    env.apply(&vi(
        "moving",
        &format!(
            "{{type: HTTP, http: {{url: \"{}\"}}}}",
            env.files.file_url(&format!("stall/{stalled}"))
        ),
    ));
    crate::image::wait_image(env, ns, "moving", "Provisioning");
    let err = fails(&apply(&vi(
        "moving",
        "{type: HTTP, http: {url: \"https://example.com/other.img\"}}",
    )));
    assert!(
        err.contains(
            "spec.dataSource of a VirtualImage cannot change once provisioning started (phase Provisioning)"
        ),
        "{err}"
    );
    ok(&env
        .cp
        .kubectl(&["delete", crate::image::VI, "moving", "-n", ns, "--wait=false"]));
    env.files.release(&stalled);

    // The mutating webhook: a VM naming no class gets the default one, one naming a class keeps
    // it.
    env.apply(&configuration(
        "MutatingWebhookConfiguration",
        &[hook("vm.mutate", MUTATE_PATH, "CREATE", "virtualmachines")],
    ));
    let default_class = format!("generic-{mode}");
    env.apply(&format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualMachineClass\nmetadata:\n  name: {default_class}\n  annotations: {{{DEFAULT_CLASS_ANNOTATION}: \"true\"}}\nspec: {{}}\n"
    ));
    let classed = env.wait("the mutating webhook in force", || {
        let o = kubectl_in(
            env.cp.kubeconfig(),
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            &vm_yaml(ns, "classless", "AlwaysOff", "256Mi"),
        );
        let vm = parse_json(&ok(&o));
        if vm["spec"]["virtualMachineClassName"] == default_class.as_str() {
            Ok(vm)
        } else {
            Err(vm["spec"].to_string())
        }
    });
    assert_eq!(classed["metadata"]["name"], "classless", "{classed}");
    env.apply(&vm_yaml(ns, "classless", "AlwaysOff", "256Mi"));
    let vm = env.get(VM, ns, "classless").expect("the VM");
    assert_eq!(
        vm["spec"]["virtualMachineClassName"],
        default_class.as_str(),
        "{vm}"
    );
    env.apply(
        &(vm_yaml(ns, "classed", "AlwaysOff", "256Mi")
            + &format!("  virtualMachineClassName: small-{mode}\n")),
    );
    let vm = env.get(VM, ns, "classed").expect("the VM");
    assert_eq!(
        vm["spec"]["virtualMachineClassName"],
        format!("small-{mode}").as_str(),
        "{vm}"
    );
    ok(&env
        .cp
        .kubectl(&["delete", "mutatingwebhookconfiguration", &config]));
    ok(&env
        .cp
        .kubectl(&["delete", VM, "classless", "classed", "-n", ns, "--wait=false"]));
    ok(&env.cp.kubectl(&["delete", VMC, &default_class]));
    ok(&env
        .cp
        .kubectl(&["delete", "validatingwebhookconfiguration", &config]));
    ok(&env.cp.kubectl(&["delete", VMC, &format!("small-{mode}")]));
}
