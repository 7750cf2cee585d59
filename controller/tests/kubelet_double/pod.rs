//! One Pod's life on the double: prepared, its process run (and restarted under `OnFailure`),
//! its status written as a kubelet would, killed and deleted when the Pod is being deleted.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt as _};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::node::now;
use super::prepare::{NotYet, Prepared, prepare};
use super::{Inner, Key};

/// How often a Pod waiting for what it needs is prepared again.
const RETRY: Duration = Duration::from_secs(1);
/// The longest a stopped process is given after SIGTERM before SIGKILL.
const MAX_GRACE: Duration = Duration::from_secs(5);
/// Restarts of a failed process under `restartPolicy: OnFailure`.
const MAX_RESTARTS: i32 = 3;
/// A kubelet's limits on a termination message, and on the log tail that stands in for it.
const MESSAGE_BYTES: usize = 4096;
const LOG_TAIL_BYTES: usize = 2048;
const LOG_TAIL_LINES: usize = 80;

/// Until `stop` says so (or its sender is dropped: the Pod is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped at once: holding it would block the sender.
    let _ = stop.wait_for(|s| *s).await.map(drop);
}

/// Deletes Pod `k` of `uid` with grace period 0, as a kubelet does once its containers stopped.
pub async fn delete(client: Client, k: Key, uid: String) {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<Pod>::namespaced(client, &k.0).delete(&k.1, &dp).await {
        // Gone already, or a new Pod of that name.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => eprintln!("kubelet double: {}/{}: delete: {e}", k.0, k.1),
        Ok(_) => {}
    }
}

/// How a Pod's life on the double ended.
enum Ended {
    /// It is being deleted (or gone): its processes are stopped.
    Stopped,
    /// Its phase is final (Succeeded or Failed); it waits for its deletion.
    Done,
}

/// Where a Pod's init containers are.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Init {
    Running,
    Done,
    Failed,
}

/// Runs `pod` until it is deleted (then its process is killed and the Pod deleted).
pub async fn run(inner: Arc<Inner>, pod: Pod, mut stop: watch::Receiver<bool>) {
    let k: Key = (pod.namespace().unwrap_or_default(), pod.name_any());
    let uid = pod.uid().unwrap_or_default();
    let api = Api::<Pod>::namespaced(inner.client.clone(), &k.0);
    let s = Status {
        api: &api,
        name: &k.1,
        uid: &uid,
        container: pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .cloned()
            .unwrap_or_default(),
        start_time: now(),
    };
    if let Ended::Done = life(&inner, &pod, &k, &uid, &s, &mut stop).await {
        stopped(&mut stop).await;
    }
    delete(inner.client.clone(), k, uid).await;
}

