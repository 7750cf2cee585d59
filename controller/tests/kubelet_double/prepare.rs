//! What a Pod's first container needs before its process can start: the executable, the
//! environment, the volumes as local directories, the free ports, every container path and port
//! in the arguments and env values replaced.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, ObjectFieldSelector, PersistentVolume,
    PersistentVolumeClaim, Pod, ResourceFieldSelector, Secret, ServiceAccount, Volume,
};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt as _};

use super::Inner;
use super::rewrite::{expand, map_paths, map_ports};

/// Why a Pod's process cannot start (yet): a reason and a message, as a kubelet reports them.
pub enum NotYet {
    /// Something it needs is missing for now (a Secret, a PVC unbound): retried.
    Wait(String, String),
    /// It cannot run here: the Pod fails.
    Fail(String, String),
}

fn wait(reason: &str, msg: impl Into<String>) -> NotYet {
    NotYet::Wait(reason.to_owned(), msg.into())
}

fn fail(reason: &str, msg: impl Into<String>) -> NotYet {
    NotYet::Fail(reason.to_owned(), msg.into())
}

/// A config error: missing for now, or failing when a kubelet would fail too.
const CONFIG: &str = "CreateContainerConfigError";

/// A process ready to spawn.
pub struct Prepared {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// Declared containerPort → free loopback port.
    pub ports: HashMap<u16, u16>,
    /// The local file of the container's terminationMessagePath.
    pub termination: PathBuf,
}

/// Prepares `c` of `pod` in its directory `dir`, its termination message file `dir/termination`.
pub async fn prepare(
    inner: &Inner,
    pod: &Pod,
    c: &Container,
    dir: &Path,
    termination: &str,
) -> Result<Prepared, NotYet> {
    let client = &inner.client;
    let ns = pod.namespace().unwrap_or_default();
    let command = c.command.clone().unwrap_or_default();
    let Some(first) = command.first() else {
        return Err(fail(
            "ContainerCannotRun",
            format!(
                "container {} has no command: the kubelet double cannot know its image's entrypoint",
                c.name
            ),
        ));
    };
    let base = Path::new(first)
        .file_name()
        .and_then(|b| b.to_str())
        .unwrap_or(first);
    let Some(program) = inner.binaries.get(base) else {
        return Err(fail(
            "ContainerCannotRun",
            format!(
                "no local executable for command {first:?} (basename {base:?}) was given to the kubelet double"
            ),
        ));
    };

    // The environment: envFrom, then env (later definitions win), `$(VAR)` over the earlier ones.
    let mut env: Vec<(String, String)> = Vec::new();
    // Which entries are literal values, whose container paths and ports get mapped.
    let mut literal: Vec<bool> = Vec::new();
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(s) = &from.secret_ref {
            secret_data(client, &ns, &s.name, s.optional.unwrap_or(false)).await?
        } else if let Some(m) = &from.config_map_ref {
            config_map_data(client, &ns, &m.name, m.optional.unwrap_or(false)).await?
        } else {
            BTreeMap::new()
        };
        for (k, v) in data {
            env.push((format!("{prefix}{k}"), String::from_utf8_lossy(&v).into_owned()));
            literal.push(false);
        }
    }
    for e in c.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            Some(expand(v, &env))
        } else if let Some(from) = &e.value_from {
            if let Some(s) = &from.secret_key_ref {
                let data = secret_data(client, &ns, &s.name, s.optional.unwrap_or(false)).await?;
                key(
                    &data,
                    &s.key,
                    &format!("Secret {ns}/{}", s.name),
                    s.optional.unwrap_or(false),
                )?
            } else if let Some(m) = &from.config_map_key_ref {
                let data = config_map_data(client, &ns, &m.name, m.optional.unwrap_or(false)).await?;
                key(
                    &data,
                    &m.key,
                    &format!("ConfigMap {ns}/{}", m.name),
                    m.optional.unwrap_or(false),
                )?
            } else if let Some(f) = &from.field_ref {
                Some(field(pod, f)?)
            } else if let Some(r) = &from.resource_field_ref {
                Some(resource(pod, c, r))
            } else {
                Some(String::new())
            }
        } else {
            Some(String::new())
        };
        if let Some(v) = value {
            env.push((e.name.clone(), v));
            literal.push(e.value.is_some());
        }
    }

    // The volumes, and where the container's paths are here.
    let mut volumes: HashMap<&str, PathBuf> = HashMap::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        volumes.insert(&v.name, volume(client, pod, v, dir).await?);
    }
    let mut paths: Vec<(String, PathBuf)> = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let Some(base) = volumes.get(m.name.as_str()) else {
            return Err(fail(
                CONFIG,
                format!("volumeMount {}: no volume {}", m.mount_path, m.name),
            ));
        };
        let sub = match (&m.sub_path, &m.sub_path_expr) {
            (Some(s), _) if !s.is_empty() => s.clone(),
            (_, Some(s)) => expand(s, &env),
            _ => String::new(),
        };
        let local = if sub.is_empty() {
            base.clone()
        } else {
            base.join(sub.trim_start_matches('/'))
        };
        if !local.exists() {
            mkdir(&local)?;
        }
        paths.push((m.mount_path.clone(), local));
    }
    for d in c.volume_devices.iter().flatten() {
        // A block device of a PVC: a file `device` in its PersistentVolume's directory.
        let Some(base) = volumes.get(d.name.as_str()) else {
            return Err(fail(
                CONFIG,
                format!("volumeDevice {}: no volume {}", d.device_path, d.name),
            ));
        };
        let local = base.join("device");
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&local)
            .map_err(|e| fail(CONFIG, format!("{}: {e}", local.display())))?;
        paths.push((d.device_path.clone(), local));
    }
    let termination = dir.join(termination);
    std::fs::write(&termination, b"").map_err(|e| fail(CONFIG, format!("{}: {e}", termination.display())))?;
    let tpath = c
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".to_owned());
    paths.push((tpath, termination.clone()));

    let mut ports = HashMap::new();
    for p in c.ports.iter().flatten() {
        let Ok(declared) = u16::try_from(p.container_port) else {
            return Err(fail(
                CONFIG,
                format!("containerPort {} out of range", p.container_port),
            ));
        };
        let free =
            free_port().map_err(|e| fail("ContainerCannotRun", format!("no free loopback port: {e}")))?;
        ports.insert(declared, free);
    }

    let local = |s: &str| map_ports(&map_paths(s, &paths), &ports);
    let args = command[1..]
        .iter()
        .chain(c.args.iter().flatten())
        .map(|a| local(&expand(a, &env)))
        .collect();
    let env = env
        .into_iter()
        .zip(literal)
        .map(|((k, v), lit)| if lit { (k, local(&v)) } else { (k, v) })
        .collect();
    let cwd = match c.working_dir.as_deref() {
        Some(wd) if !wd.is_empty() => PathBuf::from(local(wd)),
        _ => dir.join("work"),
    };
    mkdir(&cwd)?;
    Ok(Prepared {
        program: program.clone(),
        args,
        env,
        cwd,
        ports,
        termination,
    })
}

