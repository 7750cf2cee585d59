//! The workspace's one reader of Linux's `/proc`: what the tests, the benchmarks and the load
//! suite measure of a process (memory, CPU time, page faults, write syscalls, threads, open
//! descriptors) and of the machine (load average, TCP sockets).
//!
//! Each file has a small parser over its text (`parse_*`, unit-tested on captured text) and a
//! function that reads the file and parses it. The readers never fail: a file that cannot be
//! read (a process that has exited, another operating system) gives `None`, zero or nothing.

use std::path::Path;

// ------------------------------------------------------------------------------ key: value files

/// The number after `key:` in a `key: value` file such as `/proc/PID/status` (`VmHWM:  1664
/// kB` gives 1664, in the file's unit) or `/proc/PID/io` (`syscw: 12`).
pub fn parse_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A process's resident set (`/proc/PID/status`), KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// Resident set size now (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set size (`VmHWM`).
    pub hwm_kib: u64,
}

/// The resident set of the text of a `/proc/PID/status`; a missing line counts 0.
pub fn parse_status(text: &str) -> Memory {
    Memory {
        rss_kib: parse_field(text, "VmRSS").unwrap_or(0),
        hwm_kib: parse_field(text, "VmHWM").unwrap_or(0),
    }
}

/// The resident set of process `pid` (`/proc/PID/status`); zeros when it cannot be read.
pub fn memory(pid: u32) -> Memory {
    parse_status(&read(&format!("/proc/{pid}/status")).unwrap_or_default())
}

/// The write syscalls process `pid` has made so far (`syscw` of `/proc/PID/io`: write, writev
/// and the like, the socket writes of a tokio program included; not send or sendto). `None`
/// when the file cannot be read (another user's process, or no task I/O accounting).
pub fn syscw(pid: u32) -> Option<u64> {
    parse_field(&read(&format!("/proc/{pid}/io"))?, "syscw")
}

// ------------------------------------------------------------------------------ stat, schedstat

/// What the workspace reads of `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    /// The state (field 3): `R`, `S`, `D`, `Z`, ...
    pub state: char,
    /// Minor page faults so far (field 10, `minflt`).
    pub minflt: u64,
    /// User CPU time, clock ticks (field 14, `utime`).
    pub utime: u64,
    /// System CPU time, clock ticks (field 15, `stime`).
    pub stime: u64,
}

impl Stat {
    /// User plus system CPU time, seconds (see [`clock_ticks`]).
    pub fn cpu_secs(&self) -> f64 {
        (self.utime + self.stime) as f64 / clock_ticks()
    }
}

/// Parses the text of a `/proc/PID/stat`. The fields are read after the parenthesised command
/// name, which may hold spaces and parentheses itself.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = text.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Index 0 is field 3 (the state).
    let n = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(Stat {
        state: f.first()?.chars().next()?,
        minflt: n(10)?,
        utime: n(14)?,
        stime: n(15)?,
    })
}

/// `/proc/PID/stat` of process `pid`.
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&read(&format!("/proc/{pid}/stat"))?)
}

/// The clock ticks per second of `/proc/PID/stat`'s times (`getconf CLK_TCK`, asked once; 100,
/// Linux's `USER_HZ`, when getconf cannot run).
pub fn clock_ticks() -> f64 {
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

/// The nanoseconds a thread has run, from the text of its `/proc/PID/task/TID/schedstat`
/// (the first of its three numbers).
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The ids of process `pid`'s threads (`/proc/PID/task`); none when it cannot be read.
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

/// CPU seconds process `pid` has used: the sum of its threads' `schedstat` run times
/// (nanoseconds, finer than `stat`'s 10 ms ticks: a transfer of tens of milliseconds shows),
/// or `stat`'s user + system ticks where a thread's schedstat cannot be read or all are zero.
/// A thread that ends in between drops out of the sum.
pub fn cpu_secs(pid: u32) -> f64 {
    let ns: Option<u64> = threads(pid)
        .into_iter()
        .map(|tid| parse_schedstat(&read(&format!("/proc/{pid}/task/{tid}/schedstat"))?))
        .sum();
    if let Some(ns) = ns.filter(|&n| n > 0) {
        return ns as f64 / 1e9;
    }
    stat(pid).map_or(0.0, |s| s.cpu_secs())
}

/// A thread's name from the text of its `/proc/PID/task/TID/comm` (Linux keeps 15 bytes).
pub fn parse_comm(text: &str) -> &str {
    text.trim_end_matches('\n')
}

/// The ids of process `pid`'s threads named `name` (a runtime's threads can then be counted
/// apart from the rest of the process).
pub fn threads_named(pid: u32, name: &str) -> Vec<u32> {
    threads(pid)
        .into_iter()
        .filter(|tid| read(&format!("/proc/{pid}/task/{tid}/comm")).is_some_and(|c| parse_comm(&c) == name))
        .collect()
}

// ------------------------------------------------------------------------------ descriptors

/// What an open descriptor is, from the target of its `/proc/PID/fd/N` link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdKind {
    /// `socket:[INODE]`.
    Socket,
    /// `anon_inode:[eventfd]` (tokio's I/O driver wake-up, among others).
    Eventfd,
    /// Anything else: a file, a pipe, another anonymous inode.
    Other,
}

