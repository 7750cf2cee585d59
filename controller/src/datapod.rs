//! The data Pods: an importer that fetches an image's or a disk's data and writes it to DVCR
//! or into a claim, and an uploader that waits for the user to upload it. Pure builders of the
//! Pod, its Secret of supplements (DVCR's credentials and CA, the source's CA, the uploader's
//! certificate) and the uploader's Service, and [`state`], which reads what the Pod reports.
//! The Pods run `virtualization-dvcr` (the `dvcr/` crate of the workspace).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use virtualization_dvcr::TerminationMessage;

/// The label on every data Pod, Secret and Service, naming the object they work for
/// (`VirtualImage/NAME` is `vi-NAME`, `VirtualDisk/NAME` `vd-NAME`); the watches select on its
/// presence.
pub const DATA_LABEL: &str = "virtualization.deckhouse.io/data-for";
/// The port the uploader listens on in its Pod.
pub const UPLOAD_PORT: u16 = 8443;
/// Where the Pods find the supplements Secret.
const SUPPLEMENTS: &str = "/var/run/virtualization/supplements";

/// What the controller needs to run data Pods: DVCR's address and credentials, the uploader's
/// certificate, the Pods' image and where they may run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataSettings {
    /// The controller's namespace, where the Secrets below are.
    pub namespace: String,
    /// DVCR's `host:port`; no imports without it.
    pub dvcr_address: Option<String>,
    /// A Secret with DVCR's credentials (`.dockerconfigjson`) and, when DVCR's certificate is
    /// not publicly trusted, its CA (`ca.crt`).
    pub dvcr_secret: String,
    /// A `kubernetes.io/tls` Secret with the uploader's certificate (`tls.crt`, `tls.key`).
    pub uploader_tls_secret: String,
    /// The image of the data Pods (it holds `virtualization-dvcr` and `qemu-img`).
    pub image: String,
    /// The nodeSelector of the data Pods.
    pub node_selector: BTreeMap<String, String>,
}

/// The object a data Pod works for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `VirtualImage` or `VirtualDisk`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Its namespace (the Pod's).
    pub namespace: String,
    /// Its uid.
    pub uid: String,
}

impl Owner {
    /// `vi` or `vd`.
    fn short(&self) -> &'static str {
        if self.kind == "VirtualImage" { "vi" } else { "vd" }
    }
}

/// Where a data Pod reads the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Downloaded from `url`, checked against the checksums given; `ca` is trusted for https.
    Http {
        /// The URL.
        url: String,
        /// SHA-256 the file must have.
        sha256: Option<String>,
        /// MD5 the file must have.
        md5: Option<String>,
        /// PEM CA certificates.
        ca: Option<Vec<u8>>,
    },
    /// Copied from a container image.
    Registry {
        /// The image.
        image: String,
        /// How to authenticate.
        auth: RegistryAuth,
        /// PEM CA certificates trusted for the registry.
        ca: Option<Vec<u8>>,
    },
    /// Copied from the `disk.img` of a claim of the same namespace.
    Claim(String),
    /// Uploaded by the user.
    Upload,
}

/// How a data Pod authenticates to a registry it reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryAuth {
    /// Anonymously.
    None,
    /// With DVCR's own credentials (an image in DVCR).
    Dvcr,
    /// With a `kubernetes.io/dockerconfigjson` Secret of the owner's namespace.
    PullSecret(String),
}

/// Where a data Pod writes the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// Into DVCR, as this image.
    Registry(String),
    /// Into a claim of the owner's namespace, as a raw `disk.img` of at most `max_size` bytes.
    Claim {
        /// The claim.
        name: String,
        /// The claim's size.
        max_size: u64,
    },
}

/// One data Pod's work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// For whom.
    pub owner: Owner,
    /// From where.
    pub source: Source,
    /// To where.
    pub destination: Destination,
}

