//! The client corpus: what kubectl, kube-rs and raw HTTP ask, in order. Both sides run every
//! case in turn, each in its own namespace (`{ns}` in a template), so their answers compare.

#[path = "corpus_cli.rs"]
mod cli;
#[path = "corpus_defects.rs"]
pub mod defects;

/// One request (or command) and what of the rules it touches.
pub struct Case {
    pub name: &'static str,
    pub touch: Touch,
    pub step: Step,
}

/// Whether a sidecar without rules must answer a case differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// A renamed group, resource, kind, label, annotation or finalizer the answer shows: without
    /// rules the answer differs.
    Renamed,
    /// Renamed names sent up and restored on the way back (a ClusterRole's rules, a label
    /// selector): the answer is the same without rules; what kube-apiserver stored shows in a
    /// `stored_*` case.
    RoundTrip,
    /// Nothing the rules name: the answer is the same without rules.
    Nothing,
}

pub enum Step {
    Http(Http),
    Kubectl {
        args: Vec<&'static str>,
        stdin: Option<String>,
    },
    KubeRs(KubeRsCase),
    /// What kube-apiserver holds, read past the sidecar (`kubectl get --raw` as admin).
    Upstream(String),
    /// A request to the side's webhook listener, as kube-apiserver sends an AdmissionReview;
    /// the answer also holds what the webhook double behind it received.
    Webhook(Http),
    /// A WebSocket upgrade through the side's client proxy, read raw until the connection
    /// closes (or 5 s pass): the status line and every byte after the 101.
    Upgrade(String),
}

pub struct Http {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Option<String>,
    /// Asks for gzip and decodes it (`curl --compressed`).
    pub compressed: bool,
    /// Compare only part of the JSON body, over one or more requests.
    pub view: Option<View>,
}

/// Part of a JSON answer, asked `repeat` times: the answer becomes the distinct values `pick`
/// found, in the order they first appeared (one value when the answers are stable).
#[derive(Clone, Copy)]
pub struct View {
    pub repeat: usize,
    pub pick: fn(&serde_json::Value) -> serde_json::Value,
}

/// What the kube-rs cases do (`kube_rs.rs`).
#[derive(Clone, Copy, Debug)]
pub enum KubeRsCase {
    List,
    Get,
    GetMissing,
    ListMetadata,
    Watcher,
    Apply,
    Discovery,
}

impl Case {
    /// The request as a row shows it.
    pub fn request(&self) -> String {
        match &self.step {
            Step::Http(h) => {
                let mut s = format!("{} {}", h.method, h.path);
                for (k, v) in &h.headers {
                    if *k != "Content-Type" {
                        s.push_str(&format!(" [{k}: {v}]"));
                    }
                }
                s
            }
            Step::Kubectl { args, .. } => format!("kubectl {}", args.join(" ")),
            Step::KubeRs(c) => format!("kube-rs {c:?}"),
            Step::Upstream(path) => format!("kube-apiserver GET {path}"),
            Step::Webhook(h) => format!("webhook listener: {} {}", h.method, h.path),
            Step::Upgrade(path) => format!("GET {path} [Upgrade: websocket]"),
        }
    }
}

pub const VMS: &str = "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines";
const R: Touch = Touch::Renamed;
const T: Touch = Touch::RoundTrip;
const N: Touch = Touch::Nothing;
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const AGGREGATED: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
const METADATA: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";

/// A KubeVirt VirtualMachine in the side's namespace, with KubeVirt labels, an annotation and a
/// nodeSelector the rules rename.
pub fn vm(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{{"name":"{name}","namespace":"{{ns}}","labels":{{"kubevirt.io/vm":"{name}","side":"{{ns}}"}},"annotations":{{"kubevirt.io/note":"diff"}}}},"spec":{{"running":false,"template":{{"metadata":{{"labels":{{"kubevirt.io/domain":"{name}"}}}},"spec":{{"domain":{{"devices":{{}},"resources":{{"requests":{{"memory":"64Mi"}}}}}},"nodeSelector":{{"kubevirt.io/schedulable":"true"}}}}}}}}}}"#
    )
}

fn get(name: &'static str, touch: Touch, path: &str) -> Case {
    req(name, touch, "GET", path, &[], None)
}

