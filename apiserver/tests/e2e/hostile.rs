//! Hostile and broken clients: a batch of bad requests (and virt-api down or refusing us)
//! repeated without leaking connections, and clients too slow to finish a handshake or their
//! headers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use kube_api_rewriter_testkit as tk;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio_tungstenite::tungstenite::Message;

use crate::client::{direct, next_binary, vm_path};
use crate::env::{Env, GROUP_PATH, Mode, NS, Server, wait_for};

/// The bad-input requests.
fn bad_batch(e: &Env) {
    // What the server relays when virt-api is down or refuses the certificate: its own
    // message (direct), or the sidecar's `Status`.
    let unavailable = |direct: &'static str| match e.mode {
        Mode::Direct => direct,
        Mode::Sidecar | Mode::KubeVirt => "upstream is unavailable",
    };
    let cases: Vec<(&Server, Vec<&str>, String, u16, &str)> = vec![
        (
            &e.server,
            vec![],
            vm_path("vm-running", "console"),
            400,
            "Upgrade request required",
        ),
        (
            &e.server,
            vec![],
            vm_path("vm-running", "migrate"),
            404,
            "could not find the requested resource",
        ),
        (
            &e.server,
            vec![],
            format!("{}?port=abc", vm_path("vm-running", "portforward")),
            400,
            "invalid port \\\"abc\\\"",
        ),
        (
            &e.server,
            vec![],
            vm_path("vm-running", "portforward"),
            400,
            "port is required",
        ),
        (
            &e.server,
            vec![],
            vm_path("no-such-vm", "console"),
            404,
            "virtualmachines.virtualization.deckhouse.io \\\"no-such-vm\\\" not found",
        ),
        (
            &e.server,
            vec![],
            vm_path("vm-stopped", "vnc"),
            409,
            "VirtualMachine is not Running or Migrating",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path("vm-running", "console"),
            405,
            "does not allow this method",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path("Vm_Bad", "unfreeze"),
            400,
            "invalid VirtualMachine name \\\"Vm_Bad\\\": a lowercase RFC 1123 subdomain",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path(&"v".repeat(300), "freeze"),
            400,
            "must be no more than 253 characters",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}", "--path-as-is"],
            vm_path("..", "unfreeze"),
            400,
            "invalid VirtualMachine name \\\"..\\\"",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path("a%2Fb", "addvolume"),
            400,
            "invalid VirtualMachine name \\\"a%2Fb\\\"",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            format!("{}?volumeKind=Blob&name=x", vm_path("vm-running", "addvolume")),
            400,
            "invalid volume kind",
        ),
        (
            &e.server,
            vec!["-X", "PUT", "-d", "{}"],
            format!("{}?unfreezeTimeout=soon", vm_path("vm-running", "freeze")),
            400,
            "invalid unfreezeTimeout",
        ),
        (
            &e.server,
            vec!["--http1.1", "-X", "PUT", "--data-binary", "@BIG"],
            vm_path("vm-running", "unfreeze"),
            413,
            "larger than",
        ),
        (
            &e.server,
            vec![],
            format!("{GROUP_PATH}/namespaces/{NS}/virtualmachines"),
            405,
            "does not allow this method",
        ),
        (
            &e.server_down,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path("vm-running", "unfreeze"),
            503,
            unavailable("dial tcp"),
        ),
        (
            &e.server_down,
            vec![
                "--http1.1",
                "-H",
                "Connection: Upgrade",
                "-H",
                "Upgrade: websocket",
            ],
            vm_path("vm-running", "console"),
            503,
            unavailable("error trying to reach service"),
        ),
        (
            &e.server_refused,
            vec!["-X", "PUT", "-d", "{}"],
            vm_path("vm-running", "unfreeze"),
            503,
            // kube-apiserver words this "error trying to reach service: [operation was
            // canceled: ]connection error: received fatal alert", depending on a race in
            // Go's transport; the refused handshake is what matters.
            unavailable("received fatal alert"),
        ),
    ];
    let big = e.dir.join("big.json");
    if !big.exists() {
        std::fs::write(&big, vec![b' '; 2 << 20]).unwrap();
    }
    let big_arg = format!("@{}", big.display());
    for (s, args, path, want, msg) in cases {
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "@BIG" { big_arg.as_str() } else { a })
            .collect();
        let (code, body) = e.admin(s, &args, &path);
        assert_eq!(code, want, "{path} {args:?}: {body}");
        let st = tk::parse_json(&body);
        assert_eq!(st["kind"], "Status", "{body}");
        assert_eq!(st["code"], want, "{body}");
        assert!(body.contains(msg), "{path}: want {msg:?} in {body}");
    }
    // A user without RBAC (our SubjectAccessReview), and a stream opened and closed through
    // kube-apiserver (the spliced connections must go away with it).
    let (code, body) = e.as_user(&e.server, "user1", &[], &[], &vm_path("vm-running", "console"));
    assert_eq!(code, 403, "{body}");
    e.rt.block_on(async {
        let (mut ws, _) = e
            .ws(&vm_path("vm-running", "console"), e.cp.get("ADMIN_TOKEN"))
            .await
            .expect("WebSocket opens");
        ws.send(Message::Binary(Bytes::from_static(b"ping")))
            .await
            .unwrap();
        assert_eq!(next_binary(&mut ws).await, b"ping");
        ws.close(None).await.unwrap();
        // Wait for the close to come back, so the connection is really over.
        while let Some(Ok(_)) = ws.next().await {}
    });
    // Without the front-proxy certificate, and with a certificate of an unknown CA (the
    // handshake is refused).
    let (code, _) = direct(
        &e.server,
        e,
        None,
        &["X-Remote-User: admin"],
        &[],
        &vm_path("vm-running", "console"),
    );
    assert_eq!(code, 401);
    let rogue = e.dir.join("rogue.crt");
    let rogue_key = e.dir.join("rogue.key");
    let (code, _) = direct(
        &e.server,
        e,
        Some((rogue.to_str().unwrap(), rogue_key.to_str().unwrap())),
        &["X-Remote-User: admin"],
        &[],
        GROUP_PATH,
    );
    assert_eq!(code, 0, "no HTTP answer without a TLS session");
}

