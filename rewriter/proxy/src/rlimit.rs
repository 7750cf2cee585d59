//! Raises the soft `RLIMIT_NOFILE` to the hard limit at start, as the Go runtime does for Go
//! programs (since Go 1.19), so the connection caps, not a low default soft limit (often 1024),
//! bound how many clients the proxy can serve.
//!
//! std has no `setrlimit`, and the workspace forbids unsafe code (so not `libc`): `rustix`'s
//! safe wrapper does it.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The soft and hard limits after the change (`None`: unlimited).
pub fn raise_nofile() -> std::io::Result<(Option<u64>, Option<u64>)> {
    let lim = getrlimit(Resource::Nofile);
    if lim.current == lim.maximum {
        return Ok((lim.current, lim.maximum));
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        },
    )?;
    Ok((lim.maximum, lim.maximum))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_reaches_the_hard_one() {
        let (soft, hard) = super::raise_nofile().expect("setrlimit");
        assert_eq!(soft, hard);
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(now.current, now.maximum);
    }
}
