//! Phase 4, `flood`: thousands of idle and half-open connections to the monitoring and API
//! ports; a GET on the API port must still answer.

use std::time::{Duration, Instant};

use anyhow::bail;
use kube_api_rewriter_testkit::{ProxyProc, procfs};

use super::requests::{latency, ms};
use super::{Figures, NS, Settings, VMS};

/// Runs phase 4.
pub(super) async fn run(
    s: &Settings,
    p: &ProxyProc,
    port: u16,
    pid: u32,
    fig: &mut Figures,
) -> anyhow::Result<()> {
    let one = format!("{VMS}/{NS}/virtualmachines/vm-0000");
    let (med0, max0) = latency(port, &one, s.samples).await?;
    let sockets0 = procfs::open_sockets(pid);
    let mut flood = Vec::with_capacity(s.flood);
    let t = Instant::now();
    for i in 0..s.flood {
        let target = if i % 2 == 0 { port } else { p.mon_port };
        match tokio::net::TcpStream::connect(("127.0.0.1", target)).await {
            Ok(mut c) => {
                if i % 4 < 2 {
                    // Half-open: part of a request head, never finished.
                    use tokio::io::AsyncWriteExt as _;
                    let _ = c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await;
                }
                flood.push(c);
            }
            Err(e) => bail!("flood connection {i}: {e}"),
        }
    }
    fig.put(
        "flood connections opened",
        format!(
            "{} in {:.1} s (half to each port, half of them half-open)",
            s.flood,
            t.elapsed().as_secs_f64()
        ),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = procfs::open_sockets(pid).saturating_sub(sockets0);
    let (med1, max1) = latency(port, &one, s.samples).await?;
    fig.put(
        "flood connections held by the proxy",
        format!("{held} (the rest closed at the listeners' caps)"),
    );
    fig.put(
        "GET latency without flood (median / max)",
        format!("{} / {}", ms(med0), ms(max0)),
    );
    fig.put(
        "GET latency with flood (median / max)",
        format!("{} / {}", ms(med1), ms(max1)),
    );
    fig.put(
        "GET median latency ratio (flood / none)",
        format!("{:.2}", med1.as_secs_f64() / med0.as_secs_f64()),
    );
    drop(flood);
    Ok(())
}
