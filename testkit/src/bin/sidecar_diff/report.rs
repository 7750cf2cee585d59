//! The rows of a run, printed for a person, as Markdown, and checked against an expectation.

use std::path::Path;
use std::time::Duration;

use crate::compare::{Difference, cut};
use crate::corpus::{Case, Touch};
use crate::matchers;

/// What a check expects of a run.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Expect {
    /// No difference at all (a binary against itself).
    Same,
    /// Every case whose answer shows a renamed name differs unexpectedly; every case that
    /// touches nothing renamed is equal (a binary against itself without rules).
    RenamedDiffer,
}

/// One case's differences, each with the matcher that expects it, if any.
pub struct Row {
    pub case: &'static str,
    pub touch: Touch,
    pub request: String,
    pub diffs: Vec<(Difference, Option<&'static matchers::Matcher>)>,
}

impl Row {
    pub fn new(case: &Case, diffs: Vec<Difference>) -> Row {
        let diffs = diffs
            .into_iter()
            .map(|d| {
                let m = matchers::expected(case, &d);
                (d, m)
            })
            .collect();
        Row {
            case: case.name,
            touch: case.touch,
            request: case.request(),
            diffs,
        }
    }

    fn unexpected(&self) -> usize {
        self.diffs.iter().filter(|(_, m)| m.is_none()).count()
    }
}

pub struct Outcome<'a> {
    pub a: &'a Path,
    pub b: &'a Path,
    pub rows: &'a [Row],
    pub elapsed: Duration,
}

impl Outcome<'_> {
    pub fn unexpected(&self) -> usize {
        self.rows.iter().map(Row::unexpected).sum()
    }

    pub fn print(&self) {
        println!("a: {}\nb: {}", self.a.display(), self.b.display());
        for r in self.rows.iter().filter(|r| !r.diffs.is_empty()) {
            println!("\nDIFF {}  ({})", r.case, r.request);
            for (d, m) in &r.diffs {
                let tag = m.map_or(String::new(), |m| format!("  [expected: {}]", m.name));
                println!("    {:<13} {}{tag}", d.facet.name(), d.detail);
            }
        }
        let differing = self.rows.iter().filter(|r| r.unexpected() > 0).count();
        let expected_only = self
            .rows
            .iter()
            .filter(|r| !r.diffs.is_empty() && r.unexpected() == 0)
            .count();
        let all: usize = self.rows.iter().map(|r| r.diffs.len()).sum();
        println!(
            "\n{} cases in {:.0?}: {} equal, {} differ, {} differ only as expected; {} differences, {} unexpected",
            self.rows.len(),
            self.elapsed,
            self.rows.len() - differing - expected_only,
            differing,
            expected_only,
            all,
            self.unexpected(),
        );
        if self.rows.iter().any(|r| r.diffs.iter().any(|(_, m)| m.is_some())) {
            println!("expected differences:");
            for m in matchers::EXPECTED {
                println!("    {}: {}", m.name, m.reason);
            }
        }
    }

    /// Whether the run meets `e`; prints why not.
    pub fn check(&self, e: Expect) -> bool {
        match e {
            Expect::Same => {
                let n: usize = self.rows.iter().map(|r| r.diffs.len()).sum();
                println!("check same: {n} differences in {} cases", self.rows.len());
                n == 0
            }
            Expect::RenamedDiffer => {
                let renamed: Vec<_> = self.rows.iter().filter(|r| r.touch == Touch::Renamed).collect();
                let untouched: Vec<_> = self.rows.iter().filter(|r| r.touch == Touch::Nothing).collect();
                let equal_renamed: Vec<_> = renamed.iter().filter(|r| r.unexpected() == 0).collect();
                let differing_untouched: Vec<_> = untouched.iter().filter(|r| !r.diffs.is_empty()).collect();
                println!(
                    "check renamed-differ: {}/{} cases showing a renamed name differ, {}/{} cases touching nothing renamed equal ({} round trips not asserted)",
                    renamed.len() - equal_renamed.len(),
                    renamed.len(),
                    untouched.len() - differing_untouched.len(),
                    untouched.len(),
                    self.rows.len() - renamed.len() - untouched.len(),
                );
                for r in &equal_renamed {
                    println!("    touches a renamed resource yet equal: {}", r.case);
                }
                for r in &differing_untouched {
                    println!("    touches nothing renamed yet differs: {}", r.case);
                }
                equal_renamed.is_empty() && differing_untouched.is_empty()
            }
        }
    }

    /// A Markdown table: one row per difference.
    pub fn markdown(&self) -> String {
        let mut s =
            String::from("| case | request | what | a \\| b | expected |\n| --- | --- | --- | --- | --- |\n");
        for r in self.rows {
            for (d, m) in &r.diffs {
                s.push_str(&format!(
                    "| `{}` | `{}` | {} | {} | {} |\n",
                    r.case,
                    cut(&r.request).replace('|', "\\|"),
                    d.facet.name(),
                    d.detail.replace('|', "\\|").replace('`', "'"),
                    m.map_or("", |m| m.name),
                ));
            }
        }
        s
    }
}
