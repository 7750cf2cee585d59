//! What the real kube-apiserver cannot produce on demand, against an in-process upstream test
//! double (`upstream_double`): a 200 MB LIST, a WebSocket-style upgrade to splice, a connection
//! cut mid-body, a stalled upstream, a watch whose head comes late, a 100 MB watch event, a
//! gzip bomb.
//!
//! The cases share one double and one proxy in front of it and run one after the other
//! (`kube_api_rewriter_testkit::Suite`); each case is a test of its own, and any one runs alone
//! by name (`cargo test -p kube-api-rewriter-proxy --test doubles -- NAME`).

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kube_api_rewriter_testkit::*;

type DBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

const ITEMS_200MB: usize = 200_000;
const PAD: usize = 900;

fn item(i: usize, renamed: bool) -> String {
    let (av, kind) = if renamed {
        (
            "internal.virtualization.deckhouse.io/v1",
            "InternalVirtualizationVirtualMachine",
        )
    } else {
        ("kubevirt.io/v1", "VirtualMachine")
    };
    format!(
        r#"{{"apiVersion":"{av}","kind":"{kind}","metadata":{{"name":"vm-{i:07}","namespace":"default","resourceVersion":"{i}"}},"spec":{{"running":false,"note":"{}"}}}}"#,
        "p".repeat(PAD)
    )
}

fn head(renamed: bool) -> String {
    let av = if renamed {
        "internal.virtualization.deckhouse.io/v1"
    } else {
        "kubevirt.io/v1"
    };
    format!(r#"{{"apiVersion":"{av}","items":["#)
}

fn tail(renamed: bool) -> String {
    let kind = if renamed {
        "InternalVirtualizationVirtualMachineList"
    } else {
        "VirtualMachineList"
    };
    format!(r#"],"kind":"{kind}","metadata":{{"resourceVersion":"1"}}}}"#)
}

fn expected_list_len(n: usize) -> usize {
    head(false).len()
        + tail(false).len()
        + (0..n).map(|i| item(i, false).len()).sum::<usize>()
        + n.saturating_sub(1)
}

#[derive(Default)]
struct Double {
    list_done: AtomicBool,
    watch_closed: AtomicBool,
    stalled: AtomicUsize,
    /// The proxy let go of a body that stalled mid-way.
    stall_released: AtomicUsize,
}

/// Streams `n` items from a task: `cut` ends with an error after half.
fn list_body(n: usize, cut: bool, done: Option<Arc<Double>>) -> DBody {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(2);
    tokio::spawn(async move {
        let mut buf = head(true);
        for i in 0..n {
            if cut && i == n / 2 {
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from(std::mem::take(&mut buf)))))
                    .await;
                let _ = tx.send(Err(std::io::Error::other("cut by the double"))).await;
                return;
            }
            if i > 0 {
                buf.push(',');
            }
            buf.push_str(&item(i, true));
            if buf.len() > 64 << 10
                && tx
                    .send(Ok(Frame::data(Bytes::from(std::mem::take(&mut buf)))))
                    .await
                    .is_err()
            {
                return;
            }
        }
        buf.push_str(&tail(true));
        let _ = tx.send(Ok(Frame::data(Bytes::from(buf)))).await;
        if let Some(d) = done {
            d.list_done.store(true, Ordering::SeqCst);
        }
    });
    BodyExt::boxed(RxBody(rx))
}

/// A body fed through a channel.
struct RxBody(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>);

impl hyper::body::Body for RxBody {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx)
    }
}

fn full(s: impl Into<Bytes>) -> DBody {
    BodyExt::boxed(Full::new(s.into()).map_err(|n| match n {}))
}

