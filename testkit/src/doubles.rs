//! Running test doubles: a loopback listener whose connections a closure serves, and a
//! child's output read line by line.

use std::io::{BufRead as _, BufReader, Read};
use std::net::TcpListener;

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