impl Job {
    /// The name of the Pod, its Secret and its Service: `d8v-vi-importer-UID`,
    /// `d8v-vi-pvc-importer-UID`, `d8v-vd-uploader-UID`, ... (at most 56 characters, a DNS
    /// label).
    pub fn name(&self) -> String {
        let role = match (&self.source, &self.destination) {
            (Source::Upload, _) => "uploader",
            // An image's copy from DVCR into its claim.
            (_, Destination::Claim { .. }) if self.owner.kind == "VirtualImage" => "pvc-importer",
            _ => "importer",
        };
        format!("d8v-{}-{role}-{}", self.owner.short(), self.owner.uid)
    }

    /// The value of [`DATA_LABEL`] on its objects.
    pub fn label(&self) -> String {
        format!("{}-{}", self.owner.short(), self.owner.name)
    }

    /// The in-cluster upload URL of an `Upload` job.
    pub fn upload_url(&self) -> Option<String> {
        (self.source == Source::Upload)
            .then(|| format!("https://{}.{}.svc/upload", self.name(), self.owner.namespace))
    }

    fn metadata(&self) -> Value {
        let o = &self.owner;
        json!({
            "name": self.name(),
            "namespace": o.namespace,
            "labels": {DATA_LABEL: self.label()},
            "ownerReferences": [crate::resources::controller_reference(o.kind, &o.name, &o.uid)],
        })
    }

    /// Whether the job reads or writes DVCR (so its Pod needs DVCR's credentials).
    fn uses_dvcr(&self) -> bool {
        matches!(self.destination, Destination::Registry(_))
            || matches!(
                self.source,
                Source::Registry {
                    auth: RegistryAuth::Dvcr,
                    ..
                }
            )
    }

