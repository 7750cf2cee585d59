//! A process's memory and CPU time from `/proc` (Linux).

use kube_api_rewriter_testkit::{TcpSocket, tcp_sockets};

/// Memory and CPU of a process at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stat {
    /// Resident set size now, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set size, KiB (`VmHWM`).
    pub hwm_kib: u64,
    /// User plus system CPU time, seconds (`/proc/PID/stat` fields 14 and 15).
    pub cpu_s: f64,
}

/// Reads `/proc/PID/status` and `/proc/PID/stat`.
pub fn of(pid: u32) -> Stat {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let hz = clock_ticks();
    Stat {
        rss_kib: kib("VmRSS:"),
        hwm_kib: kib("VmHWM:"),
        cpu_s: (ticks(11) + ticks(12)) as f64 / hz,
    }
}

/// `sysconf(_SC_CLK_TCK)` (via `getconf`; 100 on Linux when it cannot run).
fn clock_ticks() -> f64 {
    static HZ: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Raises this process's soft `RLIMIT_NOFILE` to the hard limit (thousands of sockets).
pub fn raise_nofile() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    l.current = l.maximum;
    setrlimit(Resource::Nofile, l).ok()?;
    l.current
}

/// Every established IPv4 socket on this machine whose local or remote port is `port`.
pub fn sockets(port: u16) -> Vec<TcpSocket> {
    tcp_sockets()
        .into_iter()
        .filter(|s| s.local == port || s.remote == port)
        .collect()
}
