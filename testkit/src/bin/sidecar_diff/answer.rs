//! One case run against one side: the answer as the client saw it (status, the headers that
//! matter, body), from curl, kubectl or kube-rs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result};
use kube_api_rewriter_testkit::{ProxyProc, kubectl_bin};

use crate::corpus::{Http, Step};
use crate::doubles::SeenLog;
use crate::kube_rs;

/// A side: one sidecar process and the namespace its objects live in.
pub struct Side {
    pub proxy: ProxyProc,
    pub ns: &'static str,
    pub dir: std::path::PathBuf,
    /// kube-apiserver's admin kubeconfig, for what is stored.
    pub upstream: std::path::PathBuf,
    /// The sidecar's webhook listener (plain HTTP on loopback).
    pub webhook_port: u16,
    /// What the webhook double behind that listener received.
    pub webhook_seen: SeenLog,
}

/// What a client got.
#[derive(Debug, Default)]
pub struct Answer {
    /// HTTP status, `exit N` (kubectl) or `ok`/`error` (kube-rs).
    pub status: String,
    /// The headers that matter, lower-case names.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// kubectl's stderr.
    pub stderr: String,
}

/// Headers compared between the sides; the rest (dates, audit and flow-control IDs) differ by
/// nature.
const HEADERS: [&str; 5] = [
    "content-type",
    "content-encoding",
    "warning",
    "cache-control",
    "x-content-type-options",
];

/// `{ns}` in a template becomes the side's namespace.
pub fn fill(template: &str, ns: &str) -> String {
    template.replace("{ns}", ns)
}

pub fn run(step: &Step, side: &Side, rt: &tokio::runtime::Runtime) -> Result<Answer> {
    match step {
        Step::Http(h) => match h.view {
            None => http(h, &side.proxy.url(""), side),
            Some(v) => view(h, v, side),
        },
        Step::Kubectl { args, stdin } => kubectl(args, stdin.as_deref(), side),
        Step::KubeRs(case) => rt.block_on(kube_rs::run(*case, side)),
        Step::Upstream(path) => stored(path, side),
        Step::Webhook(h) => webhook(h, side),
        Step::Upgrade(path) => upgrade(&fill(path, side.ns), side.proxy.port),
    }
}

/// The request `v.repeat` times; the answer's body the distinct values `v.pick` found.
fn view(h: &Http, v: crate::corpus::View, side: &Side) -> Result<Answer> {
    let mut seen: Vec<serde_json::Value> = Vec::new();
    let mut last = Answer::default();
    for _ in 0..v.repeat.max(1) {
        last = http(h, &side.proxy.url(""), side)?;
        let picked = match serde_json::from_slice(&last.body) {
            Ok(body) => (v.pick)(&body),
            Err(e) => format!("not JSON: {e}").into(),
        };
        if !seen.contains(&picked) {
            seen.push(picked);
        }
    }
    last.body = serde_json::to_vec(&seen)?;
    Ok(last)
}

/// A request to the webhook listener: the body becomes `{"answer": ..., "webhook_received":
/// {"uri": ..., "body": ...}}`, what the client got and what the webhook double got.
fn webhook(h: &Http, side: &Side) -> Result<Answer> {
    let before = side.webhook_seen.lock().expect("lock").len();
    let mut a = http(h, &format!("http://127.0.0.1:{}", side.webhook_port), side)?;
    let received = side.webhook_seen.lock().expect("lock").get(before).cloned();
    let json_or_text = |b: &[u8]| {
        serde_json::from_slice(b)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(b).into_owned()))
    };
    let received = received.map_or(
        serde_json::Value::Null,
        |r| serde_json::json!({"uri": r.uri, "body": json_or_text(&r.body)}),
    );
    a.body = serde_json::to_vec(&serde_json::json!({
        "answer": json_or_text(&a.body),
        "webhook_received": received,
    }))?;
    Ok(a)
}