/// The init containers run in order, then the first container; until the Pod's phase is final
/// or it is being deleted.
async fn life(
    inner: &Inner,
    pod: &Pod,
    k: &Key,
    uid: &str,
    s: &Status<'_>,
    stop: &mut watch::Receiver<bool>,
) -> Ended {
    let dir = inner.pod_dir(&k.0, &k.1);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        s.failed_to_start("ContainerCannotRun", &format!("{}: {e}", dir.display()))
            .await;
        return Ended::Done;
    }
    let log = dir.join("log");
    if s.container.name.is_empty() {
        s.failed_to_start("ContainerCannotRun", "the Pod has no containers")
            .await;
        return Ended::Done;
    }
    let spec = pod.spec.clone().unwrap_or_default();
    let grace = spec.termination_grace_period_seconds.map_or(MAX_GRACE, |g| {
        Duration::from_secs(u64::try_from(g).unwrap_or(0)).min(MAX_GRACE)
    });
    let fallback = |c: &Container| c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");

    // Init containers: each to completion, in order; one failing fails the Pod.
    let inits = spec.init_containers.unwrap_or_default();
    let mut statuses: Vec<Value> = inits
        .iter()
        .map(|c| {
            s.status_of(
                c,
                0,
                false,
                json!({"waiting": {"reason": "PodInitializing"}}),
                &json!({}),
                None,
            )
        })
        .collect();
    for (i, c) in inits.iter().enumerate() {
        let p = match prepared(
            inner,
            pod,
            c,
            &dir,
            &format!("termination-log.{}", c.name),
            s,
            stop,
        )
        .await
        {
            Ok(p) => p,
            Err(ended) => return ended,
        };
        let started_at = now();
        let from = log_len(&log);
        let mut child = match spawn(&p, &log, &k.1) {
            Ok(c) => c,
            Err(e) => {
                s.failed_to_start("ContainerCannotRun", &format!("{}: {e}", p.program.display()))
                    .await;
                return Ended::Done;
            }
        };
        let pid = child.id();
        let group = Group(pid);
        statuses[i] = s.status_of(
            c,
            0,
            false,
            json!({"running": {"startedAt": started_at}}),
            &json!({}),
            pid,
        );
        s.initializing(&statuses, Init::Running).await;
        let exit = tokio::select! {
            exit = child.wait() => exit,
            () = stopped(stop) => {
                kill(&mut child, pid, grace).await.ok();
                return Ended::Stopped;
            }
        };
        drop(group);
        let code = exit.as_ref().map_or(128, code);
        let msg = message(&p.termination, &log, from, fallback(c), code != 0);
        statuses[i] = s.status_of(
            c,
            0,
            false,
            json!({"terminated": terminated(code, msg, &started_at)}),
            &json!({}),
            None,
        );
        if code != 0 {
            eprintln!(
                "kubelet double: {}/{}: init container {} exited {code}",
                k.0, k.1, c.name
            );
            s.initializing(&statuses, Init::Failed).await;
            return Ended::Done;
        }
    }
    if !inits.is_empty() {
        s.initializing(&statuses, Init::Done).await;
    }

    // The first container, restarted under OnFailure.
    let c = &s.container;
    let p = match prepared(inner, pod, c, &dir, "termination-log", s, stop).await {
        Ok(p) => p,
        Err(ended) => return ended,
    };
    inner.set_ports(k, uid, p.ports.clone());
    let on_failure = spec.restart_policy.as_deref() == Some("OnFailure");
    let mut restarts = 0;
    let mut last_state = json!({});
    loop {
        let started_at = now();
        let from = log_len(&log);
        let mut child = match spawn(&p, &log, &k.1) {
            Ok(c) => c,
            Err(e) => {
                let msg = format!("{}: {e}", p.program.display());
                eprintln!("kubelet double: {}/{}: {msg}", k.0, k.1);
                s.failed_to_start("ContainerCannotRun", &msg).await;
                return Ended::Done;
            }
        };
        let pid = child.id();
        let group = Group(pid);
        s.running(restarts, &started_at, &last_state, pid).await;
        let exit = tokio::select! {
            exit = child.wait() => exit,
            () = stopped(stop) => {
                let exit = kill(&mut child, pid, grace).await;
                let code = exit.map_or(137, |e| code(&e));
                let msg = message(&p.termination, &log, from, fallback(c), code != 0);
                s.terminated(code, restarts, terminated(code, msg, &started_at)).await;
                return Ended::Stopped;
            }
        };
        // What the process left behind goes with it, as a container's cgroup does.
        drop(group);
        let code = exit.as_ref().map_or(128, code);
        let msg = match &exit {
            Ok(_) => message(&p.termination, &log, from, fallback(c), code != 0),
            Err(e) => format!("waiting for the process: {e}"),
        };
        let terminated = terminated(code, msg, &started_at);
        if code != 0 && on_failure && restarts < MAX_RESTARTS {
            restarts += 1;
            last_state = json!({ "terminated": terminated });
            let _ = std::fs::write(&p.termination, b"");
            tokio::select! {
                () = tokio::time::sleep(RETRY) => continue,
                () = stopped(stop) => return Ended::Stopped,
            }
        }
        s.terminated(code, restarts, terminated).await;
        return Ended::Done;
    }
}

/// `c` prepared, retried while what it needs is missing (its status `Pending`, waiting).
async fn prepared(
    inner: &Inner,
    pod: &Pod,
    c: &Container,
    dir: &Path,
    termination: &str,
    s: &Status<'_>,
    stop: &mut watch::Receiver<bool>,
) -> Result<Prepared, Ended> {
    let mut last_wait = None;
    loop {
        match prepare(inner, pod, c, dir, termination).await {
            Ok(p) => return Ok(p),
            Err(NotYet::Wait(reason, msg)) => {
                if last_wait.as_ref() != Some(&msg) {
                    eprintln!("kubelet double: {}: {}: waiting: {reason}: {msg}", s.name, c.name);
                    s.waiting(&reason, &msg).await;
                    last_wait = Some(msg);
                }
                tokio::select! {
                    () = tokio::time::sleep(RETRY) => {}
                    () = stopped(stop) => return Err(Ended::Stopped),
                }
            }
            Err(NotYet::Fail(reason, msg)) => {
                eprintln!("kubelet double: {}: {}: failed: {reason}: {msg}", s.name, c.name);
                s.failed_to_start(&reason, &msg).await;
                return Err(Ended::Done);
            }
        }
    }
}

