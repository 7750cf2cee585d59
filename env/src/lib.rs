//! The local test environment brought up and down, in place of the bash scripts: for now the
//! control plane of `scripts/control-plane.sh` (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler on 127.0.0.1), used as a library by testkit and as the `kar-env` command.
//!
//! Every process is supervised: started detached with its own log file and PID file in the
//! environment's directory (so it outlives the command that started it), checked for readiness
//! against a deadline, and stopped by PID (TERM, then KILL) on `down`. A wait that gives up says
//! what it waited for and carries the tail of the relevant log ([`Error`]).
//!
//! ```no_run
//! use kube_api_rewriter_env::{Config, ControlPlane};
//! let cp = ControlPlane::new("/tmp/cp", Config::from_env()?);
//! cp.up(&mut std::io::stderr())?;
//! let env = cp.env()?; // KUBECONFIG, KUBE_APISERVER_URL, ...
//! cp.down(&mut std::io::stderr())?;
//!
//! // or down when the guard is dropped
//! let running = ControlPlane::new("/tmp/cp", Config::from_env()?).start(&mut std::io::stderr())?;
//! println!("{}", running.status()?.lines.join("\n"));
//! # Ok::<(), kube_api_rewriter_env::Error>(())
//! ```

mod cli;
mod config;
mod control_plane;
mod error;
mod http;
pub mod pki;
mod process;

pub use cli::{Command, Invocation, USAGE, parse_args, run};
pub use config::{Config, VARIABLES};
pub use control_plane::{
    ADMIN_TOKEN, ControlPlane, Pids, Running, State, Status, USER1_TOKEN, apiserver_args, env_vars,
    kubeconfig, parse_assignments, render_env, shell_quote, tokens_csv,
};
pub use error::{Error, Result};
pub use process::{Process, free_port, interrupt, pid_alive, port_in_use, tail};
