//! The command line, `kar-env COMMAND DIR` (what `scripts/control-plane.sh` took), parsed
//! without side effects, and its dispatch.

use std::io::Write;
use std::path::PathBuf;

use crate::control_plane::ControlPlane;
use crate::error::Result;

/// `kar-env --help`.
pub const USAGE: &str = "\
Local Kubernetes control plane on 127.0.0.1 only: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler of one release, built from Go modules by scripts/go-build.sh.

Usage:
  kar-env up DIR                 start all four, state in DIR
  kar-env down DIR               stop them (TERM, then KILL); safe to repeat
  kar-env stop-apiserver DIR     stop kube-apiserver only
  kar-env start-apiserver DIR    start it again: same port, same flags
  kar-env restart-apiserver DIR  stop-apiserver + start-apiserver
  kar-env status DIR             print what runs (exit 1 if not all up)
  kar-env env DIR                print DIR/env
(scripts/control-plane.sh COMMAND DIR runs the same.)

After `up`, `source DIR/env` exports KUBE_APISERVER_URL, KUBECONFIG (DIR/admin.kubeconfig),
KUBE_BIN_DIR (the release's kubectl is KUBE_BIN_DIR/kubectl), the PIDs and ports, KUBE_CA_FILE,
tokens and the front-proxy certificate paths. `up` returns once kube-apiserver is ready, the
controller-manager and scheduler are healthy, and the controller-manager has created the
`default` ServiceAccount of namespace `default`; on failure or Ctrl-C it stops what it started.
Each process logs to DIR/NAME.log; its PID is in DIR/NAME.pid.
Users (token file): admin/admintoken (group system:masters), user1/usertoken (no groups); the
controller-manager and scheduler have their own users (system:kube-controller-manager,
system:kube-scheduler), so RBAC's bootstrap roles apply to them as in a cluster.

Env:
  KUBE_VERSION             Kubernetes release (default: the one tools/go/kubernetes pins)
  KUBE_BIN_DIR             a directory with the four Kubernetes binaries (default: go-build.sh)
  ETCD_BIN                 etcd binary (default: built by go-build.sh)
  KAR_READY_TIMEOUT        seconds to wait for each component (default 60)
  KAR_STOP_TIMEOUT         seconds between TERM and KILL (default 5; 0 = KILL at once). kube-apiserver
                           with open watches does not exit on TERM (waits ~60 s), so it gets KILLed.
  KAR_APISERVER_EXTRA_ARGS extra kube-apiserver flags (whitespace-separated), saved at `up`
";

/// One command of the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `up`
    Up,
    /// `down`
    Down,
    /// `status`
    Status,
    /// `stop-apiserver`
    StopApiserver,
    /// `start-apiserver`
    StartApiserver,
    /// `restart-apiserver`
    RestartApiserver,
    /// `env`
    Env,
}

impl Command {
    /// The command named `s` on the command line.
    pub fn from_name(s: &str) -> Option<Command> {
        Some(match s {
            "up" => Command::Up,
            "down" => Command::Down,
            "status" => Command::Status,
            "stop-apiserver" => Command::StopApiserver,
            "start-apiserver" => Command::StartApiserver,
            "restart-apiserver" => Command::RestartApiserver,
            "env" => Command::Env,
            _ => return None,
        })
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `--help`, `-h` or `help`: print [`USAGE`].
    Help,
    /// `COMMAND DIR`.
    Run(Command, PathBuf),
}

/// Parses the arguments after the program's name; `Err` is a usage error (exit 2).
pub fn parse_args(args: &[String]) -> std::result::Result<Invocation, String> {
    if args
        .iter()
        .any(|a| a == "--help" || a == "-h" || (a == "help" && args.len() == 1))
    {
        return Ok(Invocation::Help);
    }
    match args {
        [cmd, dir] => match Command::from_name(cmd) {
            Some(c) if !dir.is_empty() && !dir.starts_with('-') => Ok(Invocation::Run(c, PathBuf::from(dir))),
            Some(_) => Err(format!("not a directory argument: {dir:?}")),
            None => Err(format!("unknown command {cmd:?}")),
        },
        _ => Err(format!("expected COMMAND DIR, got {} arguments", args.len())),
    }
}

/// Runs `command` on `cp`: what it prints goes to `out` (`status`, `env`), its log to `log`.
/// `Ok(false)` when `status` found something stopped.
pub fn run(command: Command, cp: &ControlPlane, out: &mut dyn Write, log: &mut dyn Write) -> Result<bool> {
    match command {
        Command::Up => cp.up(log)?,
        Command::Down => cp.down(log)?,
        Command::StopApiserver => cp.stop_apiserver(log)?,
        Command::StartApiserver => cp.start_apiserver(log)?,
        Command::RestartApiserver => cp.restart_apiserver(log)?,
        Command::Status => {
            let s = cp.status()?;
            for l in &s.lines {
                let _ = writeln!(out, "{l}");
            }
            return Ok(s.all_up);
        }
        Command::Env => {
            let _ = write!(out, "{}", cp.env_file()?);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> std::result::Result<Invocation, String> {
        parse_args(&args.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn commands() {
        for (name, c) in [
            ("up", Command::Up),
            ("down", Command::Down),
            ("status", Command::Status),
            ("stop-apiserver", Command::StopApiserver),
            ("start-apiserver", Command::StartApiserver),
            ("restart-apiserver", Command::RestartApiserver),
            ("env", Command::Env),
        ] {
            assert_eq!(
                parse(&[name, "/tmp/cp"]),
                Ok(Invocation::Run(c, "/tmp/cp".into()))
            );
        }
    }

    #[test]
    fn help_and_usage_errors() {
        assert_eq!(parse(&["--help"]), Ok(Invocation::Help));
        assert_eq!(parse(&["up", "-h"]), Ok(Invocation::Help));
        assert_eq!(parse(&["help"]), Ok(Invocation::Help));
        assert!(parse(&[]).is_err());
        assert!(parse(&["up"]).is_err());
        assert!(parse(&["up", "a", "b"]).is_err());
        assert!(parse(&["start", "/tmp/cp"]).is_err());
        assert!(parse(&["up", "--dir"]).is_err());
        // `help DIR` is a directory named like a command
        assert!(parse(&["help", "x"]).is_err());
    }

    #[test]
    fn usage_names_every_variable() {
        for (v, _) in crate::VARIABLES {
            assert!(USAGE.contains(v), "{v}");
        }
    }
}
