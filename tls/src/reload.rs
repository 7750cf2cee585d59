//! [`ReloadingCert`]: a certificate and key that follow their files, handed to rustls as the
//! server or client certificate at every handshake.
//!
//! Kubernetes updates Secret volumes by swapping a `..data` symlink, which a watch on the file
//! itself does not see; so the directories holding the files are watched, every event reloads
//! both files, and a slow poll backs the watch up (or is the only trigger, for callers that
//! choose it). A failed reload is logged and keeps the current certificate.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::{Error, load_certs, load_key, provider};

/// How long a burst of directory events (a writer's several writes, a symlink swap) is let
/// settle before the files are read.
const SETTLE: Duration = Duration::from_millis(100);

/// A certificate chain and its private key that can be swapped while connections are served.
///
/// It is the certificate resolver of the configs built by [`crate::server_config`],
/// [`crate::server_config_with_client_ca`] and [`crate::client_config`], so every handshake gets
/// the pair loaded last.
///
/// ```no_run
/// use kube_api_rewriter_tls::ReloadingCert;
///
/// let cert = ReloadingCert::load("/certs/tls.crt".as_ref(), "/certs/tls.key".as_ref())?;
/// let served = cert.current();
/// # let _ = served; Ok::<(), kube_api_rewriter_tls::Error>(())
/// ```
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

/// When [`ReloadingCert::follow`] reads the files again.
///
/// ```
/// use std::time::Duration;
///
/// // Prompt reloads on directory events, a read every minute as a safety net.
/// let watched = kube_api_rewriter_tls::Follow {
///     name: "webhook certificate",
///     poll: Duration::from_secs(60),
///     watch_dirs: true,
/// };
/// // A read every 10 seconds, nothing else.
/// let polled = kube_api_rewriter_tls::Follow {
///     poll: Duration::from_secs(10),
///     watch_dirs: false,
///     ..watched
/// };
/// # let _ = polled;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Follow {
    /// What the certificate is, for log lines (`"{name} reloaded"`).
    pub name: &'static str,
    /// The files are read at least this often.
    pub poll: Duration,
    /// Also watch the directories holding the files and read them on every change.
    pub watch_dirs: bool,
}

impl Follow {
    /// How often [`Follow::files`] reads the files even without a directory event.
    pub const POLL: Duration = Duration::from_secs(60);

    /// How the workspace's servers follow their certificates: the directories holding the
    /// files are watched (a Secret volume's `..data` swap reloads at once), and the files are
    /// read every [`Follow::POLL`] in case an event is missed.
    ///
    /// ```
    /// let how = kube_api_rewriter_tls::Follow::files("webhook certificate");
    /// assert!(how.watch_dirs);
    /// ```
    pub const fn files(name: &'static str) -> Follow {
        Follow {
            name,
            poll: Follow::POLL,
            watch_dirs: true,
        }
    }
}

fn load_pair(cert: &Path, key: &Path) -> Result<CertifiedKey, Error> {
    let certs = load_certs(cert)?;
    let key = load_key(key)?;
    CertifiedKey::from_der(certs, key, &provider()).map_err(|source| Error::Pair {
        path: cert.display().to_string(),
        source,
    })
}

impl ReloadingCert {
    /// Loads the pair once; fails, naming the file, when it cannot be used.
    ///
    /// ```no_run
    /// use kube_api_rewriter_tls::ReloadingCert;
    ///
    /// match ReloadingCert::load("/certs/tls.crt".as_ref(), "/certs/tls.key".as_ref()) {
    ///     Ok(cert) => drop(cert),
    ///     // e.g. "/certs/tls.key: I/O error: No such file or directory (os error 2)"
    ///     Err(e) => eprintln!("{e}"),
    /// }
    /// ```
    pub fn load(cert: &Path, key: &Path) -> Result<Arc<ReloadingCert>, Error> {
        let ck = load_pair(cert, key)?;
        Ok(Arc::new(ReloadingCert {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: RwLock::new(Arc::new(ck)),
        }))
    }

