//! Benchmark reports: a Markdown table stamped with the date, the commit and the machine kind,
//! between markers that `scripts/bench-report.sh` copies into `docs/benchmarks.md`, and
//! headline rows printed after it in the benchmark's output. The README's headline is not made
//! of those: `scripts/bench-headline.sh` quotes it from the tables in `docs/benchmarks.md`.
//!
//! ```no_run
//! let mut r = kube_api_rewriter_testkit::report::Report::new("vm200", &["mode", "all Running after"]);
//! r.row(["sidecar", "34.0 s"]);
//! r.headline("200 VMs Running, sidecar mode", "34.0 s");
//! r.print();
//! ```

use std::fmt::Write as _;
use std::process::Command;

/// One benchmark's table.
#[derive(Debug, Clone)]
pub struct Report {
    name: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
    headlines: Vec<(String, String)>,
}

impl Report {
    /// A report named `name` (the marker in `docs/benchmarks.md`) with these column headers.
    pub fn new(name: &str, columns: &[&str]) -> Self {
        Report {
            name: name.to_owned(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
            headlines: Vec::new(),
        }
    }

    /// Adds a row (cells beyond the columns are dropped, missing ones left empty).
    pub fn row<I, S>(&mut self, cells: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut r: Vec<String> = cells.into_iter().map(Into::into).collect();
        r.resize(self.columns.len(), String::new());
        self.rows.push(r);
        self
    }

    /// A line printed under the table (what the run was: sizes, build profile).
    pub fn note(&mut self, line: impl Into<String>) -> &mut Self {
        self.notes.push(line.into());
        self
    }

    /// A headline row printed after the table: what was measured, and the figure (for a reader
    /// of the output; the README's headline quotes the tables instead).
    pub fn headline(&mut self, measure: impl Into<String>, figure: impl Into<String>) -> &mut Self {
        self.headlines.push((measure.into(), figure.into()));
        self
    }

    /// The report as printed: the table block and the headline block, each between markers.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "<!-- report:{} -->", self.name);
        let _ = writeln!(s, "{}", stamp_line());
        s.push('\n');
        let _ = writeln!(s, "| {} |", self.columns.join(" | "));
        let _ = writeln!(s, "|{}", " --- |".repeat(self.columns.len()));
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|c| cell(c)).collect();
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
        if !self.notes.is_empty() {
            s.push('\n');
            for n in &self.notes {
                let _ = writeln!(s, "{n}");
            }
        }
        let _ = writeln!(s, "<!-- /report:{} -->", self.name);
        if !self.headlines.is_empty() {
            let _ = writeln!(s, "<!-- headline:{} -->", self.name);
            for (m, f) in &self.headlines {
                let _ = writeln!(s, "| {} | {} |", cell(m), cell(f));
            }
            let _ = writeln!(s, "<!-- /headline:{} -->", self.name);
        }
        s
    }

    /// Prints [`render`](Self::render) to stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// `_Measured DATE, commit C, MACHINE._`
pub fn stamp_line() -> String {
    let s = stamp();
    format!("_Measured {}, commit {}, {}._", s.date, s.commit, s.machine)
}

/// When, on what code and on what machine a figure was measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// `YYYY-MM-DD HH:MM UTC`.
    pub date: String,
    /// The short commit, with `+changes` when the tree differs from it.
    pub commit: String,
    /// Cores, CPU model, memory and architecture.
    pub machine: String,
}

/// The stamp of this moment, this checkout and this machine; `BENCH_STAMP_COMMIT` overrides
/// the commit (a run from a copy of the tree).
pub fn stamp() -> Stamp {
    let date = command(&["date", "-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "unknown date".into());
    let commit = std::env::var("BENCH_STAMP_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| {
            let c = command(&["git", "rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
            let dirty = command(&["git", "status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty { format!("{c}+changes") } else { c }
        });
    Stamp {
        date,
        commit,
        machine: machine(),
    }
}

/// `2 cores (AMD EPYC 7B13), 24 GiB, x86_64 Linux`.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| (kb + (1 << 19)) >> 20);
    format!(
        "{cores} cores ({model}), {gib} GiB, {} {}",
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

fn command(args: &[&str]) -> Option<String> {
    let o = Command::new(args[0]).args(&args[1..]).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_table_and_headline_between_markers() {
        let mut r = Report::new("demo", &["a", "b"]);
        r.row(["1", "x|y"])
            .row(["2"])
            .note("one run")
            .headline("a", "1 s");
        let s = r.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "<!-- report:demo -->");
        assert!(
            lines[1].starts_with("_Measured ") && lines[1].contains(", commit "),
            "{s}"
        );
        assert_eq!(
            &lines[3..7],
            ["| a | b |", "| --- | --- |", "| 1 | x\\|y |", "| 2 |  |"]
        );
        assert_eq!(lines[8], "one run");
        assert_eq!(lines[9], "<!-- /report:demo -->");
        assert_eq!(
            &lines[10..],
            ["<!-- headline:demo -->", "| a | 1 s |", "<!-- /headline:demo -->"]
        );
    }

    #[test]
    fn machine_names_cores_and_memory() {
        let m = machine();
        assert!(m.contains(" cores (") && m.contains(" GiB, "), "{m}");
    }
}
