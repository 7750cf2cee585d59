//! `sidecar_diff`: one client corpus (kubectl, kube-rs, raw HTTP) through two sidecar binaries
//! against one real kube-apiserver, every difference in their answers printed as a row with the
//! request that showed it.
//!
//! ```sh
//! cargo run -p kube-api-rewriter-testkit --bin sidecar_diff -- --a BIN --b BIN
//! ```
//!
//! Each binary is started with the sidecar's environment (`KUBECONFIG`, `CLIENT_PROXY_ADDRESS`,
//! `CLIENT_PROXY_PORT`, `MONITORING_BIND_ADDRESS`, `LOG_*`; `WEBHOOK_ADDRESS` naming a webhook
//! double of its own, its listener on `WEBHOOK_LISTEN_*` and the older `WEBHOOK_PROXY_*`; plus
//! `--a-env`/`--b-env`) on loopback. KubeVirt's CRDs are installed renamed, as Deckhouse
//! installs them; each side works in a namespace of its own. A Node whose kubelet is a double
//! takes the Pods that upgrades reach. Exit status: 0 when no unexpected difference was found (or the
//! `--expect` check holds), 1 otherwise.

mod answer;
mod compare;
mod corpus;
mod doubles;
mod kube_rs;
mod matchers;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use kube_api_rewriter_testkit::{ControlPlane, ProxyProc, crd_fixtures, free_port, kubectl_in, ok};

use answer::Side;
use compare::SIDES;
use report::{Outcome, Row};

#[derive(Parser)]
#[command(about = "Runs one client corpus through two sidecar binaries and prints every difference")]
struct Args {
    /// The first sidecar binary.
    #[arg(long)]
    a: PathBuf,
    /// The second sidecar binary.
    #[arg(long)]
    b: PathBuf,
    /// Extra environment of the first, `NAME=VALUE` (repeatable), e.g. `RULES_PATH=...`.
    #[arg(long = "a-env", value_parser = name_value)]
    a_env: Vec<(String, String)>,
    /// Extra environment of the second.
    #[arg(long = "b-env", value_parser = name_value)]
    b_env: Vec<(String, String)>,
    /// Only the cases whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// A check instead of a report: `same` (no difference at all) or `renamed-differ` (every
    /// case that touches a renamed resource differs, every other case is equal).
    #[arg(long, value_enum)]
    expect: Option<report::Expect>,
    /// Also write the differences as a Markdown table to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// List the cases and exit.
    #[arg(long)]
    list: bool,
}

fn name_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s}: expected NAME=VALUE"))
}

fn main() -> Result<ExitCode> {
    let args = Args::parse();
    let cases: Vec<_> = corpus::all()
        .into_iter()
        .filter(|c| args.filter.as_deref().is_none_or(|f| c.name.contains(f)))
        .collect();
    if args.list {
        for c in &cases {
            println!("{:<40} {:<9} {}", c.name, format!("{:?}", c.touch), c.request());
        }
        return Ok(ExitCode::SUCCESS);
    }
    for bin in [&args.a, &args.b] {
        if !bin.is_file() {
            bail!("{}: no such binary", bin.display());
        }
    }
    let started = Instant::now();
    let cp = ControlPlane::up();
    install(&cp)?;
    let a = side(&cp, &args.a, SIDES[0], &args.a_env)?;
    let b = side(&cp, &args.b, SIDES[1], &args.b_env)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    for case in &cases {
        let answer = |s: &Side| {
            answer::run(&case.step, s, &rt).unwrap_or_else(|e| answer::Answer {
                status: format!("harness error: {e:#}"),
                ..answer::Answer::default()
            })
        };
        let (x, y) = (answer(&a), answer(&b));
        let diffs = compare::diff(&x, &y);
        rows.push(Row::new(case, diffs));
    }
    drop(rt);
    let outcome = Outcome {
        a: &args.a,
        b: &args.b,
        rows: &rows,
        elapsed: started.elapsed(),
    };
    outcome.print();
    if let Some(path) = &args.markdown {
        std::fs::write(path, outcome.markdown()).with_context(|| path.display().to_string())?;
    }
    let passed = match args.expect {
        Some(e) => outcome.check(e),
        None => outcome.unexpected() == 0,
    };
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// KubeVirt's CRDs, renamed, straight into kube-apiserver, and the corpus's extra ones; the
/// sides' namespaces with their default service accounts (a Pod needs one) and the objects the
/// cases start from; a Node served by the kubelet double.
fn install(cp: &ControlPlane) -> Result<()> {
    let renamed = crd_fixtures().join("renamed");
    ok(&cp.kubectl(&["apply", "-f", renamed.to_str().context("utf-8 path")?]));
    ok(&kubectl_in(
        cp.kubeconfig(),
        &["apply", "-f", "-"],
        corpus::defects::EXTRA_CRDS,
    ));
    ok(&cp.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd",
        "--all",
    ]));
    for ns in SIDES {
        ok(&cp.kubectl(&["create", "namespace", ns]));
    }
    let t = Instant::now();
    while SIDES.iter().any(|ns| {
        !cp.kubectl(&["get", "serviceaccount", "default", "-n", ns])
            .status
            .success()
    }) {
        if t.elapsed() > Duration::from_secs(60) {
            bail!("no default service account in the sides' namespaces after 60 s");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    kubelet_node(cp)?;
    for ns in SIDES {
        let objects = corpus::defects::upstream_objects(ns);
        ok(&kubectl_in(cp.kubeconfig(), &["create", "-f", "-"], &objects));
    }
    Ok(())
}

/// A Node whose kubelet (at 127.0.0.1, the port in its status) is the kubelet double.
fn kubelet_node(cp: &ControlPlane) -> Result<()> {
    let port = doubles::kubelet(&cp.dir)?;
    let node = corpus::defects::KUBELET_NODE;
    let manifest = format!(r#"{{"apiVersion":"v1","kind":"Node","metadata":{{"name":"{node}"}}}}"#);
    ok(&kubectl_in(cp.kubeconfig(), &["create", "-f", "-"], &manifest));
    let status = format!(
        r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"127.0.0.1"}}],"daemonEndpoints":{{"kubeletEndpoint":{{"Port":{port}}}}}}}}}"#
    );
    ok(&cp.kubectl(&[
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status,
    ]));
    Ok(())
}

fn side(
    cp: &ControlPlane,
    bin: &std::path::Path,
    ns: &'static str,
    extra: &[(String, String)],
) -> Result<Side> {
    let dir = cp.dir.join(ns);
    std::fs::create_dir_all(&dir)?;
    let (double, webhook_seen) = doubles::webhook();
    let webhook_port = free_port();
    let (target, port) = (format!("http://127.0.0.1:{double}"), webhook_port.to_string());
    let mut env = vec![
        ("KUBECONFIG", cp.kubeconfig()),
        ("LOG_LEVEL", "info"),
        ("WEBHOOK_ADDRESS", &target),
        ("WEBHOOK_LISTEN_ADDRESS", "127.0.0.1"),
        ("WEBHOOK_LISTEN_PORT", &port),
        ("WEBHOOK_PROXY_ADDRESS", "127.0.0.1"),
        ("WEBHOOK_PROXY_PORT", &port),
    ];
    env.extend(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let proxy = ProxyProc::start_bin(bin, &dir, &env);
    let upstream = cp.kubeconfig().into();
    Ok(Side {
        proxy,
        ns,
        dir,
        upstream,
        webhook_port,
        webhook_seen,
    })
}
