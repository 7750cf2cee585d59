//! The interleaved A/B mode (`--ab`, or `--ab-rounds N`, with `--peer BIN`): this proxy
//! (`--proxy-bin`) and the peer, such as an older build of the same proxy, measured in turns
//! over `N` rounds (10 by default) against the doubles of parts 2 and 3 only, so that a slow
//! spell of the shared machine falls on both. The binary that goes first alternates from round
//! to round. In each round each binary does:
//!
//! 1. one rewritten LIST of part 3's double (`--burst-vms` VMs), from a proxy child in front of
//!    it: the child's CPU seconds over the GB delivered (see `part3_burst::costed`);
//! 2. [`GETS`] GETs of part 2's small VM one after another on one keep-alive connection, after
//!    [`WARMUP`] untimed ones, from a second child in front of part 2's double: their median,
//!    minus the median of the same GETs straight to the double, measured first in that round.
//!
//! Each round's figures are printed as it ends; at the end a table (`report:proxy-ab`) gives
//! each binary's median over the rounds, the rounds' spread (min–max, and max − min over the
//! median) and the difference of the medians, and a line per figure says whether that
//! difference is within max(5%, the larger relative spread of the two), that is, within what
//! the rounds themselves vary by. Before the rounds, one untimed LIST through each binary is
//! checked (nothing renamed reaches the client; renamed names left in `managedFields` alone
//! are noted); the GETs' answers are checked as they come. A wrong answer stops the run.

use std::net::SocketAddr;
use std::sync::Arc;

use kube_api_rewriter_testkit::report::Report;

use crate::args::Args;
use crate::burst_double::{burst_fixtures, start_burst_double};
use crate::client::Framing;
use crate::figures::{loadavg, median};
use crate::memory_double::{fixtures, start_double};
use crate::part2_memory::small_gets;
use crate::part3_burst::costed;
use crate::peer::{Answer, check};
use crate::proxy_child::{ProxyChild, child_for_double};
use crate::{GROUP, NS, RESOURCE, Result};

/// Rounds when `--ab` gives no count.
pub(crate) const ROUNDS: usize = 10;
/// Timed small GETs per binary and round (and straight to the double).
pub(crate) const GETS: usize = 500;
/// Untimed small GETs before the timed ones, on the same connection.
pub(crate) const WARMUP: usize = 100;
/// The least difference of the medians, in percent, that is told apart from noise.
const FLOOR_PCT: f64 = 5.0;

/// One binary under test: its children in front of part 3's double (the LIST) and part 2's (the
/// small GETs).
struct Side {
    name: String,
    list: ProxyChild,
    get: ProxyChild,
}

impl Side {
    /// Starts `a`'s binary `bin` (its logs named after `role`) in front of both doubles.
    async fn start(
        a: &Args,
        bin: &std::path::Path,
        name: &str,
        role: &str,
        doubles: (SocketAddr, SocketAddr),
    ) -> Result<Side> {
        Ok(Side {
            name: name.to_owned(),
            list: child_for_double(a, bin, doubles.0, "ab-list", None, role).await?,
            get: child_for_double(a, bin, doubles.1, "ab-get", None, role).await?,
        })
    }
}

/// One binary's figures in one round.
#[derive(Clone, Copy, Debug)]
struct Round {
    /// The proxy child's CPU seconds per GB of the LIST.
    cpu_gb: f64,
    /// The LIST's megabytes and seconds.
    list_mb: f64,
    list_secs: f64,
    /// The median small GET through the binary, and its excess over the direct one, in ms.
    get_ms: f64,
    added_ms: f64,
}

/// A figure of the final table: its name, where it is in a [`Round`], how it is shown.
struct Figure {
    what: &'static str,
    pick: fn(&Round) -> f64,
    show: fn(f64) -> String,
}

/// The median of the rounds' values and their extremes.
#[derive(Clone, Copy, Debug)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Spread {
        let mut s = v.to_vec();
        let median = median(&mut s);
        Spread {
            median,
            min: s.first().copied().unwrap_or(f64::NAN),
            max: s.last().copied().unwrap_or(f64::NAN),
        }
    }

    /// (max − min) / |median|, in percent.
    fn relative_pct(&self) -> f64 {
        (self.max - self.min) / self.median.abs() * 100.0
    }
}

