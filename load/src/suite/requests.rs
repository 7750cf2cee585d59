//! The requests the phases make: the objects and patches, LISTs, rounds of changes, and timed
//! GETs.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use kube_api_rewriter_testkit::vm::Vm;

use super::{NS, VMS};
use crate::client;

/// A small VirtualMachine `ns/name` (original names, the workspace's generator) with the
/// annotation `note`.
pub(super) fn vm(ns: &str, name: &str, note: &str) -> Vec<u8> {
    let mut vm = Vm::new(name, ns).small();
    vm["metadata"]["annotations"] = serde_json::json!({ "note": note });
    vm.to_string().into_bytes()
}

/// A merge patch of the annotations `step` and `note`.
pub(super) fn patch(step: usize, note: &str) -> (&'static str, Vec<u8>) {
    (
        "application/merge-patch+json",
        serde_json::json!({"metadata": {"annotations": {"step": step.to_string(), "note": note}}})
            .to_string()
            .into_bytes(),
    )
}

/// Median and maximum of the latencies of `n` GETs on new connections.
pub(super) async fn latency(port: u16, path: &str, n: usize) -> anyhow::Result<(Duration, Duration)> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let (status, _) =
            tokio::time::timeout(Duration::from_secs(60), client::call(port, "GET", path, None))
                .await
                .context("no answer within 60 s")??;
        v.push(t.elapsed());
        ensure!(status == 200, "GET {path}: {status}");
    }
    v.sort();
    Ok((v[v.len() / 2], v[v.len() - 1]))
}

/// Milliseconds with two decimals.
pub(super) fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// A LIST's resourceVersion and its items' (name, resourceVersion), sorted.
pub(super) async fn list_rv(port: u16, path: &str) -> anyhow::Result<(String, Vec<(String, String)>)> {
    let l = client::json(port, "GET", path, None).await?;
    let rv = l["metadata"]["resourceVersion"].as_str().unwrap_or("").to_owned();
    let mut items: Vec<(String, String)> = l["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| {
                    (
                        o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                        o["metadata"]["resourceVersion"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    items.sort();
    Ok((rv, items))
}

/// Changes every object once (`step`), a few writers at a time.
pub(super) async fn change_all(port: u16, objects: usize, step: usize, create: bool) -> anyhow::Result<()> {
    let writers = 8;
    let mut tasks = Vec::new();
    for w in 0..writers {
        tasks.push(tokio::spawn(async move {
            for i in (w..objects).step_by(writers) {
                let name = format!("vm-{i:04}");
                if create {
                    client::json(
                        port,
                        "POST",
                        &format!("{VMS}/{NS}/virtualmachines"),
                        Some(("application/json", vm(NS, &name, "0"))),
                    )
                    .await?;
                } else {
                    client::json(
                        port,
                        "PATCH",
                        &format!("{VMS}/{NS}/virtualmachines/{name}"),
                        Some(patch(step, &step.to_string())),
                    )
                    .await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