    /// The Secret of supplements the Pod mounts: DVCR's `.dockerconfigjson` and `ca.crt` (from
    /// `dvcr`, the controller's DVCR Secret's data) when the job uses DVCR, the source's CA as
    /// `source-ca.crt`, and the uploader's `tls.crt`/`tls.key` (from `tls`).
    pub fn secret(&self, dvcr: &BTreeMap<String, Vec<u8>>, tls: &BTreeMap<String, Vec<u8>>) -> Value {
        use base64::Engine as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut data = serde_json::Map::new();
        if self.uses_dvcr() {
            for key in [".dockerconfigjson", "ca.crt"] {
                if let Some(v) = dvcr.get(key) {
                    data.insert(key.into(), json!(b64(v)));
                }
            }
        }
        if let Source::Http { ca: Some(ca), .. } | Source::Registry { ca: Some(ca), .. } = &self.source {
            data.insert("source-ca.crt".into(), json!(b64(ca)));
        }
        if self.source == Source::Upload {
            for key in ["tls.crt", "tls.key"] {
                if let Some(v) = tls.get(key) {
                    data.insert(key.into(), json!(b64(v)));
                }
            }
        }
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": self.metadata(),
            "type": "Opaque",
            "data": data,
        })
    }

    /// The uploader's Service: 443 to the Pod's upload port.
    pub fn service(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self.metadata(),
            "spec": {
                "selector": {DATA_LABEL: self.label()},
                "ports": [{"name": "upload", "port": 443, "targetPort": UPLOAD_PORT}],
            },
        })
    }

    /// The Pod: `virtualization-dvcr import` (or `upload`) with the job in its environment.
    pub fn pod(&self, settings: &DataSettings, has_dvcr_ca: bool) -> Value {
        let mut env: Vec<(&str, String)> = Vec::new();
        let mut mounts = vec![
            json!({"name": "supplements", "mountPath": SUPPLEMENTS, "readOnly": true}),
            json!({"name": "scratch", "mountPath": "/scratch"}),
        ];
        let mut volumes = vec![
            json!({"name": "supplements", "secret": {"secretName": self.name()}}),
            json!({"name": "scratch", "emptyDir": {}}),
        ];
        let dvcr_auth = format!("{SUPPLEMENTS}/.dockerconfigjson");
        let dvcr_ca = format!("{SUPPLEMENTS}/ca.crt");
        let source_ca = format!("{SUPPLEMENTS}/source-ca.crt");
        match &self.source {
            Source::Http { url, sha256, md5, ca } => {
                env.push(("SOURCE", "http".into()));
                env.push(("SOURCE_URL", url.clone()));
                if let Some(s) = sha256 {
                    env.push(("SOURCE_SHA256", s.to_ascii_lowercase()));
                }
                if let Some(m) = md5 {
                    env.push(("SOURCE_MD5", m.to_ascii_lowercase()));
                }
                if ca.is_some() {
                    env.push(("SOURCE_CA_FILE", source_ca.clone()));
                }
            }
            Source::Registry { image, auth, ca } => {
                env.push(("SOURCE", "registry".into()));
                env.push(("SOURCE_IMAGE", image.clone()));
                match auth {
                    RegistryAuth::None => {}
                    RegistryAuth::Dvcr => {
                        env.push(("SOURCE_AUTH_FILE", dvcr_auth.clone()));
                        if has_dvcr_ca {
                            env.push(("SOURCE_CA_FILE", dvcr_ca.clone()));
                        }
                    }
                    RegistryAuth::PullSecret(secret) => {
                        env.push((
                            "SOURCE_AUTH_FILE",
                            "/var/run/virtualization/pull-secret/.dockerconfigjson".into(),
                        ));
                        mounts.push(json!({"name": "pull-secret", "mountPath": "/var/run/virtualization/pull-secret", "readOnly": true}));
                        volumes.push(json!({"name": "pull-secret", "secret": {"secretName": secret}}));
                    }
                }
                if ca.is_some() {
                    env.push(("SOURCE_CA_FILE", source_ca.clone()));
                }
            }
            Source::Claim(claim) => {
                env.push(("SOURCE", "file".into()));
                env.push(("SOURCE_PATH", "/source".into()));
                mounts.push(json!({"name": "source", "mountPath": "/source", "readOnly": true}));
                volumes.push(json!({"name": "source", "persistentVolumeClaim": {"claimName": claim, "readOnly": true}}));
            }
            Source::Upload => {
                env.push(("UPLOAD_LISTEN_ADDRESS", format!("0.0.0.0:{UPLOAD_PORT}")));
                env.push(("UPLOAD_CERT_FILE", format!("{SUPPLEMENTS}/tls.crt")));
                env.push(("UPLOAD_KEY_FILE", format!("{SUPPLEMENTS}/tls.key")));
            }
        }
        match &self.destination {
            Destination::Registry(image) => {
                env.push(("DESTINATION", "registry".into()));
                env.push(("DESTINATION_IMAGE", image.clone()));
                env.push(("DESTINATION_AUTH_FILE", dvcr_auth));
                if has_dvcr_ca {
                    env.push(("DESTINATION_CA_FILE", dvcr_ca));
                }
            }
            Destination::Claim { name, max_size } => {
                env.push(("DESTINATION", "dir".into()));
                env.push(("DESTINATION_DIR", "/disk".into()));
                env.push(("DESTINATION_MAX_SIZE", max_size.to_string()));
                mounts.push(json!({"name": "disk", "mountPath": "/disk"}));
                volumes.push(json!({"name": "disk", "persistentVolumeClaim": {"claimName": name}}));
            }
        }
        env.push(("SCRATCH_DIR", "/scratch".into()));
        env.push(("TERMINATION_MESSAGE_PATH", "/dev/termination-log".into()));
        let env: Vec<Value> = env
            .into_iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        let upload = self.source == Source::Upload;
        let mut container = json!({
            "name": if upload { "uploader" } else { "importer" },
            "image": settings.image,
            "command": ["virtualization-dvcr", if upload { "upload" } else { "import" }],
            "env": env,
            "volumeMounts": mounts,
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
        });
        if upload {
            container["ports"] = json!([{"name": "upload", "containerPort": UPLOAD_PORT}]);
            container["readinessProbe"] =
                json!({"httpGet": {"path": "/healthz", "port": UPLOAD_PORT, "scheme": "HTTPS"}});
        }
        let mut spec = json!({
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "containers": [container],
            "volumes": volumes,
        });
        if !settings.node_selector.is_empty() {
            spec["nodeSelector"] = json!(settings.node_selector);
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": self.metadata(), "spec": spec})
    }
}

