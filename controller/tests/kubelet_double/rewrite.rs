//! What a container would see, made visible to a local process: `$(VAR)` references expanded as
//! a kubelet does, the container's paths (mounts, the termination file) replaced by the
//! directories the double made for them, and its declared ports by free loopback ports.

use std::collections::HashMap;
use std::path::PathBuf;

/// Expands `$(NAME)` with `env` (the last definition wins) as a kubelet does in `command`,
/// `args` and env values: `$$` is a literal `$`, an unknown or malformed reference stays as
/// written.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        if let Some(after) = tail.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(inner) = tail.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some((_, value)) = env.iter().rev().find(|(k, _)| *k == inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// A character that can be part of a path or a host name: a container path only matches where
/// it is not preceded or followed by one (so `/data` matches in `--dest=/data/x` and
/// `"/data/out"` but not in `/database` or `/srv/data`).
fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '~' | '/')
}

/// Replaces every whole occurrence of a container path of `map` (the longest first) by its local
/// directory or file; a following `/…` stays. `/` itself is never mapped.
pub fn map_paths(s: &str, map: &[(String, PathBuf)]) -> String {
    let mut map: Vec<(&str, String)> = map
        .iter()
        .map(|(p, local)| (p.trim_end_matches('/'), local.to_string_lossy().into_owned()))
        .filter(|(p, _)| !p.is_empty())
        .collect();
    map.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    'scan: while i < s.len() {
        let before_ok = s[..i].chars().next_back().is_none_or(|c| !word_char(c));
        if before_ok {
            for (path, local) in &map {
                if let Some(after) = s[i..].strip_prefix(path)
                    && after.chars().next().is_none_or(|c| c == '/' || !word_char(c))
                {
                    out.push_str(local);
                    i += path.len();
                    continue 'scan;
                }
            }
        }
        let c = s[i..].chars().next().expect("in bounds");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Replaces the listen addresses `0.0.0.0:PORT`, `127.0.0.1:PORT`, `localhost:PORT` and a bare
/// `:PORT` of each declared container port by `127.0.0.1:FREE` (other hosts and other ports stay).
pub fn map_ports(s: &str, ports: &HashMap<u16, u16>) -> String {
    let mut out = s.to_owned();
    for (&declared, &free) in ports {
        let needle = format!(":{declared}");
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        let mut consumed = String::new();
        while let Some(i) = rest.find(&needle) {
            let after = &rest[i + needle.len()..];
            let head = &rest[..i];
            consumed.push_str(head);
            if after.starts_with(|c: char| c.is_ascii_digit()) {
                consumed.push_str(&needle);
                rest = after;
                continue;
            }
            let host = ["0.0.0.0", "127.0.0.1", "localhost"].into_iter().find(|h| {
                consumed
                    .strip_suffix(h)
                    .is_some_and(|pre| pre.chars().next_back().is_none_or(|c| !word_char(c)))
            });
            let bare = consumed
                .chars()
                .next_back()
                .is_none_or(|c| !word_char(c) && c != ']');
            if let Some(h) = host {
                consumed.truncate(consumed.len() - h.len());
                consumed.push_str(&format!("127.0.0.1:{free}"));
            } else if bare {
                consumed.push_str(&format!("127.0.0.1:{free}"));
            } else {
                consumed.push_str(&needle);
            }
            rest = after;
        }
        result.push_str(&consumed);
        result.push_str(rest);
        out = result;
    }
    out
}