fn accept(name: &'static str, touch: Touch, path: &str, accept: &str) -> Case {
    req(name, touch, "GET", path, &[("Accept", accept)], None)
}

fn send(name: &'static str, touch: Touch, method: &'static str, path: &str, ct: &str, body: &str) -> Case {
    req(name, touch, method, path, &[("Content-Type", ct)], Some(body))
}

fn req(
    name: &'static str,
    touch: Touch,
    method: &'static str,
    path: &str,
    headers: &[(&'static str, &str)],
    body: Option<&str>,
) -> Case {
    Case {
        name,
        touch,
        step: Step::Http(Http {
            method,
            path: path.to_owned(),
            headers: headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            body: body.map(str::to_owned),
            compressed: false,
            view: None,
        }),
    }
}

/// Every case, in the order both sides run them.
pub fn all() -> Vec<Case> {
    let mut cases = discovery();
    cases.extend(crud());
    cases.extend(lists_and_watches());
    cases.extend(built_in_kinds());
    cases.extend(stored());
    cases.extend(errors_and_plumbing());
    cases.extend(cli::kubectl_cases());
    cases.extend(cli::kube_rs_cases());
    cases.extend(defects::cases());
    cases.extend(cleanup());
    cases
}

fn discovery() -> Vec<Case> {
    vec![
        get("discovery_core", N, "/api"),
        get("discovery_version", N, "/version"),
        accept("discovery_groups", R, "/apis", JSON),
        accept("discovery_aggregated", R, "/apis", AGGREGATED),
        accept("discovery_aggregated_core", N, "/api", AGGREGATED),
        get("discovery_group", R, "/apis/kubevirt.io"),
        get("discovery_resources", R, "/apis/kubevirt.io/v1"),
        get(
            "discovery_renamed_group_direct",
            N,
            "/apis/internal.virtualization.deckhouse.io/v1",
        ),
        get("discovery_untouched_group", N, "/apis/apps/v1"),
        get("openapi_v3_index", R, "/openapi/v3"),
        get("openapi_v3_kubevirt", R, "/openapi/v3/apis/kubevirt.io/v1"),
        get("openapi_v3_untouched", N, "/openapi/v3/apis/scheduling.k8s.io/v1"),
        accept("openapi_v2", R, "/openapi/v2", JSON),
    ]
}

fn crud() -> Vec<Case> {
    let vm1 = format!("{VMS}/vm1");
    let apply3 = "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm3\n  labels: {kubevirt.io/vm: vm3, side: '{ns}'}\nspec:\n  running: false\n  template:\n    spec:\n      domain: {devices: {}, resources: {requests: {memory: 64Mi}}}\n";
    let apply = "application/apply-patch+yaml";
    vec![
        send("create_vm1", R, "POST", VMS, JSON, &vm("vm1")),
        send("create_vm2", R, "POST", VMS, JSON, &vm("vm2")),
        send("create_conflict", R, "POST", VMS, JSON, &vm("vm1")),
        get("get", R, &vm1),
        get("get_missing", R, &format!("{VMS}/nope")),
        accept("get_yaml", R, &vm1, "application/yaml"),
        accept("get_metadata_only", R, &vm1, METADATA),
        accept("get_table_one", R, &vm1, TABLE),
        send("put_without_resource_version", R, "PUT", &vm1, JSON, &vm("vm1")),
        send(
            "patch_merge",
            R,
            "PATCH",
            &vm1,
            MERGE,
            r#"{"metadata":{"labels":{"kubevirt.io/patched":"merge"},"annotations":{"kubevirt.io/patched":"merge"}}}"#,
        ),
        send(
            "patch_json",
            R,
            "PATCH",
            &vm1,
            "application/json-patch+json",
            r#"[{"op":"add","path":"/metadata/labels/kubevirt.io~1json","value":"yes"},{"op":"add","path":"/spec/template/spec/nodeSelector/kubevirt.io~1arch","value":"amd64"}]"#,
        ),
        send(
            "patch_json_test_fails",
            R,
            "PATCH",
            &vm1,
            "application/json-patch+json",
            r#"[{"op":"test","path":"/metadata/labels/kubevirt.io~1vm","value":"other"}]"#,
        ),
        send(
            "patch_strategic_on_custom",
            R,
            "PATCH",
            &vm1,
            "application/strategic-merge-patch+json",
            r#"{"metadata":{"labels":{"kubevirt.io/smp":"x"}}}"#,
        ),
        send(
            "patch_apply_create",
            R,
            "PATCH",
            &format!("{VMS}/vm3?fieldManager=diff"),
            apply,
            apply3,
        ),
        send(
            "patch_apply_conflict",
            R,
            "PATCH",
            &format!("{VMS}/vm3?fieldManager=other"),
            apply,
            &apply3.replace("vm: vm3", "vm: changed"),
        ),
        send(
            "patch_merge_kind_change",
            R,
            "PATCH",
            &vm1,
            MERGE,
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"labels":{"a":"b"}}}"#,
        ),
        get("status_get", R, &format!("{vm1}/status")),
        send(
            "status_patch",
            R,
            "PATCH",
            &format!("{vm1}/status"),
            MERGE,
            r#"{"status":{"printableStatus":"Stopped"}}"#,
        ),
        send(
            "create_vmi",
            R,
            "POST",
            "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances",
            JSON,
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"vmi1","labels":{"kubevirt.io/vm":"vm1"},"ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","name":"vm1","uid":"00000000-0000-0000-0000-000000000001"}],"finalizers":["kubevirt.io/foregroundDeleteVirtualMachine"]},"spec":{"domain":{"devices":{},"resources":{"requests":{"memory":"64Mi"}}}}}"#,
        ),
        get(
            "get_vmi",
            R,
            "/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/vmi1",
        ),
        get(
            "crd_get",
            R,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/virtualmachines.kubevirt.io",
        ),
        get(
            "crd_list_by_name",
            R,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?fieldSelector=metadata.name%3Dvirtualmachines.kubevirt.io",
        ),
    ]
}

