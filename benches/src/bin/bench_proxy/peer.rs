//! The comparison with a peer sidecar binary (`--peer BIN`, such as another build or another
//! implementation that reads the same environment): its table, beside the proxy's figures of
//! the same run, and the peer's reads, which report a wrong answer instead of stopping the run.
//!
//! The peer's timed runs count bytes and events only; whether its answer is right is checked
//! on one more, untimed, read of each workload that keeps the whole body. A renamed name in
//! `metadata.managedFields` alone (the field paths of labels, annotations and finalizers) is
//! shown beside the figure; one anywhere else, a lost event, an error status or a body changed
//! where it should pass as it is, replaces the figure.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http_body_util::BodyExt;
use kube_api_rewriter_testkit::report::Report;

use crate::client::{Counter, Framing, H1, Read, Tally, renamed};

/// A figure of the peer's and how right its answer was, or what it got wrong.
#[derive(Clone, Debug)]
pub(crate) struct Fig {
    value: Result<f64, String>,
    answer: Answer,
}

impl Fig {
    /// The figure `value` of a workload whose answer was `answer` (an error in either fails it).
    pub(crate) fn of(value: Result<f64, String>, answer: &Result<Answer, String>) -> Fig {
        match answer {
            Ok(a) => Fig { value, answer: *a },
            Err(e) => Fig {
                value: Err(e.clone()),
                answer: Answer::Right,
            },
        }
    }

    /// A figure that needs no check of an answer (memory).
    pub(crate) fn plain(value: f64) -> Fig {
        Fig {
            value: Ok(value),
            answer: Answer::Right,
        }
    }
}

/// How right an answer with renamed objects in it was, from right to less right.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Answer {
    /// Nothing renamed reached the client.
    Right,
    /// Renamed names were left in `metadata.managedFields`, and nowhere else.
    ManagedFields,
}

/// How right `body` is: renamed names outside `managedFields` are an error.
pub(crate) fn answer(body: &[u8]) -> Result<Answer, String> {
    let mark = br#""managedFields":"#;
    let (mut at, mut inside) = (0, false);
    while at < body.len() {
        let Some(m) = memchr::memmem::find(&body[at..], mark).map(|i| at + i) else {
            break;
        };
        if renamed(&body[at..m]) {
            return Err("renamed names reached the client".into());
        }
        let end = value_end(body, m + mark.len());
        inside |= renamed(&body[m..end]);
        at = end;
    }
    if renamed(&body[at.min(body.len())..]) {
        return Err("renamed names reached the client".into());
    }
    Ok(if inside {
        Answer::ManagedFields
    } else {
        Answer::Right
    })
}

/// Where the JSON value that starts at `from` (after whitespace) ends: past its closing bracket
/// for an array or object, else at the next `,` or `}` (the end of `b` if the value is cut).
fn value_end(b: &[u8], from: usize) -> usize {
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, &c) in b.iter().enumerate().skip(from) {
        if in_str {
            match c {
                _ if esc => esc = false,
                b'\\' => esc = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' if depth <= 1 => return if depth == 0 { i } else { i + 1 },
            b']' | b'}' => depth -= 1,
            b',' if depth == 0 => return i,
            _ => {}
        }
    }
    b.len()
}

/// What a figure is, for its format and for which way its ratio goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Unit {
    /// Seconds a transfer took.
    Secs,
    /// Megabytes a second.
    MbPerSec,
    /// Events a second.
    EventsPerSec,
    /// Milliseconds a request waited longer than directly.
    AddedMs,
    /// CPU seconds per GB.
    CpuPerGb,
    /// Megabytes of memory.
    Mb,
}

impl Unit {
    fn show(self, v: f64) -> String {
        match self {
            Unit::Secs => format!("{v:.3} s"),
            Unit::MbPerSec => format!("{v:.0} MB/s"),
            Unit::EventsPerSec => format!("{v:.0} events/s"),
            Unit::AddedMs => format!("{v:+.3} ms"),
            Unit::CpuPerGb => format!("{v:.2} s"),
            Unit::Mb => format!("{v:.1} MB"),
        }
    }

    /// The peer's cost over the proxy's: time, CPU, memory, or the inverse of a rate.
    fn ratio(self, ours: f64, peer: f64) -> Option<f64> {
        let r = match self {
            Unit::MbPerSec | Unit::EventsPerSec => ours / peer,
            _ => peer / ours,
        };
        (r.is_finite() && r > 0.0).then_some(r)
    }
}

/// The comparison table (`report:proxy-peer`).
pub(crate) struct PeerTable {
    rep: Report,
}

impl PeerTable {
    /// A table whose peer column is called `name`.
    pub(crate) fn new(name: &str) -> PeerTable {
        let ratio = format!("{name} / this proxy (time, CPU, memory)");
        PeerTable {
            rep: Report::new(
                "proxy-peer",
                &["upstream", "measure", "direct", "this proxy", name, &ratio],
            ),
        }
    }

    /// A row: the direct figure (as printed; empty where there is none), the proxy's and the
    /// peer's (with what was wrong in its answer).
    pub(crate) fn row(
        &mut self,
        upstream: &str,
        measure: impl Into<String>,
        direct: impl Into<String>,
        unit: Unit,
        ours: f64,
        peer: &Fig,
    ) {
        let (cell, ratio) = match &peer.value {
            Ok(p) => (
                match peer.answer {
                    Answer::Right => unit.show(*p),
                    Answer::ManagedFields => {
                        format!("{} (renamed names left in managedFields)", unit.show(*p))
                    }
                },
                unit.ratio(ours, *p).map_or(String::new(), |r| format!("{r:.2}x")),
            ),
            Err(e) => (format!("fails: {e}"), String::new()),
        };
        self.rep.row([
            upstream.to_owned(),
            measure.into(),
            direct.into(),
            unit.show(ours),
            cell,
            ratio,
        ]);
    }