/// The log's length now: where a new run's output starts.
fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map_or(0, |m| m.len())
}

/// Starts the process, in a process group of its own, its output appended to `log`.
fn spawn(p: &Prepared, log: &Path, hostname: &str) -> std::io::Result<tokio::process::Child> {
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    let mut cmd = tokio::process::Command::new(&p.program);
    cmd.args(&p.args)
        .env_clear()
        .current_dir(&p.cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .process_group(0);
    for k in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    cmd.env("HOSTNAME", hostname);
    cmd.envs(p.env.iter().map(|(k, v)| (k, v)));
    cmd.spawn()
}

/// A running process's group, killed when dropped: at once after the process exits, or when the
/// runtime stops and drops the Pod's task.
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL".to_owned(), "--".to_owned(), format!("-{pid}")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Sends `SIG` to the process group `pid` leads (an error, such as none left, is ignored).
async fn signal_group(pid: u32, sig: &str) {
    let _ = tokio::process::Command::new("kill")
        .args([format!("-{sig}"), "--".to_owned(), format!("-{pid}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
}

/// SIGTERM to the process group, SIGKILL after `grace`; how the process ended.
async fn kill(
    child: &mut tokio::process::Child,
    pid: Option<u32>,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    if let Some(pid) = pid {
        signal_group(pid, "TERM").await;
        if let Ok(exit) = tokio::time::timeout(grace, child.wait()).await {
            signal_group(pid, "KILL").await;
            return exit;
        }
        signal_group(pid, "KILL").await;
    }
    let _ = child.start_kill();
    child.wait().await
}

/// An exit status as a container's exit code: 128 + the signal when killed.
fn code(e: &std::process::ExitStatus) -> i32 {
    e.code().unwrap_or_else(|| 128 + e.signal().unwrap_or(9))
}

/// The termination message: the file's content (at most 4096 bytes); if empty, under
/// `FallbackToLogsOnError` and `failed`, the tail (80 lines, 2048 bytes) of what the run wrote
/// to the log from offset `from`.
fn message(termination: &Path, log: &Path, from: u64, fallback: bool, failed: bool) -> String {
    let file = std::fs::read(termination).unwrap_or_default();
    if !file.is_empty() {
        return String::from_utf8_lossy(&file[..file.len().min(MESSAGE_BYTES)]).into_owned();
    }
    if !(fallback && failed) {
        return String::new();
    }
    let all = std::fs::read(log).unwrap_or_default();
    let log = all.get(usize::try_from(from).unwrap_or(0)..).unwrap_or_default();
    let mut start = log.len().saturating_sub(LOG_TAIL_BYTES);
    // The last 80 lines (a final newline ends the last one).
    let body = log.strip_suffix(b"\n").unwrap_or(log);
    if let Some(i) = body
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(LOG_TAIL_LINES - 1)
        .map(|(i, _)| i + 1)
    {
        start = start.max(i);
    }
    String::from_utf8_lossy(&log[start..]).into_owned()
}

/// A container's `state.terminated`.
fn terminated(code: i32, message: String, started_at: &str) -> Value {
    let mut t = json!({
        "exitCode": code,
        "reason": if code == 0 { "Completed" } else { "Error" },
        "startedAt": started_at,
        "finishedAt": now(),
    });
    if !message.is_empty() {
        t["message"] = json!(message);
    }
    t
}

/// Writes a Pod's status.
struct Status<'a> {
    api: &'a Api<Pod>,
    name: &'a str,
    /// The Pod's uid, in each patch: it then fails on a new Pod of the same name.
    uid: &'a str,
    container: Container,
    start_time: String,
}

impl Status<'_> {
    async fn patch(&self, status: Value) {
        let patch = Patch::Merge(json!({ "metadata": {"uid": self.uid}, "status": status }));
        match self
            .api
            .patch_status(self.name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {}
            // Deleted meanwhile, or replaced by a new Pod of that name (the uid "immutable"):
            // nothing to report to.
            Err(kube::Error::Api(e))
                if e.code == 404 || e.code == 422 && e.message.contains("metadata.uid") => {}
            Err(e) => eprintln!("kubelet double: {}: status: {e}", self.name),
        }
    }

    /// The Pod's conditions: all True when `ready`, else Ready and ContainersReady False.
    fn conditions(ready: bool, reason: &str) -> Value {
        let t = now();
        let c = |ty: &str, ok: bool| {
            let mut c = json!({"type": ty, "status": if ok { "True" } else { "False" },
                               "lastProbeTime": null, "lastTransitionTime": t});
            if !ok && !reason.is_empty() {
                c["reason"] = json!(reason);
            }
            c
        };
        json!([
            c("PodReadyToStartContainers", true),
            c("Initialized", true),
            c("Ready", ready),
            c("ContainersReady", ready),
            c("PodScheduled", true),
        ])
    }

    /// The first container's status: ready and started while `running`.
    fn container(&self, restarts: i32, running: bool, state: Value, last: &Value, pid: Option<u32>) -> Value {
        self.status_of(&self.container, restarts, running, state, last, pid)
    }

    /// A container's status in `state`; started while running.
    fn status_of(
        &self,
        container: &Container,
        restarts: i32,
        ready: bool,
        state: Value,
        last: &Value,
        pid: Option<u32>,
    ) -> Value {
        let image = container.image.clone().unwrap_or_default();
        let started = state.get("running").is_some();
        let mut c = json!({
            "name": container.name,
            "image": image,
            "imageID": format!("kubelet-double://{image}"),
            "ready": ready,
            "started": started,
            "restartCount": restarts,
            "state": state,
            "lastState": last,
        });
        if let Some(pid) = pid {
            c["containerID"] = json!(format!("kubelet-double://{pid}"));
        }
        c
    }

    /// The init containers' statuses: `Running` while they run, `Done` once all completed,
    /// `Failed` when one failed (and the Pod with it).
    async fn initializing(&self, init: &[Value], stage: Init) {
        let waiting = json!({"waiting": {"reason": "PodInitializing"}});
        let mut s = Self::ips();
        s["phase"] = json!(if stage == Init::Failed {
            "Failed"
        } else {
            "Pending"
        });
        s["startTime"] = json!(self.start_time);
        s["conditions"] = Self::conditions(false, "ContainersNotInitialized");
        if stage != Init::Done {
            s["conditions"][1]["status"] = json!("False");
            s["conditions"][1]["reason"] = json!("ContainersNotInitialized");
        }
        s["initContainerStatuses"] = json!(init);
        s["containerStatuses"] = json!([self.container(0, false, waiting, &json!({}), None)]);
        self.patch(s).await;
    }

    fn ips() -> Value {
        json!({"hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
               "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]})
    }

    /// Pending: the container waits for `reason`.
    async fn waiting(&self, reason: &str, message: &str) {
        let mut s = json!({
            "phase": "Pending",
            "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "conditions": Self::conditions(false, "ContainersNotReady"),
            "containerStatuses": [self.container(0, false, json!({"waiting": {"reason": reason, "message": message}}), &json!({}), None)],
        });
        s["conditions"][0]["status"] = json!("False");
        self.patch(s).await;
    }

    /// Running, ready.
    async fn running(&self, restarts: i32, started_at: &str, last: &Value, pid: Option<u32>) {
        let mut s = Self::ips();
        s["phase"] = json!("Running");
        s["startTime"] = json!(self.start_time);
        s["conditions"] = Self::conditions(true, "");
        s["containerStatuses"] = json!([self.container(
            restarts,
            true,
            json!({"running": {"startedAt": started_at}}),
            last,
            pid
        )]);
        self.patch(s).await;
    }

    /// Succeeded (exit code 0) or Failed.
    async fn terminated(&self, code: i32, restarts: i32, terminated: Value) {
        let mut s = Self::ips();
        s["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
        s["startTime"] = json!(self.start_time);
        s["conditions"] = Self::conditions(false, "PodCompleted");
        s["containerStatuses"] = json!([self.container(
            restarts,
            false,
            json!({ "terminated": terminated }),
            &json!({}),
            None
        )]);
        self.patch(s).await;
    }

    /// Failed without a process: `reason` and `message` in the container's terminated state.
    async fn failed_to_start(&self, reason: &str, message: &str) {
        let t = now();
        let terminated = json!({"exitCode": 128, "reason": reason, "message": message,
                                "startedAt": null, "finishedAt": t});
        let mut s = json!({
            "phase": "Failed",
            "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "reason": reason,
            "message": message,
            "conditions": Self::conditions(false, "PodFailed"),
        });
        if !self.container.name.is_empty() {
            s["containerStatuses"] =
                json!([self.container(0, false, json!({ "terminated": terminated }), &json!({}), None)]);
        }
        self.patch(s).await;
    }
}
