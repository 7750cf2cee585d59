//! `virtualization-dvcr upload`: images sent over TLS with curl, cut uploads, retries.

use super::*;

/// A running `virtualization-dvcr upload`.
struct Uploader {
    child: std::process::Child,
    url: String,
    ca: PathBuf,
    tm: PathBuf,
}

impl Uploader {
    fn start(env: &Env, repo: &str) -> Uploader {
        Self::start_with(env, repo, &[])
    }

    fn start_with(env: &Env, repo: &str, extra: &[(&str, &str)]) -> Uploader {
        let work = env.tmp("upload");
        let (ca, ca_key) = make_ca(&work, "upload-ca");
        let (crt, key) = signed_cert(&work, "upload", "upload", Some("IP:127.0.0.1"), &ca, &ca_key);
        let port = free_port();
        let tm = work.join("termination-log");
        let mut c = Command::new(BIN);
        c.arg("upload")
            .env("TERMINATION_MESSAGE_PATH", &tm)
            .env("SCRATCH_DIR", &work)
            .env("UPLOAD_LISTEN_ADDRESS", format!("127.0.0.1:{port}"))
            .env("UPLOAD_CERT_FILE", &crt)
            .env("UPLOAD_KEY_FILE", &key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.join("upload.log")).unwrap());
        for (k, v) in env.dest_registry(repo) {
            c.env(k, v);
        }
        for (k, v) in extra {
            c.env(k, v);
        }
        let child = c.spawn().expect("upload runs");
        let mut u = Uploader {
            child,
            url: format!("https://127.0.0.1:{port}"),
            ca,
            tm,
        };
        let t = Instant::now();
        while u.status(&["-o", "/dev/null", &format!("{}/healthz", u.url)]) != "200" {
            assert!(t.elapsed() < Duration::from_secs(20), "upload server not ready");
            assert!(u.child.try_wait().unwrap().is_none(), "upload server exited");
            std::thread::sleep(Duration::from_millis(100));
        }
        u
    }

    fn curl(&self) -> Command {
        let mut c = Command::new("curl");
        c.args(["-sS", "--cacert", path(&self.ca)]);
        c
    }

    fn status(&self, args: &[&str]) -> String {
        let o = self
            .curl()
            .args(["-w", "%{http_code}"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn wait(mut self) -> (bool, TerminationMessage) {
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                let text = std::fs::read_to_string(&self.tm).unwrap_or_default();
                return (s.success(), serde_json::from_str(text.trim()).unwrap());
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "upload server did not exit"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn upload_over_tls_is_pushed() {
    let env = env();
    let u = Uploader::start(&env, "vi/ns/upload");
    let src = env.dir.join("disk.qcow2");
    let o = u
        .curl()
        .args(["-f", "-T", path(&src), &format!("{}/upload", u.url)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let answered: TerminationMessage = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(answered.format.as_deref(), Some("qcow2"));
    assert_eq!(answered.sha256, Some(sha256_file(&src)));
    let (ok, m) = u.wait();
    assert!(ok);
    assert_eq!(m, answered);
    let disk = env.tmp("uploaded").join("d");
    env.disk_of("vi/ns/upload", &m, &disk);
    assert_eq!(sha256_file(&disk), sha256_file(&src));
}

#[test]
fn cut_upload_is_discarded_and_a_retry_succeeds() {
    let env = env();
    let u = Uploader::start(&env, "vi/ns/retry");
    let src = env.dir.join("disk.raw");
    let len = std::fs::metadata(&src).unwrap().len();
    // Announce twice the bytes, send the file, then hang up.
    let mut cut = u
        .curl()
        .args([
            "-o",
            "/dev/null",
            "-H",
            &format!("Content-Length: {}", 2 * len),
            "--data-binary",
        ])
        .arg(format!("@{}", path(&src)))
        .arg(format!("{}/upload", u.url))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = cut.kill();
    let _ = cut.wait();
    // A second upload while... the cut one is over: the server serves again.
    let t = Instant::now();
    loop {
        let s = u.status(&[
            "-o",
            "/dev/null",
            "-T",
            path(&env.dir.join("page.html")),
            &format!("{}/upload", u.url),
        ]);
        if s == "400" {
            break;
        }
        assert_eq!(
            s, "409",
            "a bad image is answered 400 once the cut upload is discarded"
        );
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        u.status(&["-o", "/dev/null", &format!("{}/healthz", u.url)]),
        "200"
    );
    assert!(env.manifest("vi/ns/retry").is_none());
    let o = u
        .curl()
        .args(["-f", "-T", path(&src), &format!("{}/upload", u.url)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (ok, m) = u.wait();
    assert!(ok);
    assert_eq!(m.format.as_deref(), Some("qcow2"));
    assert_eq!(m.source_format.as_deref(), Some("raw"));
    assert!(env.manifest("vi/ns/retry").is_some());
}

#[test]
fn upload_beyond_the_limit_is_refused() {
    let env = env();
    let u = Uploader::start_with(&env, "vi/ns/too-big", &[("UPLOAD_MAX_SIZE", "100000")]);
    let url = format!("{}/upload", u.url);
    let src = env.dir.join("disk.qcow2");
    assert_eq!(u.status(&["-o", "/dev/null", "-T", path(&src), &url]), "413");
    // Without a Content-Length (chunked), the limit holds while the body streams: the server
    // answers 413 and closes the connection, which curl, still sending, may see as a reset
    // right after the 100 Continue.
    let chunked = [
        "-o",
        "/dev/null",
        "-H",
        "Transfer-Encoding: chunked",
        "-T",
        path(&src),
        url.as_str(),
    ];
    let s = u.status(&chunked);
    assert!(["413", "100", "000"].contains(&s.as_str()), "{s}");
    assert_eq!(
        u.status(&["-o", "/dev/null", &format!("{}/healthz", u.url)]),
        "200"
    );
    assert_eq!(u.status(&["-o", "/dev/null", "-X", "GET", &url]), "405");
    assert!(env.manifest("vi/ns/too-big").is_none());
}