/// A client that never finishes the TLS handshake, and one that never finishes its request
/// headers: the server closes both (its handshake and header read deadlines).
pub fn slow_clients(e: &Env) {
    let before = e.server.sockets();
    e.rt.block_on(async {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = ("127.0.0.1", e.server.port);
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&e.module_ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let mut cfg =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut partial = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        partial
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
            .await
            .unwrap();
        partial.flush().await.unwrap();
        let mut buf = [0u8; 1024];
        // The deadlines are 10 s; 40 s allows for a loaded machine.
        let limit = Duration::from_secs(40);
        let a = tokio::time::timeout(limit, silent.read(&mut buf)).await;
        assert!(matches!(a, Ok(Ok(0) | Err(_))), "handshake never finished: {a:?}");
        let mut rest = Vec::new();
        let b = tokio::time::timeout(limit, partial.read_to_end(&mut rest)).await;
        assert!(b.is_ok(), "the half-sent request is still open");
        // hyper answers an expired header read with 408 or just closes.
        let text = String::from_utf8_lossy(&rest);
        assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    });
    wait_for("sockets back", Duration::from_secs(10), || {
        e.server.sockets() <= before
    });
}

pub fn bad_input(e: &Env) {
    // The first round warms pooled connections (SubjectAccessReviews, virt-api is dialed per
    // request); later rounds must not add sockets.
    bad_batch(e);
    let servers = [&e.server, &e.server_down, &e.server_refused];
    let settle = |s: &Server| {
        // Sockets closed by the peer go away once the server's tasks notice.
        let mut last = s.sockets();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(200));
            let n = s.sockets();
            if n == last {
                break;
            }
            last = n;
        }
        last
    };
    let base: Vec<usize> = servers.iter().map(|s| settle(s)).collect();
    for _ in 0..3 {
        bad_batch(e);
    }
    for (s, b) in servers.iter().zip(&base) {
        wait_for(
            &format!("{} back to {b} sockets", s.log.display()),
            Duration::from_secs(15),
            || s.sockets() <= *b,
        );
    }
    for s in servers {
        assert!(s.logs().matches("panicked").count() == 0, "{}", s.logs());
    }
    eprintln!(
        "open sockets after the bad input: {:?} (baseline {base:?})",
        servers.iter().map(|s| s.sockets()).collect::<Vec<_>>()
    );
}
