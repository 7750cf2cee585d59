//! What the workspace's end-to-end tests share: the real local control plane
//! (`scripts/control-plane.sh`), the `kube-api-rewriter` binary as a child process, curl,
//! kubectl and openssl, and a way to run test doubles. Test code only (`publish = false`).
#![allow(missing_docs)]

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod procfs;
pub mod report;

// The /proc readers the tests call at the crate root.
pub use procfs::{TcpSocket, open_sockets, tcp_connections_to, tcp_sockets, tcp_timer, tcp_timers};

/// The `kube-api-rewriter` binary: `$KUBE_API_REWRITER_BIN`, else the one beside the running
/// test executable (`target/<profile>/`), built with `cargo build` first if it is missing.
pub fn rewriter_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("KUBE_API_REWRITER_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> -> target/<profile>/kube-api-rewriter
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable under target/<profile>/deps");
    let bin = profile_dir.join("kube-api-rewriter");
    if !bin.exists() {
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.current_dir(workspace()).args([
            "build",
            "-p",
            "kube-api-rewriter-proxy",
            "--bin",
            "kube-api-rewriter",
        ]);
        if release {
            c.arg("--release");
        }
        assert!(
            c.status().expect("cargo runs").success(),
            "building kube-api-rewriter failed"
        );
    }
    bin
}

/// The directory of the Kubernetes release the tests run (kube-apiserver,
/// kube-controller-manager, kube-scheduler, kubectl): `$KUBE_BIN_DIR`, else what
/// `scripts/go-build.sh kubernetes [$KUBE_VERSION]` prints (it builds once, then answers from
/// its cache).
pub fn kube_bin_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("KUBE_BIN_DIR") {
            return PathBuf::from(d);
        }
        let mut c = Command::new(workspace().join("scripts/go-build.sh"));
        c.arg("kubernetes");
        if let Some(v) = std::env::var_os("KUBE_VERSION").filter(|v| !v.is_empty()) {
            c.arg(v);
        }
        let o = c
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/go-build.sh runs");
        assert!(o.status.success(), "scripts/go-build.sh kubernetes failed");
        PathBuf::from(String::from_utf8(o.stdout).expect("utf-8 path").trim())
    })
}

/// The release's kubectl (see [`kube_bin_dir`]).
pub fn kubectl_bin() -> PathBuf {
    kube_bin_dir().join("kubectl")
}

/// The repository's `testdata/` (kube-apiserver captures, KubeVirt CRDs, Go rule sets).
pub fn testdata() -> PathBuf {
    workspace().join("testdata")
}

/// The KubeVirt CRD fixtures (`original`, `original`, `renamed`).
pub fn crd_fixtures() -> PathBuf {
    testdata().join("kubevirt-crds")
}

/// The repository's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let d = std::env::temp_dir().join(format!("kar-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// etcd + kube-apiserver from `scripts/control-plane.sh`; `down` on drop.
pub struct ControlPlane {
    pub dir: PathBuf,
    pub env: HashMap<String, String>,
}

impl ControlPlane {
    pub fn up() -> ControlPlane {
        let dir = temp_dir("cp");
        let mut cp = ControlPlane {
            dir,
            env: HashMap::new(),
        };
        let out = cp.script("up");
        assert!(
            out.status.success(),
            "control plane up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(cp.dir.join("env")).expect("env file");
        let mut env = HashMap::new();
        for line in text.lines() {
            if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                env.insert(k.to_owned(), v.trim_matches('\'').to_owned());
            }
        }
        cp.env = env;
        cp
    }

    pub fn script(&self, cmd: &str) -> Output {
        self.script_env(cmd, &[])
    }

    /// `control-plane.sh CMD DIR` with extra environment (e.g. `KAR_STOP_TIMEOUT`).
    pub fn script_env(&self, cmd: &str, env: &[(&str, &str)]) -> Output {
        let mut c = Command::new("bash");
        c.arg(workspace().join("scripts/control-plane.sh"))
            .arg(cmd)
            .arg(&self.dir)
            .env("KUBE_BIN_DIR", kube_bin_dir())
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("control-plane.sh runs")
    }

    pub fn get(&self, k: &str) -> &str {
        self.env
            .get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{k} not in env"))
    }

    pub fn kubeconfig(&self) -> &str {
        self.get("KUBECONFIG")
    }