async fn serve(d: Arc<Double>, mut req: Request<Incoming>) -> Result<Response<DBody>, Infallible> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let json = |body: DBody| {
        let mut r = Response::new(body);
        r.headers_mut()
            .insert("content-type", "application/json".parse().expect("hv"));
        r
    };
    if path == "/readyz" {
        return Ok(Response::new(full("ok")));
    }
    if path.ends_with("/exec") {
        // Upgrade: answer 101 and echo raw bytes.
        let on = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(up) = on.await {
                let mut io = TokioIo::new(up);
                let (mut r, mut w) = tokio::io::split(&mut io);
                let _ = tokio::io::copy(&mut r, &mut w).await;
            }
        });
        let mut r = Response::new(full(Bytes::new()));
        *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        r.headers_mut()
            .insert("connection", "Upgrade".parse().expect("hv"));
        r.headers_mut()
            .insert("upgrade", "websocket".parse().expect("hv"));
        return Ok(r);
    }
    let ns = path
        .split('/')
        .skip_while(|s| *s != "namespaces")
        .nth(1)
        .unwrap_or("")
        .to_owned();
    match ns.as_str() {
        "big" => Ok(json(list_body(ITEMS_200MB, false, Some(d)))),
        "cut" if path.starts_with("/api/v1/") => {
            let mut r = Response::new(list_body(1000, true, None));
            r.headers_mut()
                .insert("content-type", "application/json".parse().expect("hv"));
            Ok(r)
        }
        "cut" => Ok(json(list_body(1000, true, None))),
        // The head and part of the body, then nothing: the proxy must give up and let go.
        "stallbody" => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(2);
            let d2 = Arc::clone(&d);
            tokio::spawn(async move {
                let mut part = head(true);
                part.push_str(&item(1, true));
                let _ = tx.send(Ok(Frame::data(Bytes::from(part)))).await;
                tx.closed().await;
                d2.stall_released.fetch_add(1, Ordering::SeqCst);
            });
            Ok(json(BodyExt::boxed(RxBody(rx))))
        }
        // Claims JSON, sends garbage.
        "invalid" => Ok(json(full(
            r#"{"kind":"InternalVirtualizationVirtualMachine","metadata":"#,
        ))),
        "stall" => {
            d.stalled.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
            Ok(Response::new(full("")))
        }
        // A watch whose head comes after UPSTREAM_RESPONSE_TIMEOUT (1 s here).
        "slowwatch" if query.contains("watch=1") => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let ev = format!("{{\"type\":\"ADDED\",\"object\":{}}}\n", item(7, true));
            Ok(json(full(ev)))
        }
        // A small event, a 100 MB one, a small one.
        "hugeevent" if query.contains("watch=1") => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(2);
            tokio::spawn(async move {
                let send = |b: Vec<u8>| {
                    let tx = tx.clone();
                    async move { tx.send(Ok(Frame::data(Bytes::from(b)))).await.is_ok() }
                };
                let small = |i| format!("{{\"type\":\"ADDED\",\"object\":{}}}\n", item(i, true)).into_bytes();
                if !send(small(1)).await {
                    return;
                }
                let head = br#"{"type":"ADDED","object":{"apiVersion":"internal.virtualization.deckhouse.io/v1","kind":"InternalVirtualizationVirtualMachine","metadata":{"name":"huge"},"spec":{"note":""#;
                if !send(head.to_vec()).await {
                    return;
                }
                for _ in 0..(100 << 4) {
                    if !send(vec![b'p'; 64 << 10]).await {
                        return;
                    }
                }
                let _ = send(b"\"}}}\n".to_vec()).await && send(small(2)).await;
            });
            Ok(json(BodyExt::boxed(RxBody(rx))))
        }
        // 256 MiB of zeros, gzipped (made before the double starts).
        "gzbomb" => {
            let bomb = gzip_bomb();
            let mut r = json(full(bomb.clone()));
            r.headers_mut()
                .insert("content-encoding", "gzip".parse().expect("hv"));
            Ok(r)
        }
        "watch" if query.contains("watch=1") => {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
            let d2 = Arc::clone(&d);
            tokio::spawn(async move {
                let ev = format!("{{\"type\":\"ADDED\",\"object\":{}}}\n", item(1, true));
                let _ = tx.send(Ok(Frame::data(Bytes::from(ev)))).await;
                tx.closed().await;
                d2.watch_closed.store(true, Ordering::SeqCst);
            });
            Ok(json(BodyExt::boxed(RxBody(rx))))
        }
        _ => {
            let mut r = Response::new(full("{}"));
            *r.status_mut() = StatusCode::NOT_FOUND;
            Ok(r)
        }
    }
}

/// 256 MiB of zeros, gzipped (about 250 KB).
fn gzip_bomb() -> &'static Bytes {
    static BOMB: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    BOMB.get_or_init(|| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..256 {
            e.write_all(&zeros).expect("gzip");
        }
        Bytes::from(e.finish().expect("gzip"))
    })
}

