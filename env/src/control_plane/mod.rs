//! The local Kubernetes control plane on 127.0.0.1 only: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler of one release, state in one directory.
//!
//! Files in `DIR`: `state` (ports, binaries, version), `env` (for `source`), `tokens.csv`,
//! `kube-apiserver.args`, four kubeconfigs (`admin`, `user1`, `kube-controller-manager`,
//! `kube-scheduler`), `pki/`, `etcd-data/`, and for each process `NAME.pid` and `NAME.log`.
//! Users (token file): admin/admintoken (group system:masters), user1/usertoken (no groups);
//! the controller-manager and scheduler have their own users with random tokens, so RBAC's
//! bootstrap roles apply to them as in a cluster.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::http::{self, Scheme};
use crate::pki;
use crate::process::{Process, free_port, port_in_use, random_bytes, say, write_atomic};

mod files;

pub use files::{
    ADMIN_TOKEN, Pids, State, USER1_TOKEN, apiserver_args, env_vars, kubeconfig, parse_assignments,
    render_env, shell_quote, tokens_csv,
};
use files::{etcd_args, kcm_args, scheduler_args};

const ETCD: &str = "etcd";
const APISERVER: &str = "kube-apiserver";
const KCM: &str = "kube-controller-manager";
const SCHEDULER: &str = "kube-scheduler";

/// What [`ControlPlane::status`] found.
#[derive(Debug, Clone)]
pub struct Status {
    /// One line per component, as `status` prints them: running (with its PID), stopped, or
    /// exited on its own (with the end of its log).
    pub lines: Vec<String>,
    /// All four run.
    pub all_up: bool,
}

/// The control plane whose state lives in one directory.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    dir: PathBuf,
    config: Config,
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))
}

fn canonical(dir: &Path) -> Result<PathBuf> {
    dir.canonicalize()
        .map_err(|e| Error::io(format!("{}", dir.display()), e))
}

impl ControlPlane {
    /// The control plane in `dir` (which `up` creates).
    pub fn new(dir: impl Into<PathBuf>, config: Config) -> ControlPlane {
        ControlPlane {
            dir: dir.into(),
            config,
        }
    }