fn lists_and_watches() -> Vec<Case> {
    let watch = |name, touch, path: &str| get(name, touch, path);
    let mut gz = get("list_gzip", R, VMS);
    if let Step::Http(h) = &mut gz.step {
        h.compressed = true;
    }
    vec![
        get("list", R, VMS),
        get(
            "list_label_selector",
            R,
            &format!("{VMS}?labelSelector=kubevirt.io%2Fvm%3Dvm1"),
        ),
        get(
            "list_set_selector",
            R,
            &format!("{VMS}?labelSelector=kubevirt.io%2Fvm%20in%20(vm1,vm2)"),
        ),
        get(
            "list_field_selector",
            R,
            &format!("{VMS}?fieldSelector=metadata.name%3Dvm2"),
        ),
        get("list_limit", R, &format!("{VMS}?limit=1")),
        get(
            "list_all_namespaces",
            R,
            "/apis/kubevirt.io/v1/virtualmachines?labelSelector=side%3D{ns}",
        ),
        accept("list_table", R, VMS, TABLE),
        accept(
            "list_metadata_only",
            R,
            VMS,
            "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
        ),
        gz,
        get(
            "list_untouched",
            N,
            "/api/v1/namespaces/{ns}/configmaps?fieldSelector=metadata.name%3Dkube-root-ca.crt",
        ),
        watch(
            "watch",
            R,
            &format!("{VMS}?watch=true&resourceVersion=0&timeoutSeconds=1"),
        ),
        watch(
            "watch_numeric_flag",
            R,
            &format!("{VMS}?watch=1&resourceVersion=0&timeoutSeconds=1"),
        ),
        watch(
            "watch_label_selector",
            R,
            &format!("{VMS}?watch=1&resourceVersion=0&timeoutSeconds=1&labelSelector=kubevirt.io%2Fvm%3Dvm2"),
        ),
        watch(
            "watch_streaming_list",
            R,
            &format!(
                "{VMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
            ),
        ),
        accept(
            "watch_table",
            R,
            &format!("{VMS}?watch=1&resourceVersion=0&timeoutSeconds=1"),
            TABLE,
        ),
        watch(
            "watch_untouched",
            N,
            "/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1&fieldSelector=metadata.name%3Dkube-root-ca.crt",
        ),
    ]
}

