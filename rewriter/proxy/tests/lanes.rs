//! Upstream lanes against the real kube-apiserver: a burst of requests that opens a new lane
//! (upstream connection) makes one TLS handshake, not one per request, and watches beyond
//! those on connections of their own share the lanes.

use std::collections::HashSet;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use kube_api_rewriter_proxy::upstream::MAX_OWN_WATCHES;
use kube_api_rewriter_testkit::*;

/// Requests in flight per upstream connection (the proxy's `STREAMS_PER_CONNECTION`).
const PER_LANE: usize = 100;

/// Reads a response head; returns its status line.
fn head(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).expect("read a response head");
        assert!(n > 0, "closed before the head: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    text.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn a_burst_on_a_new_lane_makes_one_connection() {
    let cp = ControlPlane::up();
    let p = ProxyProc::start(&cp.dir, &[("KUBECONFIG", cp.kubeconfig())]);
    // The readiness poller's request has opened the first lane's connection.
    p.wait_until(Duration::from_secs(30), |p| p.readyz() == "200");
    let api_port: u16 = cp
        .get("KUBE_APISERVER_URL")
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("kube-apiserver port");
    let before: HashSet<u16> = tcp_connections_to(api_port).into_iter().collect();

    // Watches hold their stream. The first `MAX_OWN_WATCHES` take an HTTP/1.1 connection each;
    // the next fill up the first lane, and the rest of the burst arrives together on a second
    // lane without a connection yet.
    let burst = MAX_OWN_WATCHES + PER_LANE + 60;
    let mut clients: Vec<TcpStream> = (0..burst)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", p.port)).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(60)))
                .expect("timeout");
            s
        })
        .collect();
    for s in &mut clients {
        s.write_all(b"GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
    }
    for s in &mut clients {
        let status = head(s);
        assert!(status.contains(" 200 "), "{status}");
    }

    let made: Vec<u16> = tcp_connections_to(api_port)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    eprintln!(
        "upstream connections made for a burst of {burst} watches (one new lane): {}",
        made.len()
    );
    // One per watch on its own connection and one for the new lane; one more is
    // kube-apiserver's own loopback client or a first-lane connection closed and reopened
    // meanwhile. Before, every request of the burst that found the new lane without a
    // connection made its own TLS handshake (dozens).
    assert!(
        (MAX_OWN_WATCHES + 1..=MAX_OWN_WATCHES + 2).contains(&made.len()),
        "{} upstream connections for one new lane: {made:?}",
        made.len()
    );
    drop(clients);
}