/// DVCR's image of VirtualImage `name` (uid `uid`) of `namespace`: `ADDRESS/vi/NS/NAME:UID`.
pub fn image_reference(dvcr: &str, namespace: &str, name: &str, uid: &str) -> String {
    format!("{dvcr}/vi/{namespace}/{name}:{uid}")
}

/// What a data Pod says about its work.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// There is no Pod.
    Missing,
    /// The Pod waits to be scheduled or started.
    Pending,
    /// The Pod runs (an uploader waits for the upload).
    Running,
    /// The Pod is being deleted.
    Terminating,
    /// Done; what the Pod reported.
    Succeeded(Box<TerminationMessage>),
    /// Failed; why.
    Failed(String),
}

/// The state of the data Pod `pod`.
pub fn state(pod: Option<&Pod>) -> State {
    let Some(pod) = pod else {
        return State::Missing;
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return State::Terminating;
    }
    let status = pod.status.as_ref();
    let terminated = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    let message = terminated.and_then(|t| t.message.clone()).unwrap_or_default();
    let parsed = serde_json::from_str::<TerminationMessage>(message.trim()).ok();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => match parsed {
            Some(m) if m.error.is_none() => State::Succeeded(Box::new(m)),
            _ => State::Failed(format!(
                "the data Pod succeeded without reporting its result: {:?}",
                truncate(&message)
            )),
        },
        Some("Failed") => State::Failed(match parsed.and_then(|m| m.error) {
            Some(e) => e,
            None if !message.trim().is_empty() => truncate(message.trim()),
            None => {
                let reason = terminated
                    .and_then(|t| t.reason.clone())
                    .or_else(|| status.and_then(|s| s.reason.clone()))
                    .unwrap_or_else(|| "unknown reason".into());
                format!("the data Pod failed: {reason}")
            }
        }),
        Some("Running") => State::Running,
        _ => State::Pending,
    }
}