fn built_in_kinds() -> Vec<Case> {
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"launcher","labels":{"kubevirt.io":"virt-launcher","kubevirt.io/domain":"vm1"},"annotations":{"kubevirt.io/domain":"vm1"}},"spec":{"automountServiceAccountToken":false,"containers":[{"name":"c","image":"example.invalid/c"}],"nodeSelector":{"kubevirt.io/schedulable":"true"},"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubevirt.io/schedulable","operator":"Exists"}]}]}},"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"kubernetes.io/hostname","labelSelector":{"matchLabels":{"kubevirt.io":"virt-launcher"}}}}]}},"tolerations":[{"key":"kubevirt.io/drain","operator":"Exists"}]}}"#;
    let deploy = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"virt-thing","labels":{"kubevirt.io":"virt-api"}},"spec":{"replicas":0,"selector":{"matchLabels":{"kubevirt.io":"virt-api"},"matchExpressions":[{"key":"kubevirt.io/x","operator":"DoesNotExist"}]},"template":{"metadata":{"labels":{"kubevirt.io":"virt-api"}},"spec":{"containers":[{"name":"c","image":"example.invalid/c"}],"nodeSelector":{"kubevirt.io/schedulable":"true"}}}}}"#;
    let role = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"{ns}-vm-reader"},"rules":[{"apiGroups":["kubevirt.io"],"resources":["virtualmachines","virtualmachines/status"],"verbs":["get","list"]},{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}"#;
    let webhook = r#"{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"{ns}-vm-webhook"},"webhooks":[{"name":"vm.diff.example","clientConfig":{"url":"https://127.0.0.1:9/validate"},"rules":[{"apiGroups":["kubevirt.io"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["virtualmachines"]}],"objectSelector":{"matchLabels":{"diff-never":"match"}},"sideEffects":"None","admissionReviewVersions":["v1"],"failurePolicy":"Ignore"}]}"#;
    let policy = r#"{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy","metadata":{"name":"{ns}-vm-policy"},"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":["kubevirt.io"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["virtualmachines"]}]},"validations":[{"expression":"true"}]}}"#;
    let event = r#"{"apiVersion":"v1","kind":"Event","metadata":{"name":"vm1-event"},"involvedObject":{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","name":"vm1","namespace":"{ns}"},"reason":"Diff","message":"m","type":"Normal","firstTimestamp":"2024-01-01T00:00:00Z","lastTimestamp":"2024-01-01T00:00:00Z","count":1}"#;
    let ssar = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"resourceAttributes":{"group":"kubevirt.io","resource":"virtualmachines","verb":"list","namespace":"{ns}"}}}"#;
    let sar = r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"nobody","resourceAttributes":{"group":"kubevirt.io","resource":"virtualmachines","verb":"list","namespace":"{ns}"}}}"#;
    let service = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"virt-api"},"spec":{"clusterIP":"None","selector":{"kubevirt.io":"virt-api"},"ports":[{"port":443}]}}"#;
    vec![
        send(
            "configmap_create",
            N,
            "POST",
            "/api/v1/namespaces/{ns}/configmaps",
            JSON,
            r#"{"metadata":{"name":"plain"},"data":{"a":"b"}}"#,
        ),
        get("configmap_get", N, "/api/v1/namespaces/{ns}/configmaps/plain"),
        send(
            "configmap_kubevirt_label",
            T,
            "POST",
            "/api/v1/namespaces/{ns}/configmaps",
            JSON,
            r#"{"metadata":{"name":"labelled","labels":{"kubevirt.io/x":"y"}},"data":{"a":"b"}}"#,
        ),
        send("pod_create", T, "POST", "/api/v1/namespaces/{ns}/pods", JSON, pod),
        send(
            "deployment_create",
            T,
            "POST",
            "/apis/apps/v1/namespaces/{ns}/deployments",
            JSON,
            deploy,
        ),
        send(
            "service_create",
            T,
            "POST",
            "/api/v1/namespaces/{ns}/services",
            JSON,
            service,
        ),
        send(
            "event_create",
            T,
            "POST",
            "/api/v1/namespaces/{ns}/events",
            JSON,
            event,
        ),
        get(
            "event_by_involved_kind",
            T,
            "/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.kind%3DVirtualMachine",
        ),
        send(
            "clusterrole_create",
            T,
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            JSON,
            role,
        ),
        get(
            "clusterrole_get",
            T,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/{ns}-vm-reader",
        ),
        send(
            "webhook_configuration_create",
            T,
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            JSON,
            webhook,
        ),
        send(
            "admission_policy_create",
            T,
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
            JSON,
            policy,
        ),
        send(
            "self_subject_access_review",
            T,
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            JSON,
            ssar,
        ),
        send(
            "subject_access_review",
            T,
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            JSON,
            sar,
        ),
    ]
}