    /// Reads the files again: true when the certificate changed, false when it is the same.
    /// On error the current certificate stays.
    ///
    /// ```no_run
    /// use kube_api_rewriter_tls::ReloadingCert;
    ///
    /// let cert = ReloadingCert::load("/certs/tls.crt".as_ref(), "/certs/tls.key".as_ref())?;
    /// if cert.reload()? {
    ///     println!("a new certificate");
    /// }
    /// # Ok::<(), kube_api_rewriter_tls::Error>(())
    /// ```
    pub fn reload(&self) -> Result<bool, Error> {
        let ck = load_pair(&self.cert, &self.key)?;
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        if cur.cert == ck.cert {
            return Ok(false);
        }
        *cur = Arc::new(ck);
        Ok(true)
    }

    /// The pair in use now.
    ///
    /// ```no_run
    /// use kube_api_rewriter_tls::ReloadingCert;
    ///
    /// let cert = ReloadingCert::load("/certs/tls.crt".as_ref(), "/certs/tls.key".as_ref())?;
    /// let chain_len = cert.current().cert.len();
    /// # let _ = chain_len; Ok::<(), kube_api_rewriter_tls::Error>(())
    /// ```
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Spawns the task that reads the files again as `how` says, until `stop` completes (pass
    /// `std::future::pending()` to follow them for the life of the runtime). A change is logged
    /// at info (`"{name} reloaded"`), a failed reload at warn (`"{name} reload failed; keeping
    /// the current one"`) and the current certificate stays. Fails when a directory watch cannot
    /// be set up. Must be called within a tokio runtime.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kube_api_rewriter_tls::Error> {
    /// use std::time::Duration;
    ///
    /// use kube_api_rewriter_tls::{Follow, ReloadingCert};
    ///
    /// let cert = ReloadingCert::load("/certs/tls.crt".as_ref(), "/certs/tls.key".as_ref())?;
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let follow = Follow {
    ///     name: "webhook certificate",
    ///     poll: Duration::from_secs(60),
    ///     watch_dirs: true,
    /// };
    /// let task = cert.follow(follow, async move {
    ///     let _ = stopped.await;
    /// })?;
    /// // ... serve ...
    /// let _ = stop.send(());
    /// let _ = task.await;
    /// # Ok(()) }
    /// ```
    pub fn follow(
        self: &Arc<Self>,
        how: Follow,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> Result<JoinHandle<()>, Error> {
        let (watcher, mut events) = if how.watch_dirs {
            let (tx, rx) = mpsc::unbounded_channel::<()>();
            (Some(self.watch_dirs(tx)?), Some(rx))
        } else {
            (None, None)
        };
        let this = Arc::clone(self);
        Ok(tokio::spawn(async move {
            let _watcher = watcher;
            tokio::pin!(stop);
            loop {
                let watch_ended = tokio::select! {
                    _ = &mut stop => return,
                    watching = changed(&mut events) => !watching,
                    _ = tokio::time::sleep(how.poll) => false,
                };
                if watch_ended {
                    tracing::warn!(cert = %this.cert.display(), "{} watch ended; polling only", how.name);
                    events = None;
                }
                match this.reload() {
                    Ok(true) => tracing::info!(cert = %this.cert.display(), "{} reloaded", how.name),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "{} reload failed; keeping the current one", how.name)
                    }
                }
            }
        }))
    }

    /// A watch on the directories holding the files; every event sends on `tx`.
    fn watch_dirs(&self, tx: mpsc::UnboundedSender<()>) -> Result<RecommendedWatcher, Error> {
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if ev.is_ok() {
                let _ = tx.send(());
            }
        })
        .map_err(|source| Error::Watch {
            path: self.cert.display().to_string(),
            source,
        })?;
        let mut dirs: Vec<&Path> = Vec::new();
        for f in [&self.cert, &self.key] {
            let dir = f
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !dirs.contains(&dir) {
                watcher
                    .watch(dir, RecursiveMode::NonRecursive)
                    .map_err(|source| Error::Watch {
                        path: dir.display().to_string(),
                        source,
                    })?;
                dirs.push(dir);
            }
        }
        Ok(watcher)
    }
}