/// Starts the double on a free port in a background runtime.
fn start_double() -> (u16, Arc<Double>) {
    // Made here, not on the double's one worker thread, where it would stall other requests.
    gzip_bomb();
    let d = Arc::new(Double::default());
    let d2 = Arc::clone(&d);
    let port = spawn_double(move |s| {
        let d = Arc::clone(&d2);
        async move {
            let svc = hyper::service::service_fn(move |req| serve(Arc::clone(&d), req));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(s), svc)
                .with_upgrades()
                .await;
        }
    });
    (port, d)
}

fn double_kubeconfig(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let kc = dir.join("double.kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: d\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user:\n    token: doubletoken\ncontexts:\n- name: d\n  context: {{cluster: d, user: u}}\ncurrent-context: d\n"
        ),
    )
    .expect("kubeconfig");
    kc
}

fn vm_path(ns: &str) -> String {
    format!("/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines")
}

fn peak_rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Opens an exec upgrade through the proxy on `port`; returns the spliced connection.
fn splice(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    write!(
        s,
        "GET /api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    .expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).expect("response head");
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// Spliced (upgraded) connections keep their place under MAX_CONNECTIONS: with two splices
/// open on a listener capped at two, a new connection is closed at once; when a splice ends,
/// a new one is served.
fn spliced_count(dir: &std::path::Path, upstream: u16) {
    let kc = double_kubeconfig(dir, upstream);
    let p = ProxyProc::start(
        dir,
        &[
            ("KUBECONFIG", kc.to_str().expect("utf-8")),
            ("MAX_CONNECTIONS", "2"),
        ],
    );
    let a = splice(p.port);
    let mut b = splice(p.port);
    b.write_all(b"ping").expect("send");
    let mut echo = [0u8; 4];
    b.read_exact(&mut echo).expect("the splice works");
    let refused = |what: &str| {
        let mut c = TcpStream::connect(("127.0.0.1", p.port)).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let _ = write!(c, "GET /api HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut buf = Vec::new();
        let r = c.read_to_end(&mut buf);
        let closed = buf.is_empty()
            && (r.is_ok()
                || r.as_ref()
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset));
        eprintln!("{what}: {:?} {:?}", r.map(|_| ()), String::from_utf8_lossy(&buf));
        closed
    };
    assert!(
        refused("at the cap"),
        "a third connection was served while two splices held the cap"
    );
    drop(a);
    p.wait_until(Duration::from_secs(5), |_| !refused("after a splice ended"));
}

fn main() -> std::process::ExitCode {
    Suite::new(setup)
        .case("invalid_json_counted", invalid_json_counted)
        .case("big_list_200mb", big_list_200mb)
        // After the 200 MB LIST, whose peak RSS (a high-water mark) must stay lower.
        .case("slow_watch", slow_watch)
        .case("huge_event", huge_event)
        .case("gzip_bomb", gzip_bomb_case)
        .case("upgrade_splice", upgrade_splice)
        .case("cut_mid_body", cut_mid_body)
        .case("stalled", stalled)
        .case("stalled_mid_body", stalled_mid_body)
        .case("upstream_tcp_keepalive", upstream_tcp_keepalive)
        .case("spliced_connections_count_toward_the_cap", |e: &Env| {
            spliced_count(&e.dir, e.port)
        })
        .on_failure(|e: &Env| {
            e.failed.store(true, Ordering::SeqCst);
            eprintln!("proxy log:\n{}", e.p.logs());
        })
        .run()
}

/// What every case of this file shares.
struct Env {
    /// The proxy in front of the double.
    p: ProxyProc,
    /// The double and its port.
    d: Arc<Double>,
    port: u16,
    /// The proxy's directory (its kubeconfig for the double, its log).
    dir: std::path::PathBuf,
    /// A case failed: the directory stays, for its log.
    failed: AtomicBool,
}

/// The double, and a proxy in front of it with low limits and short timeouts.
fn setup() -> Env {
    let dir = temp_dir("double");
    let (port, d) = start_double();
    let kc = double_kubeconfig(&dir, port);
    let p = ProxyProc::start(
        &dir,
        &[
            ("KUBECONFIG", kc.to_str().expect("utf-8")),
            ("UPSTREAM_RESPONSE_TIMEOUT", "1s"),
            ("LOG_LEVEL", "info"),
            ("MAX_ITEM_BYTES", "16777216"),
            ("MAX_RESPONSE_BYTES", "33554432"),
            ("STREAM_IDLE_TIMEOUT", "1s"),
            // Shorter than the 200 MB LIST, the late watch head and the stall: a request in
            // flight keeps its connection.
            ("CONNECTION_IDLE_TIMEOUT", "1s"),
        ],
    );
    Env {
        p,
        d,
        port,
        dir,
        failed: AtomicBool::new(false),
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if !self.failed.load(Ordering::SeqCst) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn big_list_200mb(e: &Env) {
    let mut c = Command::new("curl")
        .args(["-sS", &e.p.url(&vm_path("big"))])
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl");
    let mut out = c.stdout.take().expect("stdout");
    let mut first = vec![0u8; 4096];
    out.read_exact(&mut first).expect("first bytes");
    assert!(
        !e.d.list_done.load(Ordering::SeqCst),
        "the first bytes waited for the whole upstream body"
    );
    assert!(first.starts_with(
        br#"{"apiVersion":"kubevirt.io/v1","items":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine""#
    ));
    let mut rest = Vec::with_capacity(expected_list_len(ITEMS_200MB));
    out.read_to_end(&mut rest).expect("rest");
    assert!(c.wait().expect("curl ends").success());
    let total = first.len() + rest.len();
    assert_eq!(total, expected_list_len(ITEMS_200MB));
    assert!(memchr::memmem::find(&rest, b"internal.virtualization").is_none());
    assert!(rest.ends_with(br#"],"kind":"VirtualMachineList","metadata":{"resourceVersion":"1"}}"#));
    let rss = peak_rss_kib(e.p.child.id());
    eprintln!("proxy peak RSS after a {total}-byte LIST: {rss} KiB");
    assert!(rss < 64 * 1024, "peak RSS {rss} KiB");
}

fn upgrade_splice(e: &Env) {
    let mut s = TcpStream::connect(("127.0.0.1", e.p.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    write!(
        s,
        "GET /api/v1/namespaces/default/pods/p/exec?command=sh&stdin=true HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
    )
    .expect("write");
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).expect("response head");
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    for msg in [&b"hello"[..], &[0u8, 1, 2, 255][..]] {
        s.write_all(msg).expect("send");
        let mut echo = vec![0u8; msg.len()];
        s.read_exact(&mut echo).expect("echo");
        assert_eq!(echo, msg);
    }
    // STREAM_IDLE_TIMEOUT (1 s here): the idle splice is closed by the proxy.
    let mut rest = Vec::new();
    let end = s.read_to_end(&mut rest);
    assert!(end.is_ok(), "not closed: {end:?}");
    assert!(rest.is_empty(), "{rest:?}");
}

fn cut_mid_body(e: &Env) {
    // Rewritten LIST and a pass-through body: curl must see a broken transfer, never an end.
    for path in [vm_path("cut"), "/api/v1/namespaces/cut/configmaps".to_owned()] {
        let o = curl(&["-sS", "-o", "/dev/null", &e.p.url(&path)]);
        assert!(
            !o.status.success(),
            "{path}: a cut body was presented as complete"
        );
        let code = o.status.code();
        assert!(
            matches!(code, Some(18) | Some(56) | Some(92)),
            "{path}: curl exit {code:?}"
        );
    }
}

fn stalled(e: &Env) {
    let t = Instant::now();
    let s = ok(&curl(&[
        "-sS",
        "-w",
        "\n%{http_code}",
        &e.p.url(&vm_path("stall")),
    ]));
    assert!(
        s.ends_with("\n504") && s.contains("\"reason\":\"Timeout\""),
        "{s}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    // A client that goes away mid-watch cancels the upstream request at once.
    let o = curl(&[
        "-sS",
        "-N",
        "--max-time",
        "1",
        &e.p.url(&format!("{}?watch=1", vm_path("watch"))),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("\"kind\":\"VirtualMachine\""), "{text}");
    e.p.wait_until(Duration::from_secs(3), |_| {
        e.d.watch_closed.load(Ordering::SeqCst)
    });
}

// A body that stalls mid-way (rewritten LIST and pass-through alike): the client gets an
// error soon after UPSTREAM_RESPONSE_TIMEOUT (1 s here), and the proxy lets go of the
// upstream stream.
fn stalled_mid_body(e: &Env) {
    for (n, path) in [
        vm_path("stallbody"),
        "/api/v1/namespaces/stallbody/configmaps".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        let t = Instant::now();
        let o = curl(&["-sS", "-o", "/dev/null", "--max-time", "30", &e.p.url(path)]);
        let took = t.elapsed();
        let code = o.status.code();
        assert!(
            matches!(code, Some(18) | Some(56) | Some(92)),
            "{path}: curl exit {code:?} after {took:?}: a stalled body must end in an error"
        );
        assert!(took < Duration::from_secs(10), "{path}: {took:?}");
        e.p.wait_until(Duration::from_secs(5), |_| {
            e.d.stall_released.load(Ordering::SeqCst) > n
        });
        eprintln!("{path}: error after {took:?}, upstream stream released");
    }
}

// TCP keep-alive on the proxy's upstream sockets: while a watch holds one open, the
// kernel runs its keep-alive timer (the double's own accepted end has none).
fn upstream_tcp_keepalive(e: &Env) {
    let mut c = Command::new("curl")
        .args([
            "-sS",
            "-N",
            "--max-time",
            "5",
            &e.p.url(&format!("{}?watch=1", vm_path("watch"))),
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("curl");
    // Wait for the keep-alive timer itself: while sent data is not yet acknowledged (a
    // loaded machine) the kernel shows the retransmit timer (1) on the socket instead.
    let mut timers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        timers = tcp_timers(None, e.port);
        if timers.contains(&2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = c.kill();
    let _ = c.wait();
    assert!(
        timers.contains(&2),
        "no upstream socket with a keep-alive timer: {timers:?}"
    );
}

// Go bug 10: the invalid-JSON counter was never incremented. Ours counts it, and the
// client gets the upstream bytes as they came (Go in-tree sent an empty body).
fn invalid_json_counted(e: &Env) {
    let o = curl(&[
        "-sS",
        "-w",
        "\n%{http_code}",
        &e.p.url(&format!("{}/vm1", vm_path("invalid"))),
    ]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').expect("code");
    assert_eq!(code, "200", "{out}");
    assert_eq!(
        body,
        r#"{"kind":"InternalVirtualizationVirtualMachine","metadata":"#
    );
    let m = String::from_utf8_lossy(&curl(&["-sS", &e.p.mon("/metrics")]).stdout).into_owned();
    let line = m
        .lines()
        .find(|l| l.starts_with("kube_api_rewriter_target_response_invalid_json_total{"))
        .unwrap_or_else(|| panic!("no invalid-JSON counter:\n{m}"));
    assert!(line.ends_with(" 1"), "{line}");
}

// UPSTREAM_RESPONSE_TIMEOUT is for non-watch responses: a watch whose head comes late
// still streams (a stalled GET gets its 504 above).
fn slow_watch(e: &Env) {
    let o = curl(&[
        "-sS",
        "-N",
        "-w",
        "\n%{http_code}",
        &e.p.url(&format!("{}?watch=1", vm_path("slowwatch"))),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.ends_with("\n200"), "{text}");
    assert!(text.contains(r#""kind":"VirtualMachine""#), "{text}");
}

// A 100 MB watch event ends the watch with an ERROR event (MAX_ITEM_BYTES 16 MiB here)
// instead of growing memory; the event before it arrives whole.
fn huge_event(e: &Env) {
    let o = curl(&[
        "-sS",
        "-N",
        &e.p.url(&format!("{}?watch=1", vm_path("hugeevent"))),
    ]);
    assert!(o.status.success(), "ended cleanly: {o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{}", &text[..text.len().min(2000)]);
    assert!(lines[0].contains(r#""name":"vm-0000001""#), "{}", lines[0]);
    let err: serde_json::Value = serde_json::from_str(lines[1]).expect("an event");
    assert_eq!(err["type"], "ERROR", "{err}");
    assert_eq!(err["object"]["kind"], "Status");
    assert!(
        err["object"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("larger than 16777216 bytes")),
        "{err}"
    );
    let rss = peak_rss_kib(e.p.child.id());
    eprintln!("proxy peak RSS after a 100 MB event: {rss} KiB");
    assert!(rss < 96 * 1024, "peak RSS {rss} KiB");
}

// A gzip body that inflates past MAX_RESPONSE_BYTES gets a 502 Status, not 512 MiB of RSS.
fn gzip_bomb_case(e: &Env) {
    let o = curl(&[
        "-sS",
        "-w",
        "\n%{http_code}",
        &e.p.url(&format!("{}/vm1", vm_path("gzbomb"))),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.ends_with("\n502"), "{text}");
    assert!(text.contains("larger than 33554432 bytes"), "{text}");
    let rss = peak_rss_kib(e.p.child.id());
    eprintln!("proxy peak RSS after a gzip bomb: {rss} KiB");
    assert!(rss < 96 * 1024, "peak RSS {rss} KiB");
}