/// The kind of a descriptor from its link's target (see [`FdKind`]).
pub fn parse_fd_link(target: &str) -> FdKind {
    if target.starts_with("socket:") {
        FdKind::Socket
    } else if target == "anon_inode:[eventfd]" {
        FdKind::Eventfd
    } else {
        FdKind::Other
    }
}

/// The open descriptors of process `pid` of kind `kind` (`/proc/PID/fd`); none when it cannot
/// be read.
pub fn fds(pid: u32, kind: FdKind) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| parse_fd_link(&l.to_string_lossy()) == kind))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The descriptors of `pid` that are eventfds.
pub fn eventfds(pid: u32) -> Vec<u32> {
    fds(pid, FdKind::Eventfd)
}

/// The number of open sockets of process `pid` (its `/proc/PID/fd` links to `socket:`).
pub fn open_sockets(pid: u32) -> usize {
    fds(pid, FdKind::Socket).len()
}

// ------------------------------------------------------------------------------ the machine

/// The 1, 5 and 15 minute load averages from the text of `/proc/loadavg`, as written there
/// (`"2.43 2.61 2.30"`).
pub fn parse_loadavg(text: &str) -> String {
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// This machine's load averages (see [`parse_loadavg`]); `None` when `/proc/loadavg` cannot be
/// read.
pub fn loadavg() -> Option<String> {
    read("/proc/loadavg").map(|t| parse_loadavg(&t))
}

/// `st` of an established connection in `/proc/net/tcp`.
pub const TCP_ESTABLISHED: u8 = 0x01;
/// `st` of a listening socket in `/proc/net/tcp`.
pub const TCP_LISTEN: u8 = 0x0A;

/// One established IPv4 TCP socket of this machine, as `/proc/net/tcp` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    /// Local port.
    pub local: u16,
    /// Remote port.
    pub remote: u16,
    /// Bytes sent and not yet acknowledged.
    pub tx_queue: u64,
    /// Bytes received and not yet read by the process.
    pub rx_queue: u64,
    /// The kernel timer running on it (see [`tcp_timer`]).
    pub timer: u8,
}

/// The rows of the text of `/proc/net/tcp` (the heading skipped) as (state, socket): the state
/// is `st` (see [`TCP_ESTABLISHED`]); rows that do not parse are left out.
pub fn parse_net_tcp(text: &str) -> Vec<(u8, TcpSocket)> {
    let port = |addr: &str| {
        addr.split_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    let hex_pair = |field: &str| {
        let (a, b) = field.split_once(':')?;
        Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
            let (tx_queue, rx_queue) = hex_pair(f.get(4)?)?;
            let (timer, _) = hex_pair(f.get(5)?)?;
            let socket = TcpSocket {
                local: port(f.get(1)?)?,
                remote: port(f.get(2)?)?,
                tx_queue,
                rx_queue,
                timer: u8::try_from(timer).ok()?,
            };
            Some((state, socket))
        })
        .collect()
}

/// Every IPv4 TCP socket of this machine with its state (`/proc/net/tcp`); none when it cannot
/// be read.
fn net_tcp() -> Vec<(u8, TcpSocket)> {
    read("/proc/net/tcp").map_or_else(Vec::new, |t| parse_net_tcp(&t))
}

/// Every established IPv4 TCP socket of this machine (`/proc/net/tcp`); none when it cannot be
/// read.
pub fn tcp_sockets() -> Vec<TcpSocket> {
    net_tcp()
        .into_iter()
        .filter(|(st, _)| *st == TCP_ESTABLISHED)
        .map(|(_, s)| s)
        .collect()
}

/// Every established IPv4 socket of this machine whose local or remote port is `port`.
pub fn tcp_sockets_on(port: u16) -> Vec<TcpSocket> {
    tcp_sockets()
        .into_iter()
        .filter(|s| s.local == port || s.remote == port)
        .collect()
}

/// The local ports of every IPv4 TCP socket of this machine to `remote_port` in any state,
/// closing and `TIME_WAIT` included (`/proc/net/tcp`): the connections made to a server on this
/// machine in about the last minute (Linux keeps `TIME_WAIT` for 60 s) by whichever end closed
/// them, and those still open.
pub fn tcp_connections_to(remote_port: u16) -> Vec<u16> {
    net_tcp()
        .into_iter()
        .filter(|(st, s)| *st != TCP_LISTEN && s.remote == remote_port)
        .map(|(_, s)| s.local)
        .collect()
}