/// Completes after a burst of directory events has settled (true), or when the watch is gone
/// (false); never without a watch.
async fn changed(events: &mut Option<mpsc::UnboundedReceiver<()>>) -> bool {
    let Some(rx) = events else {
        return std::future::pending().await;
    };
    if rx.recv().await.is_none() {
        return false;
    }
    // Let the writer (or the symlink swap) finish, then take all events at once.
    tokio::time::sleep(SETTLE).await;
    while rx.try_recv().is_ok() {}
    true
}

/// The files, never the key.
impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for ReloadingCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;
    use std::time::Instant;

    use super::*;
    use crate::testutil::{Logs, TempDir, cert, served_cert};
    use crate::{ALPN_H2_HTTP1, server_config};

    const NAME: &str = "test certificate";

    /// Waits (generously: the machine may be loaded) until `cond` holds.
    async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn served(rc: &Arc<ReloadingCert>) -> rustls_pki_types::CertificateDer<'static> {
        served_cert(Arc::new(
            server_config(Arc::clone(rc), ALPN_H2_HTTP1).expect("config"),
        ))
    }

    /// Points `dir/..data` at `target` atomically, as the kubelet updates a Secret volume.
    fn swap_data(dir: &Path, target: &str) {
        let tmp = dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(target, &tmp).expect("symlink");
        std::fs::rename(&tmp, dir.join("..data")).expect("atomic swap");
    }

    #[test]
    fn reload_swaps_the_certificate_and_keeps_it_on_errors() {
        let dir = TempDir::new("reload");
        let (crt, key) = cert(dir.path(), "a", "first");
        let rc = ReloadingCert::load(&crt, &key).expect("loads");
        let first = rc.current().cert.clone();
        assert!(!rc.reload().expect("same files"), "nothing changed");
        let (crt2, key2) = cert(dir.path(), "b", "second");
        std::fs::copy(&crt2, &crt).expect("copy");
        std::fs::copy(&key2, &key).expect("copy");
        assert!(rc.reload().expect("new files"), "a new certificate");
        assert_ne!(rc.current().cert, first);
        std::fs::write(&crt, "garbage").expect("write");
        assert!(rc.reload().is_err());
        assert_eq!(
            rc.current().cert,
            ReloadingCert::load(&crt2, &key2).expect("b").current().cert
        );
        assert!(server_config(rc, ALPN_H2_HTTP1).is_ok());
    }

    #[test]
    fn bad_files_at_start_are_errors_naming_the_file() {
        let dir = TempDir::new("start");
        let (crt, key) = cert(dir.path(), "a", "first");
        let (_, other_key) = cert(dir.path(), "b", "second");
        let missing = dir.path().join("missing.key");
        let e = ReloadingCert::load(&crt, &missing).unwrap_err();
        assert!(matches!(e, Error::Key { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("{}: I/O error: ", missing.display())),
            "{e}"
        );
        let e = ReloadingCert::load(&dir.path().join("missing.crt"), &key).unwrap_err();
        assert!(e.to_string().contains("missing.crt: I/O error: "), "{e}");
        // A key that is not the certificate's.
        let e = ReloadingCert::load(&crt, &other_key).unwrap_err();
        assert!(matches!(e, Error::Pair { .. }), "{e:?}");
        assert!(e.to_string().starts_with(&format!("{}: ", crt.display())), "{e}");
        let pem = std::fs::read_to_string(&other_key).expect("key");
        let debug = format!("{e:?} {:?}", ReloadingCert::load(&crt, &key).expect("loads"));
        for line in pem.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!debug.contains(line), "{debug}");
        }
    }

    #[tokio::test]
    async fn a_symlink_swap_is_picked_up_by_the_directory_watch() {
        let logs = Logs::capture();
        let dir = TempDir::new("watch");
        let certs = dir.path().join("certs");
        for (v, cn) in [("v1", "one"), ("v2", "two")] {
            std::fs::create_dir_all(certs.join(v)).expect("dir");
            kube_api_rewriter_testkit::self_signed_cert(
                &certs.join(v).join("tls.crt"),
                &certs.join(v).join("tls.key"),
                cn,
            );
        }
        swap_data(&certs, "v1");
        for f in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{f}"), certs.join(f)).expect("symlink");
        }
        let rc = ReloadingCert::load(&certs.join("tls.crt"), &certs.join("tls.key")).expect("loads");
        let first = served(&rc);
        // A poll that never comes: only the watch can see the change.
        let how = Follow {
            name: NAME,
            poll: Duration::from_secs(3600),
            watch_dirs: true,
        };
        let _task = rc.follow(how, pending()).expect("watch");
        swap_data(&certs, "v2");
        wait_for("the new certificate", || served(&rc) != first).await;
        let second = load_certs(&certs.join("v2").join("tls.crt")).expect("v2");
        assert_eq!(served(&rc), second[0]);
        wait_for("the log line", || {
            logs.text().contains("test certificate reloaded")
        })
        .await;
        assert!(
            logs.text().contains(&certs.join("tls.crt").display().to_string()),
            "{}",
            logs.text()
        );
    }

    #[tokio::test]
    async fn a_changed_file_is_picked_up_by_the_poll() {
        let dir = TempDir::new("poll");
        let (crt, key) = cert(dir.path(), "tls", "first");
        let (crt2, key2) = cert(dir.path(), "next", "second");
        let rc = ReloadingCert::load(&crt, &key).expect("loads");
        let first = served(&rc);
        let how = Follow {
            name: NAME,
            poll: Duration::from_millis(50),
            watch_dirs: false,
        };
        let _task = rc.follow(how, pending()).expect("poll");
        // The key first, then the certificate: in between, the pair does not match and the
        // old one stays.
        std::fs::copy(&key2, &key).expect("copy");
        std::fs::copy(&crt2, &crt).expect("copy");
        wait_for("the new certificate", || served(&rc) != first).await;
        assert_eq!(served(&rc), load_certs(&crt2).expect("second")[0]);
    }

    #[tokio::test]
    async fn a_broken_replacement_keeps_the_old_certificate_and_is_logged() {
        let logs = Logs::capture();
        let dir = TempDir::new("broken");
        let (crt, key) = cert(dir.path(), "tls", "first");
        let key_pem = std::fs::read_to_string(&key).expect("key");
        let rc = ReloadingCert::load(&crt, &key).expect("loads");
        let first = served(&rc);
        let how = Follow {
            name: NAME,
            poll: Duration::from_millis(50),
            watch_dirs: true,
        };
        let _task = rc.follow(how, pending()).expect("follow");
        std::fs::write(&crt, "garbage").expect("write");
        wait_for("a failed reload", || {
            logs.text()
                .contains("test certificate reload failed; keeping the current one")
        })
        .await;
        assert_eq!(served(&rc), first);
        // A new certificate with a broken key (a character of it changed): reported without
        // the key's contents.
        let (crt2, _) = cert(dir.path(), "next", "second");
        std::fs::copy(&crt2, &crt).expect("copy");
        let body: Vec<&str> = key_pem.lines().filter(|l| !l.starts_with("-----")).collect();
        std::fs::write(
            &key,
            key_pem.replacen(&body[0][..12], &format!("{}*", &body[0][..11]), 1),
        )
        .expect("write");
        wait_for("the key's failure", || {
            logs.text().contains("not a PEM private key")
        })
        .await;
        assert_eq!(served(&rc), first);
        let text = logs.text();
        for line in &body {
            assert!(!text.contains(&line[..16]), "{text}");
        }
    }

    #[tokio::test]
    async fn following_stops_on_the_callers_signal() {
        let dir = TempDir::new("stop");
        let (crt, key) = cert(dir.path(), "tls", "first");
        let rc = ReloadingCert::load(&crt, &key).expect("loads");
        for watch_dirs in [true, false] {
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let how = Follow {
                name: NAME,
                poll: Duration::from_secs(3600),
                watch_dirs,
            };
            let task = rc
                .follow(how, async move {
                    let _ = stopped.await;
                })
                .expect("follow");
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!task.is_finished());
            let _ = stop.send(());
            // A hang guard, not a timing assertion.
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the task stops")
                .expect("no panic");
        }
    }
}