    /// A line under the table.
    pub(crate) fn note(&mut self, line: impl Into<String>) {
        self.rep.note(line);
    }

    pub(crate) fn print(&self) {
        self.rep.print();
    }
}

/// What one read through the peer brought.
#[derive(Clone, Debug)]
pub(crate) struct Got {
    pub(crate) read: Read,
    pub(crate) events: usize,
    /// Whether the body was byte for byte the expected one (when one was given).
    pub(crate) identical: bool,
    /// The whole body, when asked for.
    pub(crate) body: Option<Vec<u8>>,
}

impl Got {
    /// How right the kept body is (see [`answer`]).
    pub(crate) fn answer(&self) -> Result<Answer, String> {
        answer(self.body.as_deref().unwrap_or_default())
    }
}

/// Reads `path` from `addr` to the end on a new connection, timed from the request, counting
/// events by `framing`, comparing the bytes with `expect` and, with `keep`, keeping them; an
/// error status is an error.
pub(crate) async fn fetch(
    addr: SocketAddr,
    path: &str,
    framing: Framing,
    expect: Option<&[u8]>,
    keep: bool,
) -> Result<Got, String> {
    let mut c = H1::connect(addr).await.map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let r = c
        .get(path, &[("accept", "application/json")])
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let mut body = r.into_body();
    let (mut bytes, mut events, mut identical) = (0u64, 0, true);
    let mut kept = keep.then(Vec::new);
    let mut tally = Tally::new(framing);
    while let Some(f) = body.frame().await {
        let f = f.map_err(|e| format!("the body broke off: {e}"))?;
        if let Ok(d) = f.into_data() {
            if let Some(x) = expect {
                let at = bytes as usize;
                identical &= x.get(at..at + d.len()) == Some(&d[..]);
            }
            bytes += d.len() as u64;
            events += tally.feed(&d);
            if let Some(k) = &mut kept {
                k.extend_from_slice(&d);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    if !status.is_success() {
        return Err(format!("answers {status}"));
    }
    if let Some(x) = expect {
        identical &= bytes == x.len() as u64;
    }
    Ok(Got {
        read: Read { bytes, secs },
        events,
        identical,
        body: kept,
    })
}

/// The fastest of the runs, or the first failure.
pub(crate) fn best_of(runs: &[Result<Read, String>]) -> Result<Read, String> {
    let mut best: Option<Read> = None;
    for r in runs {
        let r = r.clone()?;
        if best.is_none_or(|b| r.secs < b.secs) {
            best = Some(r);
        }
    }
    best.ok_or_else(|| "no run".to_owned())
}

/// The peer's answer to `path` and its events, from an untimed read that keeps the body.
pub(crate) async fn check(addr: SocketAddr, path: &str) -> Result<(Answer, usize), String> {
    let g = fetch(addr, path, Framing::Modified, None, true).await?;
    Ok((g.answer()?, g.events))
}

/// A watch through the peer, counted into `c` (events by `"type":"MODIFIED"`, bytes, the time of
/// the last) and kept in `kept` until it ends.
pub(crate) async fn watch_into(
    addr: SocketAddr,
    path: String,
    c: Arc<Counter>,
    kept: Arc<Mutex<Vec<u8>>>,
) -> Result<(), String> {
    let mut h = H1::connect(addr).await.map_err(|e| e.to_string())?;
    let r = h
        .get(&path, &[("accept", "application/json")])
        .await
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("answers {}", r.status()));
    }
    let mut body = r.into_body();
    let mut tally = Tally::new(Framing::Modified);
    while let Some(f) = body.frame().await {
        let Ok(d) = f.map_err(|e| e.to_string())?.into_data() else {
            continue;
        };
        if let Ok(mut k) = kept.lock() {
            k.extend_from_slice(&d);
        }
        let n = tally.feed(&d);
        c.bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
        if n > 0 {
            c.events.fetch_add(n, Ordering::Relaxed);
            if let Ok(mut l) = c.last.lock() {
                *l = Some(Instant::now());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GROUP;

    #[test]
    fn answer_tells_managed_fields_from_the_rest() {
        let clean = br#"{"metadata":{"labels":{"kubevirt.io/vm":"a"}}}"#;
        assert_eq!(answer(clean), Ok(Answer::Right));
        let mf = format!(
            r#"{{"metadata":{{"managedFields":[{{"fieldsV1":{{"f:metadata":{{"f:labels":{{"f:{GROUP}/x":{{}}}}}}}},"manager":"a]\"}}"}}],"name":"x"}}}}{{"metadata":{{"managedFields":null}}}}"#
        );
        assert_eq!(answer(mf.as_bytes()), Ok(Answer::ManagedFields));
        let after = format!(r#"{{"metadata":{{"managedFields":[],"labels":{{"{GROUP}/x":"y"}}}}}}"#);
        assert!(answer(after.as_bytes()).is_err());
        let before = format!(r#"{{"apiVersion":"{GROUP}/v1","metadata":{{"managedFields":[]}}}}"#);
        assert!(answer(before.as_bytes()).is_err());
    }

    #[test]
    fn ratios_go_the_way_of_cost() {
        assert_eq!(Unit::Secs.ratio(1.0, 2.0), Some(2.0));
        assert_eq!(Unit::MbPerSec.ratio(100.0, 50.0), Some(2.0));
        assert_eq!(Unit::AddedMs.ratio(0.0, 0.1), None);
    }
}