fn mkdir(p: &Path) -> Result<(), NotYet> {
    std::fs::create_dir_all(p).map_err(|e| fail(CONFIG, format!("{}: {e}", p.display())))
}

/// A loopback port free now: bound, read, closed.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A Secret's data; empty when optional and missing.
async fn secret_data(
    client: &Client,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, NotYet> {
    match Api::<Secret>::namespaced(client.clone(), ns).get_opt(name).await {
        Ok(Some(s)) => Ok(s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect()),
        Ok(None) if optional => Ok(BTreeMap::new()),
        Ok(None) => Err(wait(CONFIG, format!("secret \"{name}\" not found"))),
        Err(e) => Err(wait(CONFIG, format!("secret \"{name}\": {e}"))),
    }
}

/// A ConfigMap's data and binaryData; empty when optional and missing.
async fn config_map_data(
    client: &Client,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, NotYet> {
    match Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
    {
        Ok(Some(m)) => {
            let mut data: BTreeMap<String, Vec<u8>> = m
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            data.extend(
                m.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            );
            Ok(data)
        }
        Ok(None) if optional => Ok(BTreeMap::new()),
        Ok(None) => Err(wait(CONFIG, format!("configmap \"{name}\" not found"))),
        Err(e) => Err(wait(CONFIG, format!("configmap \"{name}\": {e}"))),
    }
}

/// One key of `data` as a string: None when optional and missing.
fn key(
    data: &BTreeMap<String, Vec<u8>>,
    k: &str,
    what: &str,
    optional: bool,
) -> Result<Option<String>, NotYet> {
    match data.get(k) {
        Some(v) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
        None if optional => Ok(None),
        None => Err(wait(CONFIG, format!("couldn't find key {k} in {what}"))),
    }
}

/// A downward API field of the Pod.
fn field(pod: &Pod, f: &ObjectFieldSelector) -> Result<String, NotYet> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let path = f.field_path.as_str();
    let label = |prefix: &str, map: Option<&BTreeMap<String, String>>| {
        let k = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(map.and_then(|m| m.get(k)).cloned().unwrap_or_default())
    };
    let v = match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" | "status.hostIP" | "status.hostIPs" => "127.0.0.1".to_owned(),
        _ => {
            if let Some(v) = label("metadata.labels['", m.labels.as_ref()) {
                v
            } else if let Some(v) = label("metadata.annotations['", m.annotations.as_ref()) {
                v
            } else {
                return Err(fail(
                    CONFIG,
                    format!("fieldRef {path} is not supported by the kubelet double"),
                ));
            }
        }
    };
    Ok(v)
}

