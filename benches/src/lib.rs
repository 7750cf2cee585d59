//! Test data for the benchmarks: KubeVirt VirtualMachines as kube-apiserver holds them behind
//! the rewriter (renamed group, kind, labels, annotations, finalizers and managedFields keys),
//! about 5 KB each, in LIST bodies and WATCH streams.
//!
//! The objects are the workspace's one realistic VM (`kube_api_rewriter_testkit::vm`), in its
//! stored, renamed form; names, uids, sizes and timestamps vary with a seeded generator, so the
//! output is reproducible.

use std::io::{self, Write};

use kube_api_rewriter_testkit::vm::Vm;
pub use kube_api_rewriter_testkit::vm::{RENAMED_GROUP as GROUP, RENAMED_PREFIX as KV, Rng};
use serde_json::Value;

pub mod interleaved;

/// One VirtualMachine as the server holds it (renamed, with what the server adds), number `i`
/// of a generator: `vm-NNNNNN` in one of 97 namespaces, sizes and values from `rng`.
pub fn vm(rng: &mut Rng, i: usize) -> Value {
    Vm::new(&format!("vm-{i:06}"), &format!("tenant-{:03}", i % 97))
        .renamed()
        .stored()
        .seed(rng.next_u64())
        .json()
}

/// The bytes of VM number `i` (compact JSON, as kube-apiserver writes it).
pub fn vm_bytes(rng: &mut Rng, i: usize) -> Vec<u8> {
    serde_json::to_vec(&vm(rng, i)).expect("serializes")
}

/// Writes a LIST envelope around VMs until at least `min_bytes` are written (or `max_items`).
pub fn write_list(w: &mut impl Write, seed: u64, max_items: usize, min_bytes: usize) -> io::Result<usize> {
    let mut rng = Rng::new(seed);
    let mut n = 0;
    w.write_all(format!("{{\"apiVersion\":\"{GROUP}/v1\",\"items\":[").as_bytes())?;
    let mut i = 0;
    while i < max_items && n < min_bytes {
        if i > 0 {
            w.write_all(b",")?;
        }
        let b = vm_bytes(&mut rng, i);
        n += b.len() + 1;
        w.write_all(&b)?;
        i += 1;
    }
    w.write_all(
        b"],\"kind\":\"InternalVirtualizationVirtualMachineList\",\"metadata\":{\"continue\":\"\",\"resourceVersion\":\"9912345\"}}",
    )?;
    Ok(i)
}

/// VMs in the engine benchmark's LIST (and in the engine report's interleaved timing).
pub const ENGINE_LIST_ITEMS: usize = 10_000;
/// Events in the engine benchmark's WATCH stream.
pub const ENGINE_WATCH_EVENTS: usize = 20_000;

/// The engine benchmark's LIST body.
pub fn engine_list() -> Vec<u8> {
    list(ENGINE_LIST_ITEMS, 42)
}

/// The engine benchmark's WATCH stream.
pub fn engine_watch() -> Vec<u8> {
    watch(ENGINE_WATCH_EVENTS, 43)
}

/// A LIST body of `items` VMs.
pub fn list(items: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(items * 5200);
    write_list(&mut v, seed, items, usize::MAX).expect("vec");
    v
}

/// A WATCH stream of `events` MODIFIED events, newline-delimited.
pub fn watch(events: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut v = Vec::with_capacity(events * 5200);
    for i in 0..events {
        v.extend_from_slice(b"{\"type\":\"MODIFIED\",\"object\":");
        v.extend_from_slice(&vm_bytes(&mut rng, i % 10_000));
        v.extend_from_slice(b"}\n");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_validity() {
        let mut rng = Rng::new(1);
        let total: usize = (0..100).map(|i| vm_bytes(&mut rng, i).len()).sum();
        assert!((4500..5500).contains(&(total / 100)), "mean {}", total / 100);
        let l = list(50, 7);
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_eq!(v["items"].as_array().unwrap().len(), 50);
        let w = watch(10, 7);
        assert_eq!(
            serde_json::Deserializer::from_slice(&w)
                .into_iter::<Value>()
                .count(),
            10
        );
    }
}