    /// Its directory, as given.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn process(&self, dir: &Path, name: &'static str) -> Process {
        Process::new(dir, name)
    }

    fn pids(&self, dir: &Path) -> Pids {
        Pids {
            etcd: self.process(dir, ETCD).pid(),
            apiserver: self.process(dir, APISERVER).pid(),
            kcm: self.process(dir, KCM).pid(),
            scheduler: self.process(dir, SCHEDULER).pid(),
        }
    }

    fn load_state(dir: &Path) -> Result<State> {
        let file = dir.join("state");
        if !file.exists() {
            return Err(Error::NotUp(dir.to_path_buf()));
        }
        State::parse(&file, &read(&file)?)
    }

    fn write_env(&self, dir: &Path, state: &State) -> Result<()> {
        let text = render_env(&env_vars(dir, state, self.pids(dir)));
        write_atomic(&dir.join("env"), text.as_bytes(), None)
    }

    /// The variables of `DIR/env` as written last.
    pub fn env(&self) -> Result<Vec<(String, String)>> {
        Ok(parse_assignments(&self.env_file()?))
    }

    /// The text of `DIR/env`.
    pub fn env_file(&self) -> Result<String> {
        let file = self.dir.join("env");
        if !file.exists() {
            return Err(Error::NotUp(self.dir.clone()));
        }
        read(&file)
    }

    /// Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler and returns once
    /// kube-apiserver is ready, the other two are healthy and the controller-manager has made
    /// namespace `default`'s ServiceAccount. On any failure it stops what it started.
    pub fn up(&self, log: &mut dyn Write) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io(format!("creating {}", self.dir.display()), e))?;
        let dir = canonical(&self.dir)?;
        if dir.join("state").exists()
            && [ETCD, APISERVER, KCM, SCHEDULER]
                .iter()
                .any(|n| self.process(&dir, n).running().is_some())
        {
            return Err(Error::AlreadyRunning(dir));
        }
        let etcd_bin = match &self.config.etcd_bin {
            Some(b) => b.clone(),
            None => self.go_build(&["etcd"])?.join("etcd"),
        };
        let kube_bin_dir = match &self.config.kube_bin_dir {
            Some(d) => d.clone(),
            None => {
                let mut args = vec!["kubernetes"];
                args.extend(self.config.kube_version.as_deref());
                self.go_build(&args)?
            }
        };
        for b in [APISERVER, KCM, SCHEDULER, "kubectl"] {
            require_executable(b, &kube_bin_dir.join(b))?;
        }
        require_executable(ETCD, &etcd_bin)?;
        let kube_version = release(&kube_bin_dir.join(APISERVER))?;

        pki::ensure(&dir, log)?;
        let kcm_token = hex(&random_bytes::<16>());
        let scheduler_token = hex(&random_bytes::<16>());
        write_atomic(
            &dir.join("tokens.csv"),
            tokens_csv(&kcm_token, &scheduler_token).as_bytes(),
            Some(0o600),
        )?;

        let mut ports = Vec::new();
        for _ in 0..5 {
            let p = free_port(&ports)?;
            ports.push(p);
        }
        let state = State {
            etcd_client_port: ports[0],
            etcd_peer_port: ports[1],
            apiserver_port: ports[2],
            kcm_port: ports[3],
            scheduler_port: ports[4],
            etcd_bin,
            kube_bin_dir,
            kube_version,
        };
        write_atomic(&dir.join("state"), state.render().as_bytes(), None)?;
        let mut args = apiserver_args(&dir, &state, &self.config.apiserver_extra_args).join("\n");
        args.push('\n');
        write_atomic(&dir.join("kube-apiserver.args"), args.as_bytes(), None)?;
        let ca = read(&dir.join("pki/ca.crt"))?;
        let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca);
        for (file, user, token) in [
            ("admin.kubeconfig", "admin", ADMIN_TOKEN),
            ("user1.kubeconfig", "user1", USER1_TOKEN),
            (
                "kube-controller-manager.kubeconfig",
                "system:kube-controller-manager",
                &kcm_token,
            ),
            (
                "kube-scheduler.kubeconfig",
                "system:kube-scheduler",
                &scheduler_token,
            ),
        ] {
            let text = kubeconfig(state.apiserver_port, &ca, user, token);
            write_atomic(&dir.join(file), text.as_bytes(), Some(0o600))?;
        }

        let data = dir.join("etcd-data");
        if data.exists() {
            std::fs::remove_dir_all(&data)
                .map_err(|e| Error::io(format!("removing {}", data.display()), e))?;
        }
        for n in [ETCD, APISERVER, KCM, SCHEDULER] {
            write_atomic(&self.process(&dir, n).log_file(), b"", None)?;
        }
        if let Err(e) = self.start_all(&dir, &state, log) {
            say(log, "up failed, stopping");
            self.stop_all(&dir, log);
            return Err(e);
        }
        self.write_env(&dir, &state)?;
        say(
            log,
            &format!(
                "up: Kubernetes {} at https://127.0.0.1:{}; source {}/env",
                state.kube_version,
                state.apiserver_port,
                dir.display()
            ),
        );
        Ok(())
    }

    fn start_all(&self, dir: &Path, state: &State, log: &mut dyn Write) -> Result<()> {
        let timeout = self.config.ready_timeout;
        // etcd
        say(
            log,
            &format!(
                "starting etcd on 127.0.0.1:{} (peer {})",
                state.etcd_client_port, state.etcd_peer_port
            ),
        );
        let etcd = self.process(dir, ETCD);
        let pid = etcd.launch(&state.etcd_bin, &etcd_args(dir, state))?;
        etcd.wait_until(
            Some(pid),
            &format!("etcd /health on 127.0.0.1:{}", state.etcd_client_port),
            timeout,
            || {
                let a = http::get(state.etcd_client_port, "/health", Scheme::Http, None)?;
                if a.body.contains(r#""health":"true""#) {
                    Ok(())
                } else {
                    Err(format!("{} {}", a.status, a.body.trim()))
                }
            },
        )?;
        self.start_apiserver_with(dir, state, log)?;
        // kube-controller-manager and kube-scheduler
        for (name, port, args) in [
            (KCM, state.kcm_port, kcm_args(dir, state)),
            (SCHEDULER, state.scheduler_port, scheduler_args(dir, state)),
        ] {
            say(log, &format!("starting {name} on https://127.0.0.1:{port}"));
            let p = self.process(dir, name);
            let pid = p.launch(&state.kube_bin_dir.join(name), &args)?;
            let t0 = Instant::now();
            p.wait_until(
                Some(pid),
                &format!("{name} /healthz on https://127.0.0.1:{port}"),
                timeout,
                || {
                    let a = http::get(port, "/healthz", Scheme::HttpsInsecure, None)?;
                    ok_body(&a)
                },
            )?;
            say(
                log,
                &format!("{name} healthy (pid {pid}) after {} s", t0.elapsed().as_secs()),
            );
        }
        // The controller-manager's first visible work: namespace default's ServiceAccount.
        let kcm = self.process(dir, KCM);
        let ca = dir.join("pki/ca.crt");
        let t0 = Instant::now();
        kcm.wait_until(
            kcm.pid(),
            "the controller-manager to create ServiceAccount default/default",
            timeout,
            || {
                let a = http::get(
                    state.apiserver_port,
                    "/api/v1/namespaces/default/serviceaccounts/default",
                    Scheme::Https(&ca),
                    Some(ADMIN_TOKEN),
                )?;
                if a.status == 200 {
                    Ok(())
                } else {
                    Err(format!("HTTP {}", a.status))
                }
            },
        )?;
        say(
            log,
            &format!(
                "ServiceAccount default/default exists after {} s",
                t0.elapsed().as_secs()
            ),
        );
        Ok(())
    }

    fn start_apiserver_with(&self, dir: &Path, state: &State, log: &mut dyn Write) -> Result<()> {
        let file = dir.join("kube-apiserver.args");
        let args: Vec<String> = read(&file)?
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        let api = self.process(dir, APISERVER);
        if let Some(pid) = api.running() {
            return Err(Error::ProcessRunning { name: APISERVER, pid });
        }
        if self.process(dir, ETCD).running().is_none() {
            return Err(Error::ProcessMissing {
                name: ETCD,
                dir: dir.to_path_buf(),
            });
        }
        // The old listener may take a moment to go away after a stop.
        let end = Instant::now() + Duration::from_secs(5);
        while port_in_use(state.apiserver_port) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
        }
        if port_in_use(state.apiserver_port) {
            return Err(Error::PortTaken(state.apiserver_port));
        }
        say(
            log,
            &format!(
                "starting kube-apiserver on https://127.0.0.1:{}",
                state.apiserver_port
            ),
        );
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(api.log_file())
            .map_err(|e| Error::io(format!("opening {}", api.log_file().display()), e))?;
        let _ = write!(f, "\n===== {} start =====\n", iso_now());
        drop(f);
        let pid = api.launch(&state.kube_bin_dir.join(APISERVER), &args)?;
        self.write_env(dir, state)?;
        let ca = dir.join("pki/ca.crt");
        let t0 = Instant::now();
        api.wait_until(
            Some(pid),
            &format!(
                "kube-apiserver /readyz on https://127.0.0.1:{}",
                state.apiserver_port
            ),
            self.config.ready_timeout,
            || {
                let a = http::get(
                    state.apiserver_port,
                    "/readyz",
                    Scheme::Https(&ca),
                    Some(ADMIN_TOKEN),
                )?;
                ok_body(&a)
            },
        )?;
        say(
            log,
            &format!(
                "kube-apiserver ready (pid {pid}) after {} s",
                t0.elapsed().as_secs()
            ),
        );
        Ok(())
    }

    fn stop_all(&self, dir: &Path, log: &mut dyn Write) {
        for n in [SCHEDULER, KCM, APISERVER, ETCD] {
            self.process(dir, n).stop(self.config.stop_timeout, log);
        }
    }

    /// [`ControlPlane::up`], then a guard that brings it down when dropped (its log to
    /// stderr).
    pub fn start(self, log: &mut dyn Write) -> Result<Running> {
        self.up(log)?;
        Ok(Running(self))
    }

    /// Stops all four (TERM, then KILL); safe to repeat, and on a directory that is not there.
    pub fn down(&self, log: &mut dyn Write) -> Result<()> {
        if !self.dir.is_dir() {
            say(
                log,
                &format!("{} does not exist, nothing to stop", self.dir.display()),
            );
            return Ok(());
        }
        let dir = canonical(&self.dir)?;
        self.stop_all(&dir, log);
        if dir.join("state").exists() {
            let state = Self::load_state(&dir)?;
            self.write_env(&dir, &state)?;
        }
        say(log, &format!("down: {}", dir.display()));
        Ok(())
    }

    /// Stops kube-apiserver only.
    pub fn stop_apiserver(&self, log: &mut dyn Write) -> Result<()> {
        let dir = canonical(&self.dir)?;
        let state = Self::load_state(&dir)?;
        self.process(&dir, APISERVER).stop(self.config.stop_timeout, log);
        self.write_env(&dir, &state)
    }

    /// Starts kube-apiserver again: same port, same flags; returns once it is ready.
    pub fn start_apiserver(&self, log: &mut dyn Write) -> Result<()> {
        let dir = canonical(&self.dir)?;
        let state = Self::load_state(&dir)?;
        self.start_apiserver_with(&dir, &state, log)?;
        self.write_env(&dir, &state)
    }

    /// [`ControlPlane::stop_apiserver`], then [`ControlPlane::start_apiserver`].
    pub fn restart_apiserver(&self, log: &mut dyn Write) -> Result<()> {
        self.stop_apiserver(log)?;
        self.start_apiserver(log)
    }

    /// What runs.
    pub fn status(&self) -> Result<Status> {
        let dir = canonical(&self.dir)?;
        let state = Self::load_state(&dir)?;
        let mut lines = Vec::new();
        let mut all_up = true;
        for (name, addr) in [
            (ETCD, Some(format!("http://127.0.0.1:{}", state.etcd_client_port))),
            (
                APISERVER,
                Some(format!("https://127.0.0.1:{}", state.apiserver_port)),
            ),
            (KCM, None),
            (SCHEDULER, None),
        ] {
            let process = self.process(&dir, name);
            match (process.running(), process.pid()) {
                (Some(pid), _) => lines.push(match addr {
                    Some(a) => format!("{name}: running pid {pid} {a}"),
                    None => format!("{name}: running pid {pid}"),
                }),
                // A PID file without its process: it died (`down` removes the files).
                (None, Some(pid)) => {
                    lines.push(format!(
                        "{name}: exited (pid {pid}); the end of {}:\n{}",
                        process.log_file().display(),
                        process.log_tail()
                    ));
                    all_up = false;
                }
                (None, None) => {
                    lines.push(format!("{name}: stopped"));
                    all_up = false;
                }
            }
        }
        Ok(Status { lines, all_up })
    }

    /// `scripts/go-build.sh ARGS`: the directory it prints (its log goes to our stderr).
    fn go_build(&self, args: &[&str]) -> Result<PathBuf> {
        let script = self.config.scripts_dir.join("go-build.sh");
        let command = format!("{} {}", script.display(), args.join(" "));
        let out = Command::new(&script)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| Error::io(format!("running {command}"), e))?;
        if !out.status.success() {
            return Err(Error::Command {
                command,
                detail: out.status.to_string(),
            });
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    }
}

