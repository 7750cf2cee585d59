//! Supervised processes: started detached (a process group of their own, stdin from
//! `/dev/null`, stdout and stderr appended to their log file) so they outlive the command that
//! started them; a PID file each; stopped by PID (TERM, then KILL after a deadline); waits
//! with deadlines that, when they give up, say what they waited for and show the log's tail.

use std::io::{Read, Seek, SeekFrom, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Lines of a log shown when a wait gives up (30).
const LOG_TAIL_LINES: usize = 30;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Children started by this process, kept so that they are reaped (no zombie answers to
/// `kill -0`) when they exit while we still run.
static CHILDREN: Mutex<Vec<Child>> = Mutex::new(Vec::new());

/// Makes every wait in progress give up with [`Error::Interrupted`] (the binary calls it on
/// Ctrl-C and SIGTERM, so `up` stops what it started).
pub fn interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

fn reap() {
    if let Ok(mut children) = CHILDREN.lock() {
        children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
    }
}

/// One process of the environment, known by its name: `DIR/NAME.pid` and `DIR/NAME.log`.
#[derive(Debug, Clone)]
pub struct Process {
    /// `etcd`, `kube-apiserver`, ...: also what its command line must contain before it is
    /// signalled (a PID may have been reused).
    pub name: &'static str,
    /// The directory holding its PID and log files.
    pub dir: PathBuf,
}

impl Process {
    /// The process `name` of the environment in `dir`.
    pub fn new(dir: &Path, name: &'static str) -> Process {
        Process {
            name,
            dir: dir.to_path_buf(),
        }
    }

    /// `DIR/NAME.pid`.
    pub fn pid_file(&self) -> PathBuf {
        self.dir.join(format!("{}.pid", self.name))
    }

    /// `DIR/NAME.log`.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.name))
    }

    /// The PID its file holds, if any.
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.pid_file())
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Its PID while it runs (see [`pid_alive`]).
    pub fn running(&self) -> Option<u32> {
        self.pid().filter(|&p| pid_alive(p, self.name))
    }

    /// Starts `program args` detached, its output appended to the log; writes the PID file.
    pub fn launch(&self, program: &Path, args: &[String]) -> Result<u32> {
        let log_path = self.log_file();
        let _ = std::fs::remove_file(self.pid_file());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| Error::io(format!("opening {}", log_path.display()), e))?;
        let err = log
            .try_clone()
            .map_err(|e| Error::io(format!("opening {}", log_path.display()), e))?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            // Its own process group: Ctrl-C at the terminal reaches the command, not it.
            .process_group(0)
            .spawn()
            .map_err(|e| Error::io(format!("starting {}", program.display()), e))?;
        let pid = child.id();
        if let Ok(mut children) = CHILDREN.lock() {
            children.push(child);
        }
        write_atomic(&self.pid_file(), format!("{pid}\n").as_bytes(), None)?;
        Ok(pid)
    }

    /// TERM, then KILL after `stop_timeout` (zero: KILL at once); removes the PID file. Safe
    /// to call when it does not run. Logs what it does to `log`.
    pub fn stop(&self, stop_timeout: Duration, log: &mut dyn Write) {
        let Some(pid) = self.running() else {
            let _ = std::fs::remove_file(self.pid_file());
            return;
        };
        say(log, &format!("stopping {} (pid {pid})", self.name));
        let p = rustix::process::Pid::from_raw(pid as i32);
        if !stop_timeout.is_zero() {
            if let Some(p) = p {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
            self.wait_gone(pid, stop_timeout);
        }
        if pid_alive(pid, self.name) {
            if !stop_timeout.is_zero() {
                say(
                    log,
                    &format!(
                        "{} (pid {pid}) still alive after {}s, sending KILL",
                        self.name,
                        stop_timeout.as_secs()
                    ),
                );
            }
            if let Some(p) = p {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            self.wait_gone(pid, Duration::from_secs(5));
        }
        let _ = std::fs::remove_file(self.pid_file());
    }

    fn wait_gone(&self, pid: u32, timeout: Duration) {
        let end = Instant::now() + timeout;
        while pid_alive(pid, self.name) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last 30 lines of its log.
    pub fn log_tail(&self) -> String {
        tail(&self.log_file(), LOG_TAIL_LINES)
    }

    /// Polls `check` every 250 ms until it answers `Ok`, for at most `timeout`. Gives up
    /// early when the process exits (if `pid` is given) or on [`interrupt`]; every error names
    /// `waited_for` and carries the tail of the log.
    pub fn wait_until(
        &self,
        pid: Option<u32>,
        waited_for: &str,
        timeout: Duration,
        mut check: impl FnMut() -> std::result::Result<(), String>,
    ) -> Result<()> {
        let end = Instant::now() + timeout;
        loop {
            let last = match check() {
                Ok(()) => return Ok(()),
                Err(answer) => answer,
            };
            if interrupted() {
                return Err(Error::Interrupted(waited_for.to_owned()));
            }
            if let Some(pid) = pid
                && !pid_alive_any(pid)
            {
                return Err(Error::Exited {
                    name: self.name,
                    waited_for: waited_for.to_owned(),
                    log: self.log_file(),
                    log_tail: self.log_tail(),
                });
            }
            if Instant::now() >= end {
                return Err(Error::NotReady {
                    waited_for: waited_for.to_owned(),
                    timeout,
                    last,
                    log: self.log_file(),
                    log_tail: self.log_tail(),
                });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The process runs (not a zombie) and its command line mentions `name`.
pub fn pid_alive(pid: u32, name: &str) -> bool {
    pid_alive_any(pid)
        && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            let c: Vec<u8> = c.into_iter().map(|b| if b == 0 { b' ' } else { b }).collect();
            String::from_utf8_lossy(&c).contains(name)
        })
}

/// The process exists and is not a zombie.
fn pid_alive_any(pid: u32) -> bool {
    reap();
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "PID (comm) STATE ...": comm may hold spaces and parentheses, the state follows the last ')'
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The last `lines` lines of a file (at most its last 64 KiB); empty if it cannot be read.
pub fn tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Something listens on the loopback port.
pub fn port_in_use(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_err()
}

/// A free loopback port in 20000-32767 (below the ephemeral range) not in `excluded`.
pub fn free_port(excluded: &[u16]) -> Result<u16> {
    for _ in 0..200 {
        let r = u16::from_le_bytes(random_bytes::<2>());
        let p = 20000 + r % 12768;
        if excluded.contains(&p) || port_in_use(p) {
            continue;
        }
        return Ok(p);
    }
    Err(Error::NoFreePort)
}

/// `N` bytes from the kernel's random source.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    b
}

/// Writes `bytes` to `path` through a temporary file and a rename, with `mode` if given.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    if let Some(m) = mode {
        o.mode(m);
    }
    let write = || -> std::io::Result<()> {
        let mut f = o.open(&tmp)?;
        if let Some(m) = mode {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(m))?;
        }
        f.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// One line `[control-plane HH:MM:SS] message` (UTC), as the script logged.
pub(crate) fn say(log: &mut dyn Write, message: &str) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let _ = writeln!(log, "[control-plane {h:02}:{m:02}:{s:02}] {message}");
}