/// Runs the A/B mode: `a.ab_rounds` rounds of this proxy against the peer.
pub(crate) async fn ab(a: &Args) -> Result<()> {
    let peer_bin = a.peer.as_ref().ok_or("--ab and --ab-rounds need --peer BIN")?;
    let rounds = a.ab_rounds.max(1);
    println!(
        "== A/B: this proxy ({}) and {} ({}), {rounds} interleaved rounds; load average {}",
        a.proxy_bin.display(),
        a.peer_name,
        peer_bin.display(),
        loadavg()
    );
    let burst = Arc::new(burst_fixtures(a.burst_vms, 0, 0));
    let list_double = start_burst_double(Arc::clone(&burst))?;
    // Part 2's double with no LIST and no watch: only its small VM is asked for.
    let get_double = start_double(Arc::new(fixtures(0, 0, false)))?;
    let doubles = (list_double, get_double);
    let sides = [
        Side::start(a, &a.proxy_bin, "this proxy", "proxy", doubles).await?,
        Side::start(a, peer_bin, &a.peer_name, "peer", doubles).await?,
    ];
    let list_path = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines");
    let get_via = format!("/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/vm-small");
    let get_dir = format!("/apis/{GROUP}/v1/namespaces/{NS}/{RESOURCE}/vm-small");
    // One untimed LIST each, checked (and a warm-up).
    for s in &sides {
        match check(s.list.addr(), &list_path).await {
            Ok((Answer::Right, _)) => {}
            Ok((Answer::ManagedFields, _)) => {
                println!("   {}: renamed names left in managedFields of the LIST", s.name);
            }
            Err(e) => return Err(format!("{}: the LIST is wrong: {e}", s.name).into()),
        }
    }
    println!(
        "   each round: one rewritten LIST of {} VMs (the binary's CPU per GB); {GETS} small GETs on one connection after {WARMUP} untimed (median, minus direct's)",
        burst.items
    );
    let mut figs: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        let (direct, _, _) = small_gets(get_double, &get_dir, WARMUP, GETS, false).await?;
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let s = &sides[i];
            let c = costed(
                s.list.addr(),
                &list_path,
                Some(&s.list),
                None,
                false,
                Framing::Lines,
            )
            .await?;
            if c.read.bytes == 0 {
                return Err(format!("{}: an empty LIST", s.name).into());
            }
            let (get_ms, _, ans) = small_gets(s.get.addr(), &get_via, WARMUP, GETS, true)
                .await
                .map_err(|e| format!("{}: small GET: {e}", s.name))?;
            if ans == Answer::ManagedFields && r == 0 {
                println!(
                    "   {}: renamed names left in managedFields of the small GET",
                    s.name
                );
            }
            figs[i].push(Round {
                cpu_gb: c.cpu / (c.read.bytes as f64 / 1e9),
                list_mb: c.read.bytes as f64 / 1e6,
                list_secs: c.read.secs,
                get_ms,
                added_ms: get_ms - direct,
            });
        }
        let show = |i: usize| {
            let f = figs[i][r];
            format!(
                "{}: CPU {:.3} s/GB (LIST {:.1} MB in {:.3} s), GET {:.3} ms, added {:+.3} ms",
                sides[i].name, f.cpu_gb, f.list_mb, f.list_secs, f.get_ms, f.added_ms
            )
        };
        println!(
            "   round {:>2}/{rounds} ({} first): direct GET {direct:.3} ms | {} | {}",
            r + 1,
            sides[order[0]].name,
            show(0),
            show(1)
        );
    }
    let mut rep = Report::new(
        "proxy-ab",
        &[
            "figure",
            "this proxy: median",
            "this proxy: min–max",
            "this proxy: spread",
            &format!("{}: median", a.peer_name),
            &format!("{}: min–max", a.peer_name),
            &format!("{}: spread", a.peer_name),
            &format!("{} vs this proxy", a.peer_name),
        ],
    );
    let figures = [
        Figure {
            what: "proxy CPU per GB, rewritten LIST",
            pick: |f| f.cpu_gb,
            show: |v| format!("{v:.3} s"),
        },
        Figure {
            what: "latency added to a small GET (median)",
            pick: |f| f.added_ms,
            show: |v| format!("{v:+.3} ms"),
        },
    ];
    let mut verdicts = Vec::new();
    for Figure { what, pick, show } in figures {
        let sp: Vec<Spread> = figs
            .iter()
            .map(|v| Spread::of(&v.iter().map(pick).collect::<Vec<_>>()))
            .collect();
        let diff = (sp[1].median - sp[0].median) / sp[0].median.abs() * 100.0;
        let noise = sp[0].relative_pct().max(sp[1].relative_pct());
        let bound = noise.max(FLOOR_PCT);
        let mut row = vec![what.to_owned()];
        for s in &sp {
            row.push(show(s.median));
            row.push(format!("{}–{}", show(s.min), show(s.max)));
            row.push(format!("{:.1}%", s.relative_pct()));
        }
        row.push(format!("{diff:+.1}%"));
        rep.row(row);
        verdicts.push(if diff.abs() <= bound {
            format!(
                "- {what}: {} vs this proxy {diff:+.1}%, within max({FLOOR_PCT:.0}%, the rounds' relative spread {noise:.1}%) = {bound:.1}%: no difference told apart from noise.",
                a.peer_name
            )
        } else {
            format!(
                "- {what}: {} vs this proxy {diff:+.1}%, beyond max({FLOOR_PCT:.0}%, the rounds' relative spread {noise:.1}%) = {bound:.1}%: {} is {}.",
                a.peer_name,
                a.peer_name,
                if diff > 0.0 { "higher" } else { "lower" }
            )
        });
    }
    println!("done; load average {}", loadavg());
    rep.note(format!(
        "`bench_proxy --proxy-bin {} --peer {} --peer-name '{}' --ab-rounds {rounds}`: {rounds} interleaved rounds (the first binary alternating), both with LOG_LEVEL=info, against the doubles only; per round one rewritten LIST of {} VMs (the proxy process's CPU seconds per GB delivered) and {GETS} sequential small GETs on one keep-alive connection after {WARMUP} untimed (median, minus the same straight to the double in that round). Median and min–max over the rounds; spread = (max − min) / median; the difference is of the medians, ({} − this proxy) / this proxy. The load average was {} at the end.",
        a.proxy_bin.display(),
        peer_bin.display(),
        a.peer_name,
        burst.items,
        a.peer_name,
        loadavg()
    ));
    for v in verdicts {
        rep.note(v);
    }
    rep.print();
    Ok(())
}
