//! Connections from hostile clients, on the proxy's own listeners (no upstream is
//! needed: the kubeconfig points at a closed port). Deadlines are checked by behaviour: the
//! proxy closes the connection (a read sees the end); the read timeouts only keep a broken
//! build from hanging the suite.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use kube_api_rewriter_testkit::*;

/// An upstream that is never reached.
fn nowhere_kubeconfig(dir: &Path) -> String {
    let kc = dir.join("nowhere.kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user: {token: not-used}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n",
    )
    .expect("kubeconfig");
    kc.to_str().expect("utf-8").to_owned()
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s
}

/// True when the proxy closed the connection (end of stream or reset) before the read timeout.
fn closed_by_proxy(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {} // a response (e.g. 408) before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// True when the connection is still open and quiet (nothing to read right now).
fn still_open(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).expect("nonblocking");
    let mut buf = [0u8; 1];
    let open = matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).expect("blocking");
    open
}

/// A complete request on a kept-alive connection; returns the status line.
fn request(s: &mut TcpStream, path: &str) -> String {
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Read the head and the body (Content-Length) of one response.
    loop {
        let n = s.read(&mut buf).expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().expect("length"))
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text.lines().next().unwrap_or_default().to_owned();
            }
        }
    }
}

#[test]
fn connections_without_a_request_are_closed_after_the_header_read_timeout() {
    let dir = temp_dir("conn-deadline");
    let kc = nowhere_kubeconfig(&dir);
    let p = ProxyProc::start(&dir, &[("KUBECONFIG", &kc), ("HEADER_READ_TIMEOUT", "1s")]);
    for port in [p.port, p.mon_port] {
        // Nothing at all.
        let mut silent = connect(port);
        // Part of the HTTP/2 preface: the HTTP/1-or-2 detection waits for the rest.
        let mut preface = connect(port);
        preface.write_all(b"PRI * HTTP/2.0\r\n").expect("write");
        // Part of an HTTP/1 request head.
        let mut partial = connect(port);
        partial.write_all(b"GET /healthz HTTP/1.1\r\nHo").expect("write");
        // The whole HTTP/2 preface, then nothing.
        let mut h2 = connect(port);
        h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").expect("write");
        for (what, s) in [
            ("silent", &mut silent),
            ("part of the HTTP/2 preface", &mut preface),
            ("part of the headers", &mut partial),
            ("HTTP/2 preface only", &mut h2),
        ] {
            assert!(closed_by_proxy(s), "port {port}: {what}: still open");
        }
    }
    let log = p.logs();
    assert!(
        log.contains("no complete request within the header read timeout"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn connections_without_a_request_in_flight_are_closed_after_the_idle_timeout() {
    let dir = temp_dir("conn-idle");
    let kc = nowhere_kubeconfig(&dir);
    let p = ProxyProc::start(
        &dir,
        &[
            ("KUBECONFIG", &kc),
            ("HEADER_READ_TIMEOUT", "60s"),
            ("CONNECTION_IDLE_TIMEOUT", "1s"),
        ],
    );
    for port in [p.port, p.mon_port] {
        let mut s = connect(port);
        assert!(request(&mut s, "/healthz").starts_with("HTTP/1.1 "));
        assert!(request(&mut s, "/healthz").starts_with("HTTP/1.1 "), "kept alive");
        assert!(
            closed_by_proxy(&mut s),
            "port {port}: idle keep-alive connection still open"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn at_the_cap_the_oldest_connection_without_a_request_makes_room() {
    let dir = temp_dir("conn-cap");
    let kc = nowhere_kubeconfig(&dir);
    let p = ProxyProc::start(
        &dir,
        &[
            ("KUBECONFIG", &kc),
            ("HEADER_READ_TIMEOUT", "60s"),
            ("MAX_CONNECTIONS", "3"),
            ("MONITORING_MAX_CONNECTIONS", "2"),
        ],
    );
    let settle = || std::thread::sleep(Duration::from_millis(300));
    let mut c1 = connect(p.port);
    settle();
    let mut c2 = connect(p.port);
    settle();
    let mut c3 = connect(p.port);
    settle();
    // A fourth connection is admitted; the oldest idle one (c1) makes room.
    let mut c4 = connect(p.port);
    assert!(request(&mut c4, "/version").starts_with("HTTP/1.1 "), "c4 served");
    assert!(closed_by_proxy(&mut c1), "c1 evicted");
    assert!(still_open(&mut c2) && still_open(&mut c3));
    // c2 sends a request: no longer evictable; the next newcomer closes c3.
    assert!(request(&mut c2, "/version").starts_with("HTTP/1.1 "));
    let mut c5 = connect(p.port);
    assert!(request(&mut c5, "/version").starts_with("HTTP/1.1 "), "c5 served");
    assert!(closed_by_proxy(&mut c3), "c3 evicted");
    assert!(still_open(&mut c2) && still_open(&mut c4));

    // The monitoring listener holds at most its own cap of sockets, however many are opened.
    let pid = p.child.id();
    let before = open_sockets(pid);
    let idle: Vec<TcpStream> = (0..40).map(|_| connect(p.mon_port)).collect();
    p.wait_until(Duration::from_secs(10), |_| open_sockets(pid) <= before + 2);
    // The API listener still serves.
    assert!(request(&mut c2, "/version").starts_with("HTTP/1.1 "));
    drop(idle);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_open_file_soft_limit_is_raised_to_the_hard_limit() {
    let dir = temp_dir("conn-rlimit");
    let kc = nowhere_kubeconfig(&dir);
    let mon = free_port();
    let api = free_port();
    // Start under a low soft limit (the hard one stays).
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -Sn 256 && exec {}", rewriter_bin().display()))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", &kc)
        .env("CLIENT_PROXY_PORT", api.to_string())
        .env("MONITORING_BIND_ADDRESS", format!("127.0.0.1:{mon}"))
        .env("LOG_OUTPUT", "discard")
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let t = std::time::Instant::now();
    while curl(&["-s", &format!("http://127.0.0.1:{mon}/healthz")]).stdout != b"ok" {
        assert!(t.elapsed() < Duration::from_secs(20), "no /healthz");
        std::thread::sleep(Duration::from_millis(100));
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).expect("limits");
    let _ = child.kill();
    let _ = child.wait();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("open files line");
    let v: Vec<&str> = line.split_whitespace().collect();
    // "Max open files SOFT HARD files"
    assert_eq!(v[3], v[4], "{line}");
    assert_ne!(v[3], "256", "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A webhook server test double: answers every request `200 {}` and closes.
fn webhook_double() -> u16 {
    spawn_double(|mut s| async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut buf = vec![0u8; 64 << 10];
        let mut got = Vec::new();
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            .await;
    })
}

#[test]
fn the_webhook_listener_can_be_limited_to_the_rule_paths() {
    let dir = temp_dir("conn-webhook");
    let target = format!("http://127.0.0.1:{}", webhook_double());
    let post = |port: u16, path: &str| {
        http_status(&[
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "{}",
            &format!("http://127.0.0.1:{port}{path}"),
        ])
    };
    let start = |only: &str| {
        let port = free_port();
        let p = ProxyProc::start(
            &dir,
            &[
                ("CLIENT_PROXY", "no"),
                ("WEBHOOK_ADDRESS", &target),
                ("WEBHOOK_LISTEN_ADDRESS", "127.0.0.1"),
                ("WEBHOOK_LISTEN_PORT", &port.to_string()),
                ("WEBHOOK_RULE_PATHS_ONLY", only),
            ],
        );
        (p, port)
    };
    // By default every path is forwarded, as Go does.
    let (_p, port) = start("no");
    assert_eq!(post(port, "/not-a-rule-path"), "200");
    // Restricted: only the paths the rules name.
    let (_q, port) = start("yes");
    assert_eq!(post(port, "/not-a-rule-path"), "404");
    let body = ok(&curl(&["-s", "-d", "{}", &format!("http://127.0.0.1:{port}/x")]));
    assert!(body.contains(r#""reason":"NotFound""#), "{body}");
    assert_eq!(post(port, "/kubevirt-validate-delete"), "200");
    let _ = std::fs::remove_dir_all(&dir);
}

/// TCP keep-alive on the proxy's accepted sockets, seen by the kernel: the proxy's end of a
/// client connection runs the keep-alive timer, the client's own end (no `SO_KEEPALIVE`) none.
#[test]
fn accepted_sockets_have_tcp_keepalive() {
    let dir = temp_dir("tcpka");
    let kc = nowhere_kubeconfig(&dir);
    let p = ProxyProc::start(&dir, &[("KUBECONFIG", kc.as_str())]);
    for port in [p.port, p.mon_port] {
        let s = connect(port);
        let mine = s.local_addr().expect("addr").port();
        p.wait_until(Duration::from_secs(5), |_| tcp_timer(port, mine).is_some());
        assert_eq!(
            tcp_timer(port, mine),
            Some(2),
            "the proxy's end (port {port}) has no keep-alive timer"
        );
        assert_eq!(
            tcp_timer(mine, port),
            Some(0),
            "the client's end has no keep-alive"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One HTTP/2 frame: (type, flags, stream, payload).
fn read_frame(s: &mut TcpStream) -> std::io::Result<(u8, u8, u32, Vec<u8>)> {
    let mut h = [0u8; 9];
    s.read_exact(&mut h)?;
    let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
    let stream = u32::from_be_bytes([h[5] & 0x7f, h[6], h[7], h[8]]);
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload)?;
    Ok((h[3], h[4], stream, payload))
}

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small").to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], ty, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HTTP/2 keep-alive pings: a raw HTTP/2 client makes one request, then stays idle. The proxy
/// pings it after the 30 s interval and, as the client never answers, closes the connection
/// after the 20 s ping timeout (well before the 5 min idle timeout).
#[test]
fn idle_http2_connections_get_pings_and_are_closed_when_unanswered() {
    const PING: u8 = 6;
    const GOAWAY: u8 = 7;
    let dir = temp_dir("h2ping");
    let kc = nowhere_kubeconfig(&dir);
    let p = ProxyProc::start(&dir, &[("KUBECONFIG", kc.as_str())]);
    let mut s = connect(p.mon_port);
    s.set_read_timeout(Some(Duration::from_secs(45)))
        .expect("timeout");
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").expect("preface");
    s.write_all(&frame(4, 0, 0, &[])).expect("settings");
    // GET /healthz: :method GET, :scheme http (static table), :path and :authority literals.
    let mut hpack = vec![0x82, 0x86, 0x44, 8];
    hpack.extend_from_slice(b"/healthz");
    hpack.extend_from_slice(&[0x41, 1, b'x']);
    s.write_all(&frame(1, 0x5, 1, &hpack)).expect("headers");
    let t = std::time::Instant::now();
    let mut answered = false;
    let pinged = loop {
        let (ty, flags, stream, payload) = read_frame(&mut s).expect("a frame before the ping (45 s)");
        match ty {
            4 if flags & 1 == 0 => s.write_all(&frame(4, 1, 0, &[])).expect("settings ack"),
            1 if stream == 1 => answered = true,
            PING if flags & 1 == 0 => break payload,
            _ => {}
        }
    };
    let after = t.elapsed();
    assert!(answered, "no response to the request");
    assert_eq!(pinged.len(), 8);
    assert!(after >= Duration::from_secs(20), "pinged after {after:?}");
    eprintln!("first keep-alive ping after {after:?}");
    // Unanswered: the proxy gives up on the connection (GOAWAY, then the end).
    let t = std::time::Instant::now();
    loop {
        match read_frame(&mut s) {
            Ok((GOAWAY, ..)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let closed = t.elapsed();
    eprintln!("closed {closed:?} after the unanswered ping");
    assert!(closed < Duration::from_secs(45), "{closed:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