/// A container's resource limit or request as written (the divisor ignored), else `0`.
fn resource(pod: &Pod, c: &Container, r: &ResourceFieldSelector) -> String {
    let c = r
        .container_name
        .as_ref()
        .and_then(|n| pod.spec.as_ref()?.containers.iter().find(|x| &x.name == n))
        .unwrap_or(c);
    let res = c.resources.as_ref();
    let (which, name) = r.resource.split_once('.').unwrap_or(("", ""));
    let map = match which {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => None,
    };
    map.and_then(|m| m.get(name))
        .map_or_else(|| "0".to_owned(), |q| q.0.clone())
}

/// Writes `data` into `dir`: each key as a file, or only `items` (key → path).
fn write_files(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    what: &str,
    optional: bool,
) -> Result<(), NotYet> {
    mkdir(dir)?;
    let files: Vec<(&str, &[u8])> = match items {
        Some(items) => {
            let mut files = Vec::new();
            for i in items {
                match data.get(&i.key) {
                    Some(v) => files.push((i.path.as_str(), v.as_slice())),
                    None if optional => {}
                    None => return Err(wait(CONFIG, format!("couldn't find key {} in {what}", i.key))),
                }
            }
            files
        }
        None => data.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect(),
    };
    for (path, content) in files {
        write(&dir.join(path.trim_start_matches('/')), content)?;
    }
    Ok(())
}

fn write(path: &Path, content: &[u8]) -> Result<(), NotYet> {
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    std::fs::write(path, content).map_err(|e| fail(CONFIG, format!("{}: {e}", path.display())))
}

/// Downward API files into `dir`.
fn write_downward(pod: &Pod, dir: &Path, items: Option<&Vec<DownwardAPIVolumeFile>>) -> Result<(), NotYet> {
    mkdir(dir)?;
    let first = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .cloned()
        .unwrap_or_default();
    for i in items.into_iter().flatten() {
        let v = match (&i.field_ref, &i.resource_field_ref) {
            (Some(f), _) => field(pod, f)?,
            (_, Some(r)) => resource(pod, &first, r),
            _ => String::new(),
        };
        write(&dir.join(i.path.trim_start_matches('/')), v.as_bytes())?;
    }
    Ok(())
}

/// Where a Secret or ConfigMap volume's files come from.
enum Files<'a> {
    Secret(&'a str),
    ConfigMap(&'a str),
}

impl Files<'_> {
    /// Writes the object's keys (or `items`) as files under `path`.
    async fn write(
        &self,
        client: &Client,
        ns: &str,
        path: &Path,
        items: Option<&Vec<KeyToPath>>,
        optional: Option<bool>,
    ) -> Result<(), NotYet> {
        let optional = optional.unwrap_or(false);
        let (data, what) = match self {
            Files::Secret(name) => (
                secret_data(client, ns, name, optional).await?,
                format!("Secret {ns}/{name}"),
            ),
            Files::ConfigMap(name) => (
                config_map_data(client, ns, name, optional).await?,
                format!("ConfigMap {ns}/{name}"),
            ),
        };
        write_files(path, &data, items, &what, optional)
    }
}

