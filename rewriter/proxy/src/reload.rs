//! `RULES_PATH` reloaded without a restart.
//!
//! [`RulesHandle`] holds the current rules behind an `Arc`: each request takes the rules of the
//! moment it arrives and keeps them to its end, so new requests use new rules while streams in
//! flight finish on the old ones. The rule file's directory is watched with `notify` (as the
//! webhook certificate is, so a ConfigMap's `..data` symlink swap is seen) and polled as a
//! fallback. A file that fails to read or validate keeps the old rules: the error goes to the
//! log, to `kube_api_rewriter_rules_reloads_total{result="error"}` and
//! `kube_api_rewriter_rules_reload_failing` (1), and to `/readyz?verbose`, which stays ready
//! because the old rules still serve.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use kube_api_rewriter::Rules;
use kube_api_rewriter::rules::Source;
use notify::{RecursiveMode, Watcher};

use crate::deadlines::Deadlines;
use crate::shutdown::ShutdownSignal;

/// The rules in force, and where they come from.
#[derive(Debug)]
pub struct RulesHandle {
    path: Option<PathBuf>,
    current: RwLock<Arc<Rules>>,
    last_error: Mutex<Option<String>>,
    metrics: Mutex<Option<Arc<crate::metrics::Metrics>>>,
}

/// Reads and validates a rule file (the built-in KubeVirt rules for `None`).
pub fn load(path: Option<&Path>) -> Result<Rules, String> {
    match path {
        None => Ok(Rules::builtin_kubevirt()),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("RULES_PATH={}: {e}", p.display()))?;
            let name = p.display().to_string();
            Rules::parse(&[Source {
                name: &name,
                text: &text,
            }])
            .map_err(|e| format!("RULES_PATH: {e}"))
            .inspect(|r| {
                r.warnings()
                    .iter()
                    .for_each(|w| tracing::warn!("RULES_PATH: {w}"))
            })
        }
    }
}

impl RulesHandle {
    /// Loads the rules from `path` (built-in ones for `None`).
    pub fn load(path: Option<&Path>) -> Result<Arc<RulesHandle>, String> {
        let rules = load(path)?;
        Ok(Arc::new(RulesHandle {
            path: path.map(Path::to_owned),
            current: RwLock::new(Arc::new(rules)),
            last_error: Mutex::new(None),
            metrics: Mutex::new(None),
        }))
    }

    /// Fixed rules (never reloaded).
    pub fn fixed(rules: Rules) -> Arc<RulesHandle> {
        Arc::new(RulesHandle {
            path: None,
            current: RwLock::new(Arc::new(rules)),
            last_error: Mutex::new(None),
            metrics: Mutex::new(None),
        })
    }

    /// Reports reloads to `metrics`.
    pub fn set_metrics(&self, metrics: Arc<crate::metrics::Metrics>) {
        *self.metrics.lock().unwrap_or_else(|p| p.into_inner()) = Some(metrics);
    }

    /// The rules for a request arriving now.
    pub fn current(&self) -> Arc<Rules> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Why the last reload failed, while the file stays invalid.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the file again: `Ok(true)` when the rules changed, `Ok(false)` when the file says
    /// the same, `Err` (old rules kept) when it cannot be read or is invalid.
    pub fn reload(&self) -> Result<bool, String> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let res = load(Some(path));
        let metrics = self.metrics.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let out = match res {
            Ok(rules) => {
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
                if cur.version() == rules.version() {
                    Ok(false)
                } else {
                    *cur = Arc::new(rules);
                    Ok(true)
                }
            }
            Err(e) => {
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                Err(e)
            }
        };
        if let Some(m) = metrics {
            m.rules_reloaded(&out);
        }
        out
    }

    /// Watches the rule file's directory (and polls every [`Deadlines::rules_poll`]; a burst
    /// of events settles for [`Deadlines::rules_settle`]) until shutdown.
    pub fn spawn_watcher(self: &Arc<Self>, d: &Deadlines, shutdown: ShutdownSignal) -> Result<(), String> {
        let (poll, settle) = (d.rules_poll, d.rules_settle);
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if ev.is_ok() {
                let _ = tx.send(());
            }
        })
        .map_err(|e| format!("watching {}: {e}", path.display()))?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned();
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| format!("watching {}: {e}", dir.display()))?;
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let _watcher = watcher;
            let stop = shutdown.cancelled();
            tokio::pin!(stop);
            loop {
                tokio::select! {
                    _ = &mut stop => return,
                    ev = rx.recv() => {
                        if ev.is_none() {
                            return;
                        }
                        // Let a burst of events (an editor's save, a symlink swap) settle.
                        tokio::time::sleep(settle).await;
                        while rx.try_recv().is_ok() {}
                    }
                    _ = tokio::time::sleep(poll) => {}
                }
                match this.reload() {
                    Ok(true) => tracing::info!(
                        path = %path.display(),
                        version = format!("{:016x}", this.current().version()),
                        "rules reloaded"
                    ),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "rules reload failed; keeping the current rules"),
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "rules:\n  a.example.com:\n    groupRule: {group: a.example.com, versions: [v1], preferredVersion: v1, renamed: a.internal.example.com}\n    resourceRules:\n      things: {kind: Thing, listKind: ThingList, plural: things, singular: thing, versions: [v1], preferredVersion: v1}\nkindPrefix: X\nresourceTypePrefix: x\n";

    #[test]
    fn reload_keeps_old_rules_on_error() {
        let dir = std::env::temp_dir().join(format!("kar-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let f = dir.join("rules.yaml");
        std::fs::write(&f, GOOD).expect("write");
        let h = RulesHandle::load(Some(&f)).expect("valid");
        let v1 = h.current().version();
        assert_eq!(h.reload(), Ok(false));
        std::fs::write(&f, GOOD.replace("a.internal", "b.internal")).expect("write");
        assert_eq!(h.reload(), Ok(true));
        let v2 = h.current();
        assert_ne!(v2.version(), v1);
        assert_eq!(v2.rename_group("a.example.com"), Some("b.internal.example.com"));
        std::fs::write(&f, "rules: [not, a, map").expect("write");
        let e = h.reload().expect_err("invalid");
        assert!(e.contains("RULES_PATH"), "{e}");
        assert_eq!(h.last_error(), Some(e));
        assert_eq!(h.current().version(), v2.version());
        std::fs::write(&f, GOOD).expect("write");
        assert_eq!(h.reload(), Ok(true));
        assert_eq!(h.last_error(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
