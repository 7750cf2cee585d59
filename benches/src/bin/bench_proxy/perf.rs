//! A `perf stat` wrapper that counts write syscalls by kind (socket writes, eventfd wake-ups,
//! the log) for the proxy or for threads of this process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube_api_rewriter_testkit::procfs;

/// The proxy's write syscalls by kind, counted in the kernel by `perf stat` on the syscall
/// tracepoints (counting only: unlike strace, nothing stops the process per call).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WriteKinds {
    /// write, writev, sendto and sendmsg, on any descriptor.
    pub(crate) all: u64,
    /// Writes to the eventfd a tokio worker writes to wake another out of the I/O driver.
    pub(crate) wake: u64,
    /// Writes to stdout and stderr (the log).
    pub(crate) log: u64,
}

impl WriteKinds {
    /// Writes to sockets (everything but wake-ups and the log).
    pub(crate) fn socket(&self) -> u64 {
        self.all.saturating_sub(self.wake + self.log)
    }
}

/// Whose write syscalls to count.
pub(crate) enum Counted {
    /// A process (the proxy), every thread.
    Process(u32),
    /// Threads of this process (the double).
    Threads(Vec<u32>),
}

/// A running `perf stat` attached to the proxy or the double.
pub(crate) struct PerfWrites {
    child: Child,
    out: PathBuf,
}

impl PerfWrites {
    /// Starts counting the write syscalls of `pid`; `None` when perf is missing or the
    /// tracepoints are not readable here.
    pub(crate) async fn start(who: &Counted, out: PathBuf) -> Option<PerfWrites> {
        let (fds, target) = match who {
            Counted::Process(pid) => (procfs::eventfds(*pid), ["-p".to_owned(), pid.to_string()]),
            Counted::Threads(tids) if !tids.is_empty() => {
                let tids: Vec<String> = tids.iter().map(u32::to_string).collect();
                (
                    procfs::eventfds(std::process::id()),
                    ["-t".to_owned(), tids.join(",")],
                )
            }
            Counted::Threads(_) => return None,
        };
        let wake: Vec<String> = fds.iter().map(|fd| format!("fd == {fd}")).collect();
        let wake = if wake.is_empty() {
            "fd == 999999".to_owned()
        } else {
            wake.join(" || ")
        };
        let child = Command::new("perf")
            .args(["stat", "-x", ";", "-o"])
            .arg(&out)
            .args([
                "-e",
                "syscalls:sys_enter_write",
                "-e",
                "syscalls:sys_enter_write",
                "--filter",
            ])
            .arg(&wake)
            .args(["-e", "syscalls:sys_enter_write", "--filter", "fd <= 2"])
            .args([
                "-e",
                "syscalls:sys_enter_writev",
                "-e",
                "syscalls:sys_enter_sendto",
            ])
            .args(["-e", "syscalls:sys_enter_sendmsg"])
            .args(target)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut p = PerfWrites { child, out };
        // perf attaches to every thread before counting; give it time, and see it is still up.
        tokio::time::sleep(Duration::from_millis(500)).await;
        match p.child.try_wait() {
            Ok(None) => Some(p),
            _ => None,
        }
    }

    /// Stops counting and reads the counts.
    pub(crate) fn stop(mut self) -> Option<WriteKinds> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.out).ok()?;
        let _ = std::fs::remove_file(&self.out);
        // Lines: `count;unit;event;...` in the order of the -e options.
        let n: Vec<u64> = text
            .lines()
            .filter(|l| l.contains("syscalls:"))
            .map(|l| l.split(';').next().unwrap_or("").trim().parse().unwrap_or(0))
            .collect();
        if n.len() != 6 {
            return None;
        }
        Some(WriteKinds {
            all: n[0] + n[3] + n[4] + n[5],
            wake: n[1],
            log: n[2],
        })
    }
}