/// A control plane that [`ControlPlane::down`] stops when this is dropped.
#[derive(Debug)]
pub struct Running(ControlPlane);

impl std::ops::Deref for Running {
    type Target = ControlPlane;

    fn deref(&self) -> &ControlPlane {
        &self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Err(e) = self.0.down(&mut std::io::stderr()) {
            eprintln!("[control-plane] down on drop: {e}");
        }
    }
}

fn ok_body(a: &http::Answer) -> std::result::Result<(), String> {
    if a.body.trim() == "ok" {
        Ok(())
    } else {
        let body = a.body.trim();
        let body = body.lines().last().unwrap_or(body);
        Err(format!("HTTP {} {body}", a.status))
    }
}

fn require_executable(name: &str, path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        _ => Err(Error::MissingBinary {
            name: name.to_owned(),
            path: path.to_path_buf(),
        }),
    }
}

/// `kube-apiserver --version` prints `Kubernetes v1.36.3`: the second word.
fn release(apiserver: &Path) -> Result<String> {
    let command = format!("{} --version", apiserver.display());
    let out = Command::new(apiserver)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io(format!("running {command}"), e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.split_whitespace().nth(1) {
        Some(v) if out.status.success() => Ok(v.to_owned()),
        _ => Err(Error::Command {
            command,
            detail: format!(
                "{}: {}{}",
                out.status,
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Now as `date -Is` in UTC: `2026-12-08T00:31:02+00:00`.
fn iso_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    match time::OffsetDateTime::from_unix_timestamp(secs) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}+00:00",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => secs.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_time_shape() {
        let t = iso_now();
        assert_eq!(t.len(), 25, "{t}");
        assert!(t.ends_with("+00:00"));
    }
}
