//! Import throughput of `virtualization-dvcr`: a raw image of non-zero data (1 GiB, `SIZE` in
//! MiB to change it) served by a local HTTP server, imported (a) into DVCR (converted to qcow2,
//! pushed as a layer) and (b) into a directory (raw `disk.img`). Prints the wall time and MB/s
//! of each, stamped with the date and commit.
//!
//! `cargo bench -p virtualization-dvcr --bench import` (`SIZE=64` for a quick run).

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_api_rewriter_testkit::report::Report;
use kube_api_rewriter_testkit::{Dvcr, FileServer, temp_dir};
use virtualization_dvcr::TerminationMessage;

const BIN: &str = env!("CARGO_BIN_EXE_virtualization-dvcr");

/// Writes `mib` MiB of xorshift data (no zero blocks, incompressible for qcow2).
fn write_image(path: &Path, mib: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create image"));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for chunk in block.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&block).expect("write image");
    }
    f.flush().expect("flush image");
}

fn run(vars: &[(&str, String)], work: &Path) -> (Duration, TerminationMessage) {
    let tm = work.join("termination-log");
    let mut c = Command::new(BIN);
    c.arg("import")
        .env("TERMINATION_MESSAGE_PATH", &tm)
        .env("SCRATCH_DIR", work)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (k, v) in vars {
        c.env(k, v);
    }
    let t = Instant::now();
    let status = c.status().expect("virtualization-dvcr runs");
    let wall = t.elapsed();
    let text = std::fs::read_to_string(&tm).unwrap_or_default();
    let m: TerminationMessage = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(status.success(), "import failed: {text}");
    (wall, m)
}

fn mbps(bytes: u64, d: Duration) -> String {
    format!("{:.1} MB/s", bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9))
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs nothing heavy.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mib: usize = std::env::var("SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let bytes = (mib as u64) << 20;
    let root = temp_dir("dvcr-bench");
    let files = root.join("files");
    std::fs::create_dir_all(&files).expect("files dir");
    let t = Instant::now();
    write_image(&files.join("disk.raw"), mib);
    eprintln!("--- {mib} MiB image written in {:?}", t.elapsed());
    let server = FileServer::start(&files);
    let dvcr = Dvcr::up(&root);
    let url = format!("{}/disk.raw", server.url);
    let p = |p: &Path| p.to_str().expect("utf-8").to_owned();

    let work = root.join("work-registry");
    std::fs::create_dir_all(&work).expect("work dir");
    let (wall_reg, m_reg) = run(
        &[
            ("SOURCE", "http".into()),
            ("SOURCE_URL", url.clone()),
            ("DESTINATION", "registry".into()),
            ("DESTINATION_IMAGE", format!("{}/bench/disk:v1", dvcr.address)),
            ("DESTINATION_AUTH_FILE", p(&dvcr.auth_file)),
            ("DESTINATION_CA_FILE", p(&dvcr.ca_file)),
        ],
        &work,
    );

    let pvc = root.join("pvc");
    std::fs::create_dir_all(&pvc).expect("pvc dir");
    let work = root.join("work-dir");
    std::fs::create_dir_all(&work).expect("work dir");
    let (wall_dir, m_dir) = run(
        &[
            ("SOURCE", "http".into()),
            ("SOURCE_URL", url),
            ("DESTINATION", "dir".into()),
            ("DESTINATION_DIR", p(&pvc)),
        ],
        &work,
    );

    let mut r = Report::new("dvcr", &["import", "wall time", "throughput", "download speed"]);
    let speed = |m: &TerminationMessage| format!("{:.1} MB/s", m.average_speed.unwrap_or(0) as f64 / 1e6);
    r.row([
        "http → DVCR (raw → qcow2 layer)".to_owned(),
        format!("{:.2} s", wall_reg.as_secs_f64()),
        mbps(bytes, wall_reg),
        speed(&m_reg),
    ]);
    r.row([
        "http → dir (raw disk.img)".to_owned(),
        format!("{:.2} s", wall_dir.as_secs_f64()),
        mbps(bytes, wall_dir),
        speed(&m_dir),
    ]);
    r.note(format!(
        "{mib} MiB raw image of non-zero data from a local HTTP server; DVCR is docker-registry 2.8 with TLS \
         and htpasswd on the same machine; throughput is image bytes over the process's wall time."
    ));
    r.headline(format!("import of {mib} MiB http → DVCR"), mbps(bytes, wall_reg));
    r.print();
    drop(dvcr);
    let _ = std::fs::remove_dir_all(&root);
}