/// The kernel timer of the IPv4 TCP socket from `local_port` to `remote_port` on loopback
/// (`/proc/net/tcp`, column `tr`): 0 none, 1 retransmit, 2 keep-alive, 3 TIME_WAIT, 4 zero
/// window probe. An established socket with `SO_KEEPALIVE` shows 2.
pub fn tcp_timer(local_port: u16, remote_port: u16) -> Option<u8> {
    tcp_timers(Some(local_port), remote_port).into_iter().next()
}

/// The timers (see [`tcp_timer`]) of every established IPv4 socket to `remote_port`, from
/// `local_port` if given.
pub fn tcp_timers(local_port: Option<u16>, remote_port: u16) -> Vec<u8> {
    tcp_sockets()
        .into_iter()
        .filter(|s| s.remote == remote_port && local_port.is_none_or(|p| s.local == p))
        .map(|s| s.timer)
        .collect()
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(Path::new(path)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tcat\nUmask:\t0022\nState:\tR (running)\nTgid:\t30347\nVmPeak:\t    3060 kB\nVmSize:\t    3060 kB\nVmHWM:\t    1664 kB\nVmRSS:\t    1232 kB\nRssAnon:\t     108 kB\nThreads:\t1\n";

    #[test]
    fn status_fields() {
        assert_eq!(
            parse_status(STATUS),
            Memory {
                rss_kib: 1232,
                hwm_kib: 1664
            }
        );
        assert_eq!(parse_field(STATUS, "Threads"), Some(1));
        // A key is a whole key: `Vm` is no line's key.
        assert_eq!(parse_field(STATUS, "Vm"), None);
        assert_eq!(parse_status(""), Memory::default());
    }

    #[test]
    fn io_fields() {
        let io = "rchar: 6976\nwchar: 0\nsyscr: 10\nsyscw: 42\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_field(io, "syscw"), Some(42));
        assert_eq!(parse_field(io, "syscr"), Some(10));
    }

    #[test]
    fn stat_fields() {
        let s = "30346 (cat) R 30341 30341 21250 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 1 0 605581 3133440 383 18446744073709551615 94186678059008 0\n";
        assert_eq!(
            parse_stat(s),
            Some(Stat {
                state: 'R',
                minflt: 100,
                utime: 7,
                stime: 3
            })
        );
        // A command name with spaces and a parenthesis.
        let s = "7 (tokio-rt (x) 1) S 1 7 7 0 -1 4194560 5 0 0 0 250 50 0 0 20 0 4 0 1 2 3\n";
        let st = parse_stat(s).expect("parses");
        assert_eq!((st.state, st.minflt, st.utime, st.stime), ('S', 5, 250, 50));
        assert_eq!(parse_stat("12 (gone"), None);
    }

    #[test]
    fn schedstat_and_comm() {
        assert_eq!(parse_schedstat("135606 2300036 2\n"), Some(135_606));
        assert_eq!(parse_schedstat(""), None);
        assert_eq!(parse_comm("burst-double\n"), "burst-double");
    }

    #[test]
    fn fd_links() {
        assert_eq!(parse_fd_link("socket:[340572]"), FdKind::Socket);
        assert_eq!(parse_fd_link("anon_inode:[eventfd]"), FdKind::Eventfd);
        assert_eq!(parse_fd_link("anon_inode:[eventpoll]"), FdKind::Other);
        assert_eq!(parse_fd_link("pipe:[340556]"), FdKind::Other);
        assert_eq!(parse_fd_link("/dev/null"), FdKind::Other);
    }

    #[test]
    fn loadavg_text() {
        assert_eq!(parse_loadavg("2.43 2.61 2.30 5/123 30354\n"), "2.43 2.61 2.30");
    }

    #[test]
    fn net_tcp_rows() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 64 1 00000000ab26d65d 100 0 0 10 0\n   1: 0100007F:1F90 0100007F:C350 01 00000010:00000200 02:000A7E2B 00000000     0        0 12345 2 0000000000000000 20 4 30 10 -1\n   2: 0100007F:C351 0100007F:1F90 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000\n";
        let rows = parse_net_tcp(text);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].0, TCP_LISTEN);
        assert_eq!(rows[0].1.local, 2024);
        assert_eq!(
            rows[1],
            (
                TCP_ESTABLISHED,
                TcpSocket {
                    local: 8080,
                    remote: 50000,
                    tx_queue: 16,
                    rx_queue: 512,
                    timer: 2
                }
            )
        );
        // TIME_WAIT.
        assert_eq!((rows[2].0, rows[2].1.remote, rows[2].1.timer), (6, 8080, 3));
    }

    #[test]
    fn this_process() {
        // Where /proc is there (Linux), this process has a resident set, a thread and a state.
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let me = std::process::id();
        assert!(memory(me).rss_kib > 0);
        assert!(!threads(me).is_empty());
        assert!(stat(me).is_some_and(|s| s.state != '\0'));
        assert!(cpu_secs(me).is_finite());
        assert!(loadavg().is_some());
    }
}
