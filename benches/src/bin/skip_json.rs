//! A pure validating skip over a file, for instruction counts under callgrind: the core's
//! scanner (`ours`), the scanner as it was before its fast paths (`ref`), or serde_json's
//! `IgnoredAny` (`serde`), on the same bytes. With `--ndjson` the file is a stream of values
//! (a WATCH body) skipped one after another.
//!
//! Usage: `skip_json ours|ref|serde [--ndjson] FILE`

use std::hint::black_box;

use kube_api_rewriter::internals;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ndjson = args.iter().any(|a| a == "--ndjson");
    let rest: Vec<&String> = args.iter().filter(|a| *a != "--ndjson").collect();
    let [which, file] = rest[..] else {
        eprintln!("usage: skip_json ours|ref|serde [--ndjson] FILE");
        std::process::exit(2);
    };
    let body = std::fs::read(file)?;
    let values = match (which.as_str(), ndjson) {
        ("ours", false) => internals::skip_document(&body).map(|_| 1)?,
        ("ref", false) => internals::skip_document_ref(&body).map(|_| 1)?,
        ("ours", true) => ndjson_count(internals::skip_values(&body, 0))?,
        ("ref", true) => ndjson_count(internals::skip_values_ref(&body, 0))?,
        ("serde", false) => {
            serde_json::from_slice::<serde::de::IgnoredAny>(&body)?;
            1
        }
        ("serde", true) => {
            let mut n = 0;
            for r in serde_json::Deserializer::from_slice(&body).into_iter::<serde::de::IgnoredAny>() {
                r?;
                n += 1;
            }
            n
        }
        _ => {
            eprintln!("usage: skip_json ours|ref|serde [--ndjson] FILE");
            std::process::exit(2);
        }
    };
    println!("{} values", black_box(values));
    Ok(())
}

fn ndjson_count((spans, err): internals::Skips) -> Result<usize, kube_api_rewriter::JsonError> {
    match err {
        Some(e) => Err(e),
        None => Ok(spans.len()),
    }
}
