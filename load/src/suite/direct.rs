//! The direct watch: `kubectl get --raw` straight to kube-apiserver, what the proxy's watches
//! are compared with.

use std::io::{BufRead as _, BufReader};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kube_api_rewriter_testkit::ControlPlane;

use crate::client::Event;

/// started again from the last resourceVersion seen, as the proxy watches are, until dropped.
/// A watch straight to kube-apiserver: `kubectl get --raw` streams the body. When
/// kube-apiserver ends it (it closes watchers that fall behind; kubectl then exits) it is
/// started again from the last resourceVersion seen, as the proxy watches are, until dropped.
pub(super) struct Direct {
    child: Arc<Mutex<Option<std::process::Child>>>,
    events: Arc<Mutex<Vec<Event>>>,
    done: Arc<std::sync::atomic::AtomicBool>,
    resumed: Arc<AtomicUsize>,
}

impl Direct {
    /// Starts the watch of `path` (with its `resourceVersion=`).
    pub(super) fn start(cp: &ControlPlane, path: &str) -> Direct {
        let events = Arc::new(Mutex::new(Vec::<Event>::new()));
        let child = Arc::new(Mutex::new(None));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let resumed = Arc::new(AtomicUsize::new(0));
        let (e, c, d, r) = (
            Arc::clone(&events),
            Arc::clone(&child),
            Arc::clone(&done),
            Arc::clone(&resumed),
        );
        let kubeconfig = cp.kubeconfig().to_owned();
        let path = path.to_owned();
        std::thread::spawn(move || {
            let mut path = path;
            loop {
                let mut ch = match std::process::Command::new(kube_api_rewriter_testkit::kubectl_bin())
                    .args(["--kubeconfig", &kubeconfig, "get", "--raw", &path])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                {
                    Ok(ch) => ch,
                    Err(_) => return,
                };
                let Some(out) = ch.stdout.take() else { return };
                *c.lock().expect("lock") = Some(ch);
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Some(ev) = Event::parse(line.as_bytes()) {
                        e.lock().expect("lock").push(ev);
                    }
                }
                if let Some(mut ch) = c.lock().expect("lock").take() {
                    let _ = ch.wait();
                }
                if d.load(Ordering::SeqCst) {
                    return;
                }
                let Some(last) = e.lock().expect("lock").last().map(|ev| ev.rv.clone()) else {
                    return;
                };
                let Some((a, b)) = path.split_once("resourceVersion=") else {
                    return;
                };
                let rest = b.find('&').map_or("", |i| &b[i..]).to_owned();
                path = format!("{a}resourceVersion={last}{rest}");
                r.fetch_add(1, Ordering::SeqCst);
            }
        });
        Direct {
            child,
            events,
            done,
            resumed,
        }
    }

    /// Events seen so far.
    pub(super) fn len(&self) -> usize {
        self.events.lock().expect("lock").len()
    }

    /// The events seen so far.
    pub(super) fn events(&self) -> Vec<Event> {
        self.events.lock().expect("lock").clone()
    }

    /// How often it was started again.
    pub(super) fn resumed(&self) -> usize {
        self.resumed.load(Ordering::SeqCst)
    }

    /// No more restarts (before kube-apiserver is killed).
    pub(super) fn stop_resuming(&self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(mut ch) = self.child.lock().expect("lock").take() {
            let _ = ch.kill();
            let _ = ch.wait();
        }
    }
}
