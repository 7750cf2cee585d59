//! Writes a generated LIST of VirtualMachines (as the server holds them) of at least N MB.
//!
//! Usage: `gen_list <MB> [FILE]` (stdout without FILE). Or `gen_list --watch <MB> [FILE]` for
//! a WATCH stream.

use std::io::{self, BufWriter, Write};

fn main() -> io::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let watch = args.first().is_some_and(|a| a == "--watch");
    if watch {
        args.remove(0);
    }
    let Some(mb) = args.first().and_then(|a| a.parse::<f64>().ok()) else {
        eprintln!("usage: gen_list [--watch] <MB> [FILE]");
        std::process::exit(2);
    };
    let min_bytes = (mb * 1e6) as usize;
    let out: Box<dyn Write> = match args.get(1) {
        Some(p) => Box::new(std::fs::File::create(p)?),
        None => Box::new(io::stdout().lock()),
    };
    let mut w = BufWriter::with_capacity(1 << 20, out);
    if watch {
        let mut rng = kube_api_rewriter_benches::Rng::new(42);
        let (mut n, mut i) = (0, 0);
        while n < min_bytes {
            let vm = kube_api_rewriter_benches::vm_bytes(&mut rng, i);
            w.write_all(b"{\"type\":\"MODIFIED\",\"object\":")?;
            w.write_all(&vm)?;
            w.write_all(b"}\n")?;
            n += vm.len() + 32;
            i += 1;
        }
        eprintln!("{i} events");
    } else {
        let items = kube_api_rewriter_benches::write_list(&mut w, 42, usize::MAX, min_bytes)?;
        eprintln!("{items} items");
    }
    w.flush()
}
