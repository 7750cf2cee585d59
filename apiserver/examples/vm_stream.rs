//! A VM's serial console and port-forward through kube-apiserver's aggregator, for
//! `scripts/demo.sh` (type a line, read the echo) and `scripts/bench-subresources.sh` (console
//! round-trip latency and port-forward throughput through the whole chain, against a direct
//! connection to the echo port, in one run).
//!
//! ```text
//! vm_stream console URL CA TOKEN NS VM TEXT
//! vm_stream bench   URL CA TOKEN NS VM ECHO_PORT [ROUNDS] [MIB]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{SinkExt as _, StreamExt as _};
use kube_api_rewriter_testkit::report::Report;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

type Ws = tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

const GROUP_PATH: &str = "/apis/subresources.virtualization.deckhouse.io/v1alpha2";

struct Target {
    url: String,
    ca: String,
    token: String,
    ns: String,
    vm: String,
}

impl Target {
    async fn open(&self, sub: &str) -> anyhow::Result<Ws> {
        let url: http::Uri = self.url.parse()?;
        let host = url.host().unwrap_or("127.0.0.1").to_owned();
        let port = url.port_u16().unwrap_or(443);
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&self.ca)? {
            roots.add(c?)?;
        }
        let mut cfg =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::try_from(host.clone())?, tcp)
            .await?;
        let path = format!(
            "{GROUP_PATH}/namespaces/{}/virtualmachines/{}/{sub}",
            self.ns, self.vm
        );
        let mut req = format!("wss://{host}:{port}{path}").into_client_request()?;
        req.headers_mut()
            .insert("authorization", format!("Bearer {}", self.token).parse()?);
        req.headers_mut()
            .insert("sec-websocket-protocol", "plain.kubevirt.io".parse()?);
        let (ws, _) = tokio_tungstenite::client_async(req, tls).await?;
        Ok(ws)
    }
}

