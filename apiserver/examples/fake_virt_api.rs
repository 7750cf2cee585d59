//! Runs the TEST DOUBLE of KubeVirt's virt-api (`tests/fake_virtapi`) as a process, for
//! `scripts/demo.sh` and `scripts/bench-subresources.sh`: no KubeVirt runs there either.
//!
//! Usage: `fake_virt_api CERT KEY CLIENT_CA USER`. Prints `port=P echo_port=E`, then one line
//! per request it sees (method, path, X-Remote-User, X-Remote-Group).

#[path = "../tests/fake_virtapi/mod.rs"]
#[allow(dead_code)]
mod fake_virtapi;

use std::io::Write as _;
use std::path::Path;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [cert, key, ca, user] = &a[..] else {
        eprintln!("usage: fake_virt_api CERT KEY CLIENT_CA USER");
        std::process::exit(2);
    };
    let fake = fake_virtapi::start(Path::new(cert), Path::new(key), Path::new(ca), user);
    let echo = fake_virtapi::echo_server();
    println!("port={} echo_port={echo}", fake.port);
    let mut shown = 0;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let seen = fake.all();
        for s in &seen[shown..] {
            let q = if s.query.is_empty() {
                String::new()
            } else {
                format!("?{}", s.query)
            };
            println!(
                "fake virt-api saw: {} {}{q} X-Remote-User={} X-Remote-Group={:?}{}",
                s.method,
                s.path,
                s.user,
                s.groups,
                if s.body.is_empty() {
                    String::new()
                } else {
                    format!(" body={}", s.body)
                }
            );
        }
        shown = seen.len();
        let _ = std::io::stdout().flush();
    }
}