/// At most 512 characters of a Pod's message, for a condition.
fn truncate(s: &str) -> String {
    match s.char_indices().nth(512) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(source: Source, destination: Destination) -> Job {
        Job {
            owner: Owner {
                kind: "VirtualImage",
                name: "ubuntu".into(),
                namespace: "ns".into(),
                uid: "0f2c".into(),
            },
            source,
            destination,
        }
    }

    fn env(pod: &Value) -> BTreeMap<String, String> {
        pod["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().expect("name").into(),
                    e["value"].as_str().expect("value").into(),
                )
            })
            .collect()
    }

    fn settings() -> DataSettings {
        DataSettings {
            namespace: "d8-virtualization".into(),
            dvcr_address: Some("dvcr:5000".into()),
            dvcr_secret: "dvcr".into(),
            uploader_tls_secret: "uploader-tls".into(),
            image: "virtualization-dvcr:dev".into(),
            node_selector: [("data".to_owned(), "true".to_owned())].into(),
        }
    }

    #[test]
    fn an_http_import_into_dvcr() {
        let image = image_reference("dvcr:5000", "ns", "ubuntu", "0f2c");
        assert_eq!(image, "dvcr:5000/vi/ns/ubuntu:0f2c");
        let j = job(
            Source::Http {
                url: "https://x/a.qcow2".into(),
                sha256: Some("AB".repeat(32)),
                md5: None,
                ca: Some(b"PEM".to_vec()),
            },
            Destination::Registry(image.clone()),
        );
        assert_eq!(j.name(), "d8v-vi-importer-0f2c");
        assert_eq!(j.upload_url(), None);
        let pod = j.pod(&settings(), true);
        let e = env(&pod);
        assert_eq!(e["SOURCE"], "http");
        assert_eq!(e["SOURCE_SHA256"], "ab".repeat(32));
        assert_eq!(e["SOURCE_CA_FILE"], format!("{SUPPLEMENTS}/source-ca.crt"));
        assert_eq!(e["DESTINATION_IMAGE"], image);
        assert_eq!(e["DESTINATION_CA_FILE"], format!("{SUPPLEMENTS}/ca.crt"));
        assert_eq!(pod["spec"]["nodeSelector"]["data"], "true");
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "VirtualImage");
        let dvcr = [
            (".dockerconfigjson".to_owned(), b"{}".to_vec()),
            ("ca.crt".to_owned(), b"CA".to_vec()),
        ]
        .into();
        let s = j.secret(&dvcr, &BTreeMap::new());
        let keys: Vec<_> = s["data"].as_object().expect("data").keys().cloned().collect();
        assert_eq!(keys, [".dockerconfigjson", "ca.crt", "source-ca.crt"]);
    }

    #[test]
    fn an_upload_into_a_claim_gets_no_dvcr_credentials() {
        let mut j = job(
            Source::Upload,
            Destination::Claim {
                name: "vd-root-u".into(),
                max_size: 1 << 30,
            },
        );
        j.owner.kind = "VirtualDisk";
        assert_eq!(j.name(), "d8v-vd-uploader-0f2c");
        assert_eq!(
            j.upload_url().as_deref(),
            Some("https://d8v-vd-uploader-0f2c.ns.svc/upload")
        );
        let pod = j.pod(&settings(), true);
        let e = env(&pod);
        assert_eq!(e["DESTINATION"], "dir");
        assert_eq!(e["DESTINATION_MAX_SIZE"], "1073741824");
        assert_eq!(e["UPLOAD_LISTEN_ADDRESS"], "0.0.0.0:8443");
        assert_eq!(pod["spec"]["containers"][0]["command"][1], "upload");
        assert_eq!(pod["spec"]["containers"][0]["ports"][0]["containerPort"], 8443);
        let dvcr = [(".dockerconfigjson".to_owned(), b"{}".to_vec())].into();
        let tls = [
            ("tls.crt".to_owned(), b"C".to_vec()),
            ("tls.key".to_owned(), b"K".to_vec()),
        ]
        .into();
        let s = j.secret(&dvcr, &tls);
        let keys: Vec<_> = s["data"].as_object().expect("data").keys().cloned().collect();
        assert_eq!(keys, ["tls.crt", "tls.key"]);
        assert_eq!(j.service()["spec"]["ports"][0]["targetPort"], 8443);
    }

    fn pod_with(phase: &str, message: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"phase": phase, "containerStatuses": [{
                "name": "importer", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}},
            }]},
        }))
        .expect("a Pod")
    }

    #[test]
    fn the_state_comes_from_the_termination_message() {
        assert_eq!(state(None), State::Missing);
        let e = state(Some(&pod_with(
            "Failed",
            Some(r#"{"error":"checksum mismatch: x"}"#),
        )));
        assert_eq!(e, State::Failed("checksum mismatch: x".into()));
        let e = state(Some(&pod_with("Failed", Some("panic: boom"))));
        assert_eq!(e, State::Failed("panic: boom".into()));
        let e = state(Some(&pod_with("Failed", None)));
        assert_eq!(e, State::Failed("the data Pod failed: Error".into()));
        let e = state(Some(&pod_with("Succeeded", Some("garbage"))));
        assert!(matches!(e, State::Failed(m) if m.contains("without reporting")));
        assert_eq!(state(Some(&pod_with("Running", None))), State::Running);
        assert_eq!(state(Some(&pod_with("Pending", None))), State::Pending);
    }
}
