//! The one error type of the library: each variant says what failed and, for a process, what
//! was waited for and the tail of its log.

use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong bringing the environment up or down.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line was not `COMMAND DIR`.
    #[error("{0}")]
    Usage(String),
    /// A file or directory could not be read or written.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The cause (in the message, so not a `source()` to repeat it).
        cause: std::io::Error,
    },
    /// `DIR/state` is missing: the control plane was never brought up there.
    #[error("{}/state not found: run 'up {}' first", .0.display(), .0.display())]
    NotUp(PathBuf),
    /// Something of the control plane in this directory still runs.
    #[error("control plane in {} is already running; run 'down {}' first", .0.display(), .0.display())]
    AlreadyRunning(PathBuf),
    /// `DIR/state` or another file of ours does not read as written.
    #[error("{file}: {problem}")]
    BadFile {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A binary is missing or not executable.
    #[error("{name} not found: {} is not an executable file", path.display())]
    MissingBinary {
        /// kube-apiserver, etcd, ...
        name: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// A helper command (`scripts/go-build.sh`, `kube-apiserver --version`) failed.
    #[error("{command} failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status and standard error.
        detail: String,
    },
    /// Generating a certificate or key failed.
    #[error("certificate {name}: {cause}")]
    Certificate {
        /// The file's stem (`ca`, `apiserver`, ...).
        name: &'static str,
        /// rcgen's error (in the message).
        cause: rcgen::Error,
    },
    /// No free loopback port was found.
    #[error("no free port found in 20000-32767")]
    NoFreePort,
    /// A port the control plane needs is held by another process.
    #[error("port {0} is taken by another process")]
    PortTaken(u16),
    /// A process is already running where one is to be started.
    #[error("{name} already running (pid {pid})")]
    ProcessRunning {
        /// Its name.
        name: &'static str,
        /// Its PID.
        pid: u32,
    },
    /// A process that must run (etcd under kube-apiserver) does not.
    #[error("{name} is not running; use 'up {}'", dir.display())]
    ProcessMissing {
        /// Its name.
        name: &'static str,
        /// The control plane's directory.
        dir: PathBuf,
    },
    /// A process exited while it was waited for.
    #[error("{name} exited while waiting for {waited_for}{}", tail_section(log, log_tail))]
    Exited {
        /// Its name.
        name: &'static str,
        /// What was waited for.
        waited_for: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of its log.
        log_tail: String,
    },
    /// A readiness check did not pass before its deadline.
    #[error(
        "gave up after {}s waiting for {waited_for} (last answer: {last}){}",
        timeout.as_secs(),
        tail_section(log, log_tail)
    )]
    NotReady {
        /// What was waited for.
        waited_for: String,
        /// The deadline that passed.
        timeout: Duration,
        /// The last answer of the check.
        last: String,
        /// The relevant log file.
        log: PathBuf,
        /// Its last lines.
        log_tail: String,
    },
    /// Ctrl-C or SIGTERM arrived while waiting.
    #[error("interrupted while waiting for {0}")]
    Interrupted(String),
}

fn tail_section(log: &std::path::Path, tail: &str) -> String {
    if tail.is_empty() {
        format!("\n===== {} is empty =====", log.display())
    } else {
        format!("\n===== last lines of {} =====\n{tail}", log.display())
    }
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, cause: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            cause,
        }
    }
}

/// The library's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