/// What the sidecar stored for the built-in kinds above, read past it.
fn stored() -> Vec<Case> {
    [
        ("stored_vm", "/apis/internal.virtualization.deckhouse.io/v1/namespaces/{ns}/internalvirtualizationvirtualmachines/vm1"),
        ("stored_configmap_label", "/api/v1/namespaces/{ns}/configmaps/labelled"),
        ("stored_pod", "/api/v1/namespaces/{ns}/pods/launcher"),
        ("stored_deployment", "/apis/apps/v1/namespaces/{ns}/deployments/virt-thing"),
        ("stored_service", "/api/v1/namespaces/{ns}/services/virt-api"),
        ("stored_event", "/api/v1/namespaces/{ns}/events/vm1-event"),
        ("stored_clusterrole", "/apis/rbac.authorization.k8s.io/v1/clusterroles/{ns}-vm-reader"),
        ("stored_webhook_configuration", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{ns}-vm-webhook"),
        ("stored_admission_policy", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{ns}-vm-policy"),
    ]
    .into_iter()
    .map(|(name, path)| Case {
        name,
        touch: R,
        step: Step::Upstream(path.to_owned()),
    })
    .collect()
}

fn errors_and_plumbing() -> Vec<Case> {
    let mut upgrade = get(
        "upgrade_exec_missing_pod",
        N,
        "/api/v1/namespaces/{ns}/pods/nope/exec?command=true&stdout=true",
    );
    if let Step::Http(h) = &mut upgrade.step {
        let ws = kube_api_rewriter_testkit::WEBSOCKET_UPGRADE;
        h.headers = ws
            .chunks(2)
            .filter_map(|kv| kv[1].split_once(": "))
            .map(|(k, v)| (leak(k), v.to_owned()))
            .collect();
    }
    vec![
        get(
            "error_unknown_version",
            T,
            "/apis/kubevirt.io/v9/namespaces/{ns}/virtualmachines",
        ),
        send("error_bad_json", R, "POST", VMS, JSON, "{not json"),
        send(
            "error_namespace_mismatch",
            R,
            "POST",
            VMS,
            JSON,
            &vm("vm9").replace("\"namespace\":\"{ns}\"", "\"namespace\":\"elsewhere\""),
        ),
        send(
            "error_invalid_object",
            R,
            "POST",
            VMS,
            JSON,
            r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"Bad_Name"},"spec":{}}"#,
        ),
        get("error_unknown_group", N, "/apis/nonexistent.example.io/v1/things"),
        get(
            "error_missing_configmap",
            N,
            "/api/v1/namespaces/{ns}/configmaps/nope",
        ),
        get("pod_log_missing", N, "/api/v1/namespaces/{ns}/pods/nope/log"),
        upgrade,
        get("livez", N, "/livez"),
        accept(
            "protobuf_untouched",
            N,
            "/api/v1/namespaces/{ns}/configmaps/plain",
            "application/vnd.kubernetes.protobuf",
        ),
        accept(
            "protobuf_vm",
            R,
            &format!("{VMS}/vm1"),
            "application/vnd.kubernetes.protobuf,application/json",
        ),
    ]
}

/// The objects a later run must not meet (cluster-scoped names are per side).
fn cleanup() -> Vec<Case> {
    vec![
        req("delete", R, "DELETE", &format!("{VMS}/vm2"), &[], None),
        req(
            "delete_collection",
            R,
            "DELETE",
            &format!("{VMS}?labelSelector=kubevirt.io%2Fvm%3Dvm3"),
            &[],
            None,
        ),
        req("delete_missing", R, "DELETE", &format!("{VMS}/nope"), &[], None),
        req(
            "delete_clusterrole",
            T,
            "DELETE",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/{ns}-vm-reader",
            &[],
            None,
        ),
        req(
            "delete_webhook_configuration",
            T,
            "DELETE",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{ns}-vm-webhook",
            &[],
            None,
        ),
    ]
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}
