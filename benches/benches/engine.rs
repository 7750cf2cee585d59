//! The rewrite engine against serde_json baselines, on the same bytes, in one run.
//!
//! * `list/*`: a LIST of 10,000 VirtualMachines (about 50 MB) as the server sends it.
//! * `watch/*`: 20,000 `MODIFIED` events (NDJSON) of the same VMs.
//! * `object/*`: one VM, both directions.
//!
//! Each group has `value` (serde_json `Value` parse + serialize), `scan` (serde_json
//! `IgnoredAny`: a validating scan), `skip_value` (our scanner's validating skip of the whole
//! body, no rules) and `restore` (our streaming rewriter fed 64 KiB chunks;
//! the output of each chunk is handed on, as the proxy sends it, so the output buffer stays one
//! chunk long).

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main, measurement::WallTime,
};
use kube_api_rewriter::object::{self, Context};
use kube_api_rewriter::{Direction, Rules};
use kube_api_rewriter_benches as data;
use kube_api_rewriter_benches::interleaved;

use kube_api_rewriter_benches::{ENGINE_LIST_ITEMS as LIST_ITEMS, ENGINE_WATCH_EVENTS as WATCH_EVENTS};

fn group<'a>(c: &'a mut Criterion, name: &str, bytes: usize) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Bytes(bytes as u64));
    g
}

fn baselines(g: &mut BenchmarkGroup<'_, WallTime>, body: &[u8], ndjson: bool) {
    g.bench_function("value_roundtrip", |b| {
        b.iter(|| {
            if ndjson {
                let mut out = Vec::with_capacity(body.len());
                for v in serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>() {
                    serde_json::to_writer(&mut out, &v.unwrap()).unwrap();
                    out.push(b'\n');
                }
                black_box(out.len())
            } else {
                let v: serde_json::Value = serde_json::from_slice(body).unwrap();
                black_box(serde_json::to_vec(&v).unwrap().len())
            }
        })
    });
    g.bench_function("ignored_any_scan", |b| {
        b.iter(|| black_box(interleaved::skip("serde", body, ndjson).unwrap()))
    });
}

/// Our scanner's pure validating skip (no rules, no output) on the same bytes as
/// `ignored_any_scan`: what the rewriter pays for every subtree it does not touch.
fn skip(g: &mut BenchmarkGroup<'_, WallTime>, body: &[u8], ndjson: bool) {
    g.bench_function("skip_value", |b| {
        b.iter(|| black_box(interleaved::skip("ours", body, ndjson).unwrap()))
    });
}

fn list(c: &mut Criterion) {
    let rules = Rules::builtin_kubevirt();
    let body = data::engine_list();
    eprintln!(
        "list: {} items, {} bytes ({:.1} MB)",
        LIST_ITEMS,
        body.len(),
        body.len() as f64 / 1e6
    );
    let mut g = group(c, "list", body.len());
    baselines(&mut g, &body, false);
    skip(&mut g, &body, false);
    g.bench_function("restore_stream_64k", |b| {
        b.iter(|| black_box(interleaved::restore(&rules, &body, false).unwrap()))
    });
    g.finish();
}

fn watch(c: &mut Criterion) {
    let rules = Rules::builtin_kubevirt();
    let body = data::engine_watch();
    eprintln!(
        "watch: {} events, {} bytes ({:.1} MB)",
        WATCH_EVENTS,
        body.len(),
        body.len() as f64 / 1e6
    );
    let mut g = group(c, "watch", body.len());
    baselines(&mut g, &body, true);
    skip(&mut g, &body, true);
    g.bench_function("restore_stream_64k", |b| {
        b.iter(|| black_box(interleaved::restore(&rules, &body, true).unwrap()))
    });
    g.finish();
}

fn single(c: &mut Criterion) {
    let rules = Rules::builtin_kubevirt();
    let server = data::vm_bytes(&mut data::Rng::new(44), 1);
    let client = object::rewrite(&rules, Direction::Restore, &server, &Context::default())
        .unwrap()
        .bytes()
        .unwrap()
        .to_vec();
    let mut g = c.benchmark_group("object");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Bytes(server.len() as u64));
    g.bench_function("value_roundtrip", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(&server).unwrap();
            black_box(serde_json::to_vec(&v).unwrap())
        })
    });
    g.bench_function("ignored_any_scan", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde::de::IgnoredAny>(&server).unwrap()))
    });
    g.bench_function("restore", |b| {
        b.iter(|| {
            black_box(object::rewrite(&rules, Direction::Restore, &server, &Context::default()).unwrap())
        })
    });
    g.throughput(Throughput::Bytes(client.len() as u64));
    g.bench_function("rename", |b| {
        b.iter(|| {
            black_box(object::rewrite(&rules, Direction::Rename, &client, &Context::default()).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, list, watch, single);
criterion_main!(benches);
