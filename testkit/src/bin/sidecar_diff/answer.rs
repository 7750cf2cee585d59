//! One case run against one side: the answer as the client saw it (status, the headers that
//! matter, body), from curl, kubectl or kube-rs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result};
use kube_api_rewriter_testkit::{ProxyProc, kubectl_bin};

use crate::corpus::{Http, Step};
use crate::kube_rs;

/// A side: one sidecar process and the namespace its objects live in.
pub struct Side {
    pub proxy: ProxyProc,
    pub ns: &'static str,
    pub dir: std::path::PathBuf,
    /// kube-apiserver's admin kubeconfig, for what is stored.
    pub upstream: std::path::PathBuf,
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
        Step::Http(h) => http(h, side),
        Step::Kubectl { args, stdin } => kubectl(args, stdin.as_deref(), side),
        Step::KubeRs(case) => rt.block_on(kube_rs::run(*case, side)),
        Step::Upstream(path) => stored(path, side),
    }
}

fn http(h: &Http, side: &Side) -> Result<Answer> {
    let hdr = side.dir.join("headers");
    let body = side.dir.join("body");
    let url = side.proxy.url(&fill(&h.path, side.ns));
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