/// A volume as a local directory: under `dir/volumes/`, or a PersistentVolume's, or a hostPath.
async fn volume(client: &Client, pod: &Pod, v: &Volume, dir: &Path) -> Result<PathBuf, NotYet> {
    let ns = pod.namespace().unwrap_or_default();
    let path = dir.join("volumes").join(&v.name);
    if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let src = Files::Secret(&name);
        src.write(client, &ns, &path, s.items.as_ref(), s.optional)
            .await?;
    } else if let Some(m) = &v.config_map {
        let src = Files::ConfigMap(&m.name);
        src.write(client, &ns, &path, m.items.as_ref(), m.optional)
            .await?;
    } else if v.empty_dir.is_some() {
        mkdir(&path)?;
    } else if let Some(d) = &v.downward_api {
        write_downward(pod, &path, d.items.as_ref())?;
    } else if let Some(h) = &v.host_path {
        let p = PathBuf::from(&h.path);
        if !p.exists() {
            mkdir(&p)?;
        }
        return Ok(p);
    } else if let Some(c) = &v.persistent_volume_claim {
        return claim_dir(client, &ns, &c.claim_name).await;
    } else if let Some(p) = &v.projected {
        mkdir(&path)?;
        for s in p.sources.iter().flatten() {
            if let Some(s) = &s.secret {
                let src = Files::Secret(&s.name);
                src.write(client, &ns, &path, s.items.as_ref(), s.optional)
                    .await?;
            } else if let Some(m) = &s.config_map {
                let src = Files::ConfigMap(&m.name);
                src.write(client, &ns, &path, m.items.as_ref(), m.optional)
                    .await?;
            } else if let Some(d) = &s.downward_api {
                write_downward(pod, &path, d.items.as_ref())?;
            } else if let Some(t) = &s.service_account_token {
                let token = sa_token(client, pod, t.audience.clone(), t.expiration_seconds).await;
                write(&path.join(t.path.trim_start_matches('/')), token.as_bytes())?;
            }
        }
    } else {
        return Err(fail(
            "ContainerCannotRun",
            format!(
                "volume {}: its kind is not supported by the kubelet double",
                v.name
            ),
        ));
    }
    Ok(path)
}

/// The directory of the PersistentVolume bound to claim `name`: its hostPath or local path,
/// created if missing. Waits while the claim is not bound.
async fn claim_dir(client: &Client, ns: &str, name: &str) -> Result<PathBuf, NotYet> {
    let pvc = match Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
    {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Err(wait(
                "ContainerCreating",
                format!("persistentvolumeclaim \"{name}\" not found"),
            ));
        }
        Err(e) => {
            return Err(wait(
                "ContainerCreating",
                format!("persistentvolumeclaim \"{name}\": {e}"),
            ));
        }
    };
    let pv_name = pvc.spec.and_then(|s| s.volume_name).unwrap_or_default();
    let bound = pvc.status.and_then(|s| s.phase).is_some_and(|p| p == "Bound");
    if pv_name.is_empty() || !bound {
        return Err(wait(
            "ContainerCreating",
            format!("persistentvolumeclaim \"{name}\" is not bound"),
        ));
    }
    let pv = match Api::<PersistentVolume>::all(client.clone())
        .get_opt(&pv_name)
        .await
    {
        Ok(Some(pv)) => pv,
        Ok(None) => {
            return Err(wait(
                "ContainerCreating",
                format!("persistentvolume \"{pv_name}\" not found"),
            ));
        }
        Err(e) => {
            return Err(wait(
                "ContainerCreating",
                format!("persistentvolume \"{pv_name}\": {e}"),
            ));
        }
    };
    let spec = pv.spec.unwrap_or_default();
    let Some(path) = spec.host_path.map(|h| h.path).or(spec.local.map(|l| l.path)) else {
        return Err(fail(
            "ContainerCannotRun",
            format!(
                "persistentvolume \"{pv_name}\" has neither hostPath nor local: unsupported by the kubelet double"
            ),
        ));
    };
    let path = PathBuf::from(path);
    if !path.exists() {
        mkdir(&path)?;
    }
    Ok(path)
}

/// A token of the Pod's ServiceAccount (empty, logged, when none can be had).
async fn sa_token(client: &Client, pod: &Pod, audience: Option<String>, expiration: Option<i64>) -> String {
    let ns = pod.namespace().unwrap_or_default();
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".to_owned());
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.into_iter().collect(),
            expiration_seconds: expiration,
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    match Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create_token_request(&sa, &PostParams::default(), &req)
        .await
    {
        Ok(t) => t.status.map(|s| s.token).unwrap_or_default(),
        Err(e) => {
            eprintln!(
                "kubelet double: {ns}/{}: token of ServiceAccount {sa}: {e}",
                pod.name_any()
            );
            String::new()
        }
    }
}