    /// kubectl straight to kube-apiserver (admin).
    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl(self.kubeconfig(), args)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.script("down");
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A proxy child process; killed on drop.
pub struct ProxyProc {
    pub child: Child,
    pub port: u16,
    pub mon_port: u16,
    pub log: PathBuf,
    pub kubeconfig: PathBuf,
}

impl ProxyProc {
    /// Starts the proxy with `env` on top of loopback ports and text logs; waits for `/healthz`.
    pub fn start(dir: &Path, env: &[(&str, &str)]) -> ProxyProc {
        let port = free_port();
        let mon_port = free_port();
        let log = dir.join(format!("proxy-{port}.log"));
        let mut cmd = Command::new(rewriter_bin());
        cmd.env_remove("KUBERNETES_SERVICE_HOST")
            .env("CLIENT_PROXY_ADDRESS", "127.0.0.1")
            .env("CLIENT_PROXY_PORT", port.to_string())
            .env("MONITORING_BIND_ADDRESS", format!("127.0.0.1:{mon_port}"))
            .env("LOG_FORMAT", "text")
            .env("LOG_LEVEL", "debug")
            .env("READYZ_POLL_INTERVAL", "300ms")
            .env("READYZ_STALE_AFTER", "2s");
        for (k, v) in env {
            cmd.env(k, v);
        }
        // A whole suite at another level, e.g. `KAR_TEST_LOG_LEVEL=trace` to check that no
        // secret reaches the log even there (see `KAR_TEST_LOG_SINK`).
        if let Some(level) = std::env::var_os("KAR_TEST_LOG_LEVEL") {
            cmd.env("LOG_LEVEL", level);
        }
        let f = std::fs::File::create(&log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("proxy starts");
        let kubeconfig = dir.join(format!("proxy-{port}.kubeconfig"));
        let mut kc = std::fs::File::create(&kubeconfig).expect("kubeconfig");
        write!(
            kc,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: p\n  context: {{cluster: p, user: u}}\ncurrent-context: p\n"
        )
        .expect("write kubeconfig");
        let p = ProxyProc {
            child,
            port,
            mon_port,
            log,
            kubeconfig,
        };
        p.wait_until(Duration::from_secs(20), |p| {
            curl(&["-s", "-o", "/dev/null", "-w", "%{http_code}", &p.mon("/healthz")]).stdout == b"200"
        });
        p
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn mon(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.mon_port)
    }

    /// The HTTP status code of the monitoring listener's `/readyz`.
    pub fn readyz(&self) -> String {
        ok(&curl(&[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &self.mon("/readyz"),
        ]))
    }

    /// Applies KubeVirt's VirtualMachine CRD (original names) through the proxy.
    pub fn apply_vm_crd(&self) {
        let crd = crd_fixtures().join("original/virtualmachines.yaml");
        ok(&self.kubectl(&["apply", "-f", crd.to_str().expect("utf-8 path")]));
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        kubectl(self.kubeconfig.to_str().expect("utf-8 path"), args)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `f` every 100 ms until true; panics with the log after `limit`.
    pub fn wait_until(&self, limit: Duration, mut f: impl FnMut(&Self) -> bool) {
        let t = Instant::now();
        while t.elapsed() < limit {
            if f(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("condition not met within {limit:?}; proxy log:\n{}", self.logs());
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(ok.success());
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for ProxyProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // `KAR_TEST_LOG_SINK=FILE`: every proxy's log is appended there before its directory
        // goes, to be searched after the suite (for tokens, keys, Secret data).
        if let Some(sink) = std::env::var_os("KAR_TEST_LOG_SINK")
            && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(sink)
            && let Ok(mut log) = std::fs::File::open(&self.log)
        {
            let _ = std::io::copy(&mut log, &mut f);
        }
    }
}

/// curl arguments that ask for a WebSocket upgrade (the handshake's headers, with RFC 6455's
/// sample key).
pub const WEBSOCKET_UPGRADE: [&str; 8] = [
    "-H",
    "Connection: Upgrade",
    "-H",
    "Upgrade: websocket",
    "-H",
    "Sec-WebSocket-Version: 13",
    "-H",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
];

pub fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("curl runs")
}

pub fn kubectl(kubeconfig: &str, args: &[&str]) -> Output {
    Command::new(kubectl_bin())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("kubectl runs")
}

/// kubectl with `input` on stdin (for `-f -`).
pub fn kubectl_in(kubeconfig: &str, args: &[&str], input: &str) -> Output {
    let mut c = Command::new(kubectl_bin())
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    c.wait_with_output().expect("kubectl ends")
}

/// Parses JSON or panics showing the text.
pub fn parse_json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// A command that must fail: its stderr.
pub fn fails(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "command unexpectedly succeeded:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "command failed ({}):\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs named cases one after the other, each isolated from the others' panics; fails at the
/// end naming every failed case.
pub fn run_cases(cases: &[(&str, &dyn Fn())]) {
    let mut failed = Vec::new();
    for (name, f) in cases {
        let t = Instant::now();
        eprintln!("--- case {name}");
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
            failed.push(*name);
            eprintln!("--- case {name}: FAILED ({:?})", t.elapsed());
        } else {
            eprintln!("--- case {name}: ok ({:?})", t.elapsed());
        }
    }
    assert!(failed.is_empty(), "failed cases: {failed:?}");
}

impl ControlPlane {
    /// Like [`ControlPlane::up`], with extra kube-apiserver flags (`KAR_APISERVER_EXTRA_ARGS`);
    /// `args` gets the control plane's directory, for paths such as `DIR/pki/ca.crt`.
    pub fn up_with_apiserver_args(args: impl FnOnce(&Path) -> String) -> ControlPlane {
        let dir = temp_dir("cp");
        let extra = args(&dir);
        let mut cp = ControlPlane {
            dir,
            env: HashMap::new(),
        };
        let out = Command::new("bash")
            .arg(workspace().join("scripts/control-plane.sh"))
            .arg("up")
            .arg(&cp.dir)
            .env("KUBE_BIN_DIR", kube_bin_dir())
            .env("KAR_APISERVER_EXTRA_ARGS", extra)
            .stdin(Stdio::null())
            .output()
            .expect("control-plane.sh runs");
        assert!(
            out.status.success(),
            "control plane up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(cp.dir.join("env")).expect("env file");
        for line in text.lines() {
            if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                cp.env.insert(k.to_owned(), v.trim_matches('\'').to_owned());
            }
        }
        cp
    }
}

/// Runs `openssl` with `args`; panics with its stderr on failure.
pub fn openssl(args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `kubectl wait --for condition=established crd/NAME` through the proxy: `None` when it
/// worked, else kubectl's error.
pub fn wait_crd_established(p: &ProxyProc, crd: &str) -> Option<String> {
    let o = p.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=15s",
        &format!("crd/{crd}"),
    ]);
    if o.status.success() {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(crd) && out.contains("condition met"), "{out}");
        return None;
    }
    Some(String::from_utf8_lossy(&o.stderr).trim().to_owned())
}

/// Runs a test double: binds a free 127.0.0.1 port and hands every accepted connection to
/// `conn` on a one-thread runtime in a background thread. Returns the port.
pub fn spawn_double<F, Fut>(conn: F) -> u16
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    l.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).expect("listener");
            loop {
                let Ok((s, _)) = l.accept().await else { continue };
                tokio::spawn(conn(s));
            }
        });
    });
    port
}