/// A WebSocket upgrade over a raw connection: the status code as the status, what followed the
/// 101 as the body, and whether the connection ended within 5 s as `stderr`.
fn upgrade(path: &str, port: u16) -> Result<Answer> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n"
    )?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let ended = loop {
        match s.read(&mut buf) {
            Ok(0) => break "connection closed",
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => break "connection still open after 5 s",
        }
    };
    let text = String::from_utf8_lossy(&got);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok(Answer {
        status: head.split(' ').nth(1).unwrap_or("no answer").to_owned(),
        headers: BTreeMap::new(),
        body: rest.as_bytes().to_vec(),
        stderr: ended.to_owned(),
    })
}

fn http(h: &Http, base: &str, side: &Side) -> Result<Answer> {
    let hdr = side.dir.join("headers");
    let body = side.dir.join("body");
    let url = format!("{base}{}", fill(&h.path, side.ns));
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "30", "-o"])
        .arg(&body)
        .arg("-D")
        .arg(&hdr)
        .args(["-w", "%{http_code}", "-X", h.method]);
    if h.compressed {
        c.arg("--compressed");
    }
    for (k, v) in &h.headers {
        c.arg("-H").arg(format!("{k}: {v}"));
    }
    if let Some(b) = &h.body {
        let file = side.dir.join("request");
        std::fs::write(&file, fill(b, side.ns))?;
        c.arg("--data-binary").arg(format!("@{}", file.display()));
    }
    c.arg(&url);
    let out = c.stdin(Stdio::null()).output().context("curl runs")?;
    let mut a = Answer {
        status: String::from_utf8_lossy(&out.stdout).into_owned(),
        ..Answer::default()
    };
    if a.status == "000" {
        a.status = format!("no answer ({})", String::from_utf8_lossy(&out.stderr).trim());
    }
    a.body = std::fs::read(&body).unwrap_or_default();
    a.headers = headers(&hdr);
    let _ = std::fs::remove_file(&body);
    let _ = std::fs::remove_file(&hdr);
    Ok(a)
}

/// The last header block curl wrote (after any `100 Continue`), reduced to [`HEADERS`] and the
/// body's framing.
fn headers(file: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let block = text
        .split("\r\n\r\n")
        .filter(|b| !b.trim().is_empty())
        .last()
        .unwrap_or("");
    let mut out = BTreeMap::new();
    let mut framing = "none";
    for line in block.lines().skip(1) {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let k = k.trim().to_ascii_lowercase();
        let v = v.trim();
        if k == "transfer-encoding" && v.contains("chunked") {
            framing = "chunked";
        } else if k == "content-length" && framing == "none" {
            framing = "length";
        }
        if HEADERS.contains(&k.as_str()) {
            out.entry(k)
                .and_modify(|e: &mut String| {
                    e.push_str(", ");
                    e.push_str(v);
                })
                .or_insert_with(|| v.to_owned());
        }
    }
    out.insert("framing".into(), framing.into());
    out
}

fn kubectl(args: &[&str], stdin: Option<&str>, side: &Side) -> Result<Answer> {
    let mut c = Command::new(kubectl_bin());
    c.env("KUBECONFIG", &side.proxy.kubeconfig)
        .arg("--cache-dir")
        .arg(side.dir.join("kubectl-cache"))
        .args(args.iter().map(|a| fill(a, side.ns)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = if let Some(input) = stdin {
        use std::io::Write as _;
        let mut child = c.stdin(Stdio::piped()).spawn().context("kubectl runs")?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(fill(input, side.ns).as_bytes())?;
        child.wait_with_output()?
    } else {
        c.stdin(Stdio::null()).output().context("kubectl runs")?
    };
    Ok(Answer {
        status: format!("exit {}", out.status.code().unwrap_or(-1)),
        headers: BTreeMap::new(),
        body: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

fn stored(path: &str, side: &Side) -> Result<Answer> {
    let out = Command::new(kubectl_bin())
        .env("KUBECONFIG", &side.upstream)
        .args(["get", "--raw", &fill(path, side.ns)])
        .stdin(Stdio::null())
        .output()
        .context("kubectl runs")?;
    Ok(Answer {
        status: format!("exit {}", out.status.code().unwrap_or(-1)),
        headers: BTreeMap::new(),
        body: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
