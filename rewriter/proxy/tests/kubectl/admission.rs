//! A ValidatingWebhookConfiguration for `kubevirt.io` written through the proxy, and the
//! AdmissionReviews kube-apiserver sends through the proxy's webhook listener to
//! `webhook_double`: original names on the way in, a denial back to kubectl.

use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::*;
use serde_json::json;

use crate::assertions::assert_original;
use crate::manifests::vm;
use crate::webhook_double::DENIAL;
use crate::{INTERNAL, UP_VM, env};

#[test]
fn admission_webhook() {
    let e = env();
    let (cp, p, double, wh_port) = (&e.cp, &e.p, &e.double, e.wh_port);
    // The configuration selects this namespace only, so the other cases' VMs are not reviewed.
    e.namespace("adm");
    ok(&cp.kubectl(&["label", "namespace", "adm", "e2e-admission=on"]));
    let ca_b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(&e.ca).expect("ca"))
    };
    let vwc = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: e2e-vm-validate}}\nwebhooks:\n- name: vm-validate.e2e.example.com\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Fail\n  timeoutSeconds: 10\n  clientConfig:\n    url: https://127.0.0.1:{wh_port}/virtualmachines-validate\n    caBundle: {ca_b64}\n  rules:\n  - apiGroups: [kubevirt.io]\n    apiVersions: [v1]\n    operations: [CREATE]\n    resources: [virtualmachines]\n  namespaceSelector:\n    matchLabels: {{e2e-admission: \"on\"}}\n"
    );
    e.apply(&vwc);
    let up = parse_json(&ok(&cp.kubectl(&[
        "get",
        "validatingwebhookconfiguration",
        "e2e-vm-validate",
        "-o",
        "json",
    ])));
    let rule = &up["webhooks"][0]["rules"][0];
    assert_eq!(rule["apiGroups"], json!([INTERNAL]), "{up}");
    assert_eq!(
        rule["resources"],
        json!(["internalvirtualizationvirtualmachines"]),
        "{up}"
    );
    assert_eq!(
        up["webhooks"][0]["clientConfig"]["url"],
        format!("https://127.0.0.1:{wh_port}/virtualmachines-validate")
    );
    let through = parse_json(&ok(&p.kubectl(&[
        "get",
        "validatingwebhookconfiguration",
        "e2e-vm-validate",
        "-o",
        "json",
    ])));
    assert_eq!(
        through["webhooks"][0]["rules"][0]["apiGroups"],
        json!(["kubevirt.io"]),
        "{through}"
    );
    assert_eq!(
        through["webhooks"][0]["rules"][0]["resources"],
        json!(["virtualmachines"]),
        "{through}"
    );

    // kube-apiserver picks the configuration up within a moment: create VMs until the
    // double has seen one.
    let t = Instant::now();
    let mut n = 0;
    while double.reviews().is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "kube-apiserver never called the webhook; proxy log:\n{}",
            p.logs()
        );
        n += 1;
        e.apply(&vm(
            "adm",
            &format!("allow-{n}"),
            &[("kubevirt.io/created-by", "adm")],
            "",
        ));
        std::thread::sleep(Duration::from_millis(300));
    }
    let (path, review) = double.reviews().last().cloned().expect("a review");
    assert_eq!(path, "/virtualmachines-validate");
    let req = &review["request"];
    assert_eq!(
        req["kind"],
        json!({"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachine"}),
        "{review}"
    );
    assert_eq!(
        req["resource"],
        json!({"group": "kubevirt.io", "version": "v1", "resource": "virtualmachines"}),
        "{review}"
    );
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["object"]["apiVersion"], "kubevirt.io/v1", "{review}");
    assert_eq!(req["object"]["kind"], "VirtualMachine", "{review}");
    assert_eq!(
        req["object"]["metadata"]["labels"]["kubevirt.io/created-by"], "adm",
        "{review}"
    );
    assert_original(&review);

    // A denial reaches kubectl with the double's message.
    let err = fails(&e.kubectl_in(
        &["apply", "-f", "-"],
        &vm("adm", "deny-me", &[("kubevirt.io/created-by", "adm")], ""),
    ));
    assert!(
        err.contains("admission webhook \"vm-validate.e2e.example.com\" denied the request")
            && err.contains(DENIAL),
        "{err}"
    );
    assert!(
        !cp.kubectl(&["get", UP_VM, "deny-me", "-n", "adm"])
            .status
            .success()
    );
    let last = double.reviews().last().cloned().expect("a review").1;
    assert_eq!(last["request"]["object"]["metadata"]["name"], "deny-me");
    assert_eq!(last["request"]["kind"]["group"], "kubevirt.io");
    ok(&p.kubectl(&["delete", "validatingwebhookconfiguration", "e2e-vm-validate"]));
}
