//! The proxy under measurement: a `kube-api-rewriter` child process, started with a kubeconfig
//! for kube-apiserver or for one of the doubles; and the same for a peer sidecar binary
//! (`--peer`), which reads the same environment.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use http::StatusCode;
use kube_api_rewriter_testkit::procfs;

use crate::Result;
use crate::args::Args;
use crate::client::H1;

/// A running proxy; killed on drop.
pub(crate) struct ProxyChild {
    child: Child,
    /// Its API port on 127.0.0.1.
    pub(crate) port: u16,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl ProxyChild {
    /// Starts the proxy with `kubeconfig`, its log in `log`; waits until it is ready: its
    /// monitoring listener answers `/readyz` with 200, or (a sidecar without `/readyz`, which
    /// answers it 404) `/healthz`.
    pub(crate) async fn start(bin: &Path, kubeconfig: &Path, log: &Path) -> Result<ProxyChild> {
        let port = free_port()?;
        let mon = free_port()?;
        let f = std::fs::File::create(log)?;
        let child = Command::new(bin)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("WEBHOOK_ADDRESS")
            .env_remove("RULES_PATH")
            .env_remove("CLIENT_PROXY")
            .env_remove("PPROF_BIND_ADDRESS")
            .env("KUBECONFIG", kubeconfig)
            .env("CLIENT_PROXY_ADDRESS", "127.0.0.1")
            .env("CLIENT_PROXY_PORT", port.to_string())
            .env("MONITORING_BIND_ADDRESS", format!("127.0.0.1:{mon}"))
            .env("LOG_LEVEL", "info")
            .env("LOG_FORMAT", "text")
            .stdin(Stdio::null())
            .stdout(f.try_clone()?)
            .stderr(f)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let mut p = ProxyChild { child, port };
        let t = Instant::now();
        loop {
            if let Ok(mut c) = H1::connect(([127, 0, 0, 1], mon).into()).await
                && let Ok(r) = c.get("/readyz", &[]).await
            {
                let s = r.status();
                drop(r);
                if s == StatusCode::OK
                    || s == StatusCode::NOT_FOUND
                        && c.get("/healthz", &[])
                            .await
                            .is_ok_and(|r| r.status() == StatusCode::OK)
                {
                    return Ok(p);
                }
            }
            if let Ok(Some(st)) = p.child.try_wait() {
                return Err(format!("the proxy exited ({st}); see {}", log.display()).into());
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!("the proxy is not ready after 30 s; see {}", log.display()).into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its API address.
    pub(crate) fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// (peak, current) resident set in KiB.
    pub(crate) fn rss_kib(&self) -> (u64, u64) {
        let m = procfs::memory(self.pid());
        (m.hwm_kib, m.rss_kib)
    }

    /// CPU seconds the proxy has used so far (see [`procfs::cpu_secs`]).
    pub(crate) fn cpu_secs(&self) -> f64 {
        procfs::cpu_secs(self.pid())
    }
}

impl Drop for ProxyChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A proxy in front of the double at `addr`, through a kubeconfig written for it (files named
/// after `name` in the work directory): over HTTPS when the double's `ca` is given.
pub(crate) async fn proxy_for_double(
    a: &Args,
    addr: SocketAddr,
    name: &str,
    ca: Option<&Path>,
) -> Result<ProxyChild> {
    child_for_double(a, &a.proxy_bin, addr, name, ca, "proxy").await
}

/// The peer (`--peer`) in front of the double at `addr`, as [`proxy_for_double`]; `None`
/// without a peer.
pub(crate) async fn peer_for_double(
    a: &Args,
    addr: SocketAddr,
    name: &str,
    ca: Option<&Path>,
) -> Result<Option<ProxyChild>> {
    match &a.peer {
        Some(bin) => Ok(Some(child_for_double(a, bin, addr, name, ca, "peer").await?)),
        None => Ok(None),
    }
}

/// A child of `bin` in front of the double at `addr`, its log named after `role` and `name`.
pub(crate) async fn child_for_double(
    a: &Args,
    bin: &Path,
    addr: SocketAddr,
    name: &str,
    ca: Option<&Path>,
    role: &str,
) -> Result<ProxyChild> {
    let kc = a.work_dir.join(format!("bench-{name}.kubeconfig"));
    let cluster = match ca {
        Some(ca) => format!(
            "server: https://{addr}\n    certificate-authority: {}",
            ca.display()
        ),
        None => format!("server: http://{addr}"),
    };
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: d\n  cluster:\n    {cluster}\nusers:\n- name: u\n  user:\n    token: doubletoken\ncontexts:\n- name: d\n  context: {{cluster: d, user: u}}\ncurrent-context: d\n"
        ),
    )?;
    ProxyChild::start(bin, &kc, &a.work_dir.join(format!("bench-{role}-{name}.log"))).await
}