/// The lines of `out` (a child's stdout), as they arrive, read on a thread of their own.
pub fn line_channel(out: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Writes a self-signed EC certificate for `cn` (valid for 127.0.0.1 and localhost) and its key.
pub fn self_signed_cert(crt: &Path, key: &Path, cn: &str) {
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        &format!("/CN={cn}"),
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-keyout",
        key.to_str().expect("utf-8"),
        "-out",
        crt.to_str().expect("utf-8"),
    ]);
}

/// Writes a CA (self-signed, RSA 2048) as `ca.crt`/`ca.key` in `dir`, named `cn`.
pub fn make_ca(dir: &Path, cn: &str) -> (PathBuf, PathBuf) {
    let crt = dir.join(format!("{cn}.crt"));
    let key = dir.join(format!("{cn}.key"));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        &format!("/CN={cn}"),
        "-keyout",
        key.to_str().expect("utf-8"),
        "-out",
        crt.to_str().expect("utf-8"),
    ]);
    (crt, key)
}

/// Writes `DIR/NAME.crt` and `DIR/NAME.key`, a certificate for `cn` signed by the CA
/// `ca_crt`/`ca_key`: a server certificate for the comma-separated `san` entries
/// (`DNS:x,IP:y`) when given, else a client certificate.
pub fn signed_cert(
    dir: &Path,
    name: &str,
    cn: &str,
    san: Option<&str>,
    ca_crt: &Path,
    ca_key: &Path,
) -> (PathBuf, PathBuf) {
    let crt = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let csr = dir.join(format!("{name}.csr"));
    let ext = dir.join(format!("{name}.ext"));
    let text = match san {
        Some(san) => format!(
            "subjectAltName={san}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        ),
        None => {
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n".to_owned()
        }
    };
    std::fs::write(&ext, text).expect("write ext");
    let s = |p: &Path| p.to_str().expect("utf-8").to_owned();
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        &format!("/CN={cn}"),
        "-keyout",
        &s(&key),
        "-out",
        &s(&csr),
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &s(&csr),
        "-CA",
        &s(ca_crt),
        "-CAkey",
        &s(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &s(&ext),
        "-out",
        &s(&crt),
    ]);
    (crt, key)
}

/// One `T` for the tests of a binary that run at the same time: the first caller makes it, the
/// others share it, and it is dropped (its processes stopped) when the last of them ends. Each
/// test keeps the `Arc` for as long as it runs, so `cargo test NAME` runs one case alone and a
/// whole file shares one environment.
pub fn shared<T>(
    slot: &'static std::sync::Mutex<std::sync::Weak<T>>,
    make: impl FnOnce() -> T,
) -> std::sync::Arc<T> {
    let mut weak = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(t) = weak.upgrade() {
        return t;
    }
    let t = std::sync::Arc::new(make());
    *weak = std::sync::Arc::downgrade(&t);
    t
}