async fn next_binary(ws: &mut Ws) -> anyhow::Result<Vec<u8>> {
    loop {
        match tokio::time::timeout(Duration::from_secs(20), ws.next()).await? {
            Some(Ok(Message::Binary(b))) => return Ok(b.to_vec()),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            other => anyhow::bail!("expected a binary message, got {other:?}"),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn console(t: &Target, text: &str) -> anyhow::Result<()> {
    let mut ws = t.open("console").await?;
    let line = format!("{text}\r\n");
    println!("typed into the serial console:  {text:?}");
    ws.send(Message::Binary(Bytes::from(line.clone()))).await?;
    let mut got = Vec::new();
    while got.len() < line.len() {
        got.extend(next_binary(&mut ws).await?);
    }
    println!(
        "read back from the console:     {:?}",
        String::from_utf8_lossy(&got).trim_end()
    );
    anyhow::ensure!(got == line.as_bytes(), "the echo differs");
    ws.close(None).await?;
    Ok(())
}

/// Round trips of `size` bytes: through the console, and straight to the echo port.
async fn latency(t: &Target, echo: u16, rounds: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let msg = vec![b'x'; 32];
    let mut ws = t.open("console").await?;
    let mut chain = Vec::with_capacity(rounds);
    for i in 0..rounds + rounds / 10 {
        let s = Instant::now();
        ws.send(Message::Binary(Bytes::from(msg.clone()))).await?;
        let mut got = 0;
        while got < msg.len() {
            got += next_binary(&mut ws).await?.len();
        }
        if i >= rounds / 10 {
            chain.push(s.elapsed());
        }
    }
    ws.close(None).await?;
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", echo)).await?;
    tcp.set_nodelay(true)?;
    let mut direct = Vec::with_capacity(rounds);
    let mut buf = vec![0u8; msg.len()];
    for i in 0..rounds + rounds / 10 {
        let s = Instant::now();
        tcp.write_all(&msg).await?;
        tcp.read_exact(&mut buf).await?;
        if i >= rounds / 10 {
            direct.push(s.elapsed());
        }
    }
    chain.sort();
    direct.sort();
    Ok((chain, direct))
}

/// `mib` MiB sent and read back at once: through the port-forward, and straight to the port.
async fn throughput(t: &Target, echo: u16, mib: usize) -> anyhow::Result<(f64, f64)> {
    let total = mib << 20;
    let chunk = vec![0xA5u8; 64 << 10];
    let ws = t.open(&format!("portforward?port={echo}&protocol=tcp")).await?;
    let (mut tx, mut rx) = ws.split();
    let s = Instant::now();
    let send = async {
        let mut sent = 0;
        while sent < total {
            tx.send(Message::Binary(Bytes::from(chunk.clone()))).await?;
            sent += chunk.len();
        }
        anyhow::Ok(tx)
    };
    let recv = async {
        let mut got = 0;
        while got < total {
            match tokio::time::timeout(Duration::from_secs(60), rx.next()).await? {
                Some(Ok(Message::Binary(b))) => got += b.len(),
                Some(Ok(_)) => {}
                other => anyhow::bail!("port-forward ended: {other:?}"),
            }
        }
        anyhow::Ok(())
    };
    let (tx, ()) = tokio::try_join!(send, recv)?;
    let chain = total as f64 / s.elapsed().as_secs_f64() / 1048576.0;
    let mut ws = tx.reunite(rx)?;
    let _ = ws.close(None).await;

    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", echo)).await?;
    let (mut r, mut w) = tcp.into_split();
    let s = Instant::now();
    let send = async {
        let mut sent = 0;
        while sent < total {
            w.write_all(&chunk).await?;
            sent += chunk.len();
        }
        anyhow::Ok(())
    };
    let recv = async {
        let mut buf = vec![0u8; 64 << 10];
        let mut got = 0;
        while got < total {
            let n = r.read(&mut buf).await?;
            anyhow::ensure!(n > 0, "echo port closed");
            got += n;
        }
        anyhow::Ok(())
    };
    tokio::try_join!(send, recv)?;
    let direct = total as f64 / s.elapsed().as_secs_f64() / 1048576.0;
    Ok((chain, direct))
}

async fn bench(t: &Target, echo: u16, rounds: usize, mib: usize) -> anyhow::Result<()> {
    let (chain, direct) = latency(t, echo, rounds).await?;
    let (c50, c99) = (percentile(&chain, 0.5), percentile(&chain, 0.99));
    let (d50, d99) = (percentile(&direct, 0.5), percentile(&direct, 0.99));
    println!(
        "console round trip, 32 B, {rounds} rounds (after {} warm-up):",
        rounds / 10
    );
    println!(
        "  through the chain (client -> kube-apiserver -> virtualization-api -> rewriter -> fake virt-api)"
    );
    println!("    p50 {:>9.0} us   p99 {:>9.0} us", us(c50), us(c99));
    println!("  direct to the echo port (TCP)");
    println!("    p50 {:>9.0} us   p99 {:>9.0} us", us(d50), us(d99));
    println!(
        "  ratio chain/direct: p50 {:.1}x   p99 {:.1}x",
        us(c50) / us(d50),
        us(c99) / us(d99)
    );
    let (c, d) = throughput(t, echo, mib).await?;
    println!("port-forward throughput, {mib} MiB sent and echoed back at once:");
    println!("  through the chain    {c:>9.1} MiB/s");
    println!("  direct to the port   {d:>9.1} MiB/s");
    println!("  ratio chain/direct   {:.3}  ({:.1}x slower)", c / d, d / c);
    let mut r = Report::new(
        "subresources",
        &["measure", "through the chain", "direct", "chain / direct"],
    );
    r.row([
        format!("console round trip, 32 B, p50 of {rounds}"),
        format!("{:.0} us", us(c50)),
        format!("{:.0} us", us(d50)),
        format!("{:.1}x", us(c50) / us(d50)),
    ]);
    r.row([
        format!("console round trip, 32 B, p99 of {rounds}"),
        format!("{:.0} us", us(c99)),
        format!("{:.0} us", us(d99)),
        format!("{:.1}x", us(c99) / us(d99)),
    ]);
    r.row([
        format!("port-forward, {mib} MiB sent and echoed"),
        format!("{c:.1} MiB/s"),
        format!("{d:.1} MiB/s"),
        format!("{:.3}", c / d),
    ]);
    r.headline(
        "virtualization-api: console round trip through the whole chain (p50)",
        format!("{:.0} us", us(c50)),
    );
    r.headline(
        "virtualization-api: port-forward through the whole chain",
        format!("{c:.1} MiB/s"),
    );
    r.note(
        "`scripts/bench-subresources.sh`: client -> kube-apiserver (aggregator) -> virtualization-api -> \
         rewriter sidecar -> fake virt-api (a test double that echoes), against straight TCP to the echo port.",
    );
    r.print();
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: vm_stream console URL CA TOKEN NS VM TEXT | vm_stream bench URL CA TOKEN NS VM ECHO_PORT [ROUNDS] [MIB]";
    if a.len() < 7 {
        anyhow::bail!("{usage}");
    }
    let t = Target {
        url: a[1].clone(),
        ca: a[2].clone(),
        token: a[3].clone(),
        ns: a[4].clone(),
        vm: a[5].clone(),
    };
    match a[0].as_str() {
        "console" => console(&t, &a[6]).await,
        "bench" => {
            let echo: u16 = a[6].parse()?;
            let rounds = a.get(7).map_or(Ok(2000), |s| s.parse())?;
            let mib = a.get(8).map_or(Ok(256), |s| s.parse())?;
            bench(&t, echo, rounds, mib).await
        }
        _ => anyhow::bail!("{usage}"),
    }
}
