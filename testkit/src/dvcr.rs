//! DVCR for the tests: `scripts/dvcr.sh` (Debian's docker-registry with TLS and htpasswd) as a
//! value that stops the registry when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace;

/// A running registry (see `scripts/dvcr.sh`).
pub struct Dvcr {
    /// The state directory given to `up` (the registry's files are in `DIR/dvcr/`).
    pub dir: PathBuf,
    /// `127.0.0.1:PORT`.
    pub address: String,
    pub username: String,
    pub password: String,
    /// The CA of the registry's serving certificate.
    pub ca_file: PathBuf,
    /// A `.dockerconfigjson` file with the credentials.
    pub auth_file: PathBuf,
}

impl Dvcr {
    /// Starts the registry with its state in `dir/dvcr/`; panics with the script's output if
    /// it fails.
    pub fn up(dir: &Path) -> Dvcr {
        let o = Command::new(workspace().join("scripts/dvcr.sh"))
            .arg("up")
            .arg(dir)
            .output()
            .expect("scripts/dvcr.sh runs");
        assert!(
            o.status.success(),
            "scripts/dvcr.sh up failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let env = std::fs::read_to_string(dir.join("dvcr/env")).expect("dvcr env file");
        let get = |name: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_owned())
                .unwrap_or_else(|| panic!("{name} missing from {}/dvcr/env", dir.display()))
        };
        Dvcr {
            dir: dir.to_owned(),
            address: get("DVCR_ADDRESS"),
            username: get("DVCR_USERNAME"),
            password: get("DVCR_PASSWORD"),
            ca_file: PathBuf::from(get("DVCR_CA_FILE")),
            auth_file: PathBuf::from(get("DVCR_AUTH_FILE")),
        }
    }

    /// `https://ADDRESS`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }
}

impl Drop for Dvcr {
    fn drop(&mut self) {
        let _ = Command::new(workspace().join("scripts/dvcr.sh"))
            .arg("down")
            .arg(&self.dir)
            .output();
    }
}

/// A plain HTTP/1.1 server of the files of a directory on 127.0.0.1, for importers to
/// download: `GET /NAME` answers the file with its Content-Length, `GET /redirect/NAME` a 302 to
/// `/NAME`, anything else 404. One thread per connection; it runs until the process ends.
pub struct FileServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl FileServer {
    pub fn start(dir: &Path) -> FileServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind file server");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let dir = dir.to_owned();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let _ = serve_file(conn, &dir);
                });
            }
        });
        FileServer { url }
    }
}

fn serve_file(mut conn: std::net::TcpStream, dir: &Path) -> std::io::Result<()> {
    use std::io::{BufRead as _, Write as _};
    let mut reader = std::io::BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let name = path.trim_start_matches('/');
    if let Some(target) = name.strip_prefix("redirect/") {
        let head = format!(
            "HTTP/1.1 302 Found\r\nLocation: /{target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        return conn.write_all(head.as_bytes());
    }
    let file = (!name.is_empty() && !name.contains(".."))
        .then(|| std::fs::File::open(dir.join(name)).ok())
        .flatten();
    let Some(mut file) = file else {
        let body = "<html><body>404 Not Found</body></html>\n";
        let head = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return conn.write_all(head.as_bytes());
    };
    let len = file.metadata()?.len();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    conn.write_all(head.as_bytes())?;
    std::io::copy(&mut file, &mut conn)?;
    conn.flush()
}
