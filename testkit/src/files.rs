//! A plain HTTP/1.1 server of the files of a directory on 127.0.0.1, for importers to
//! download: `GET /NAME` answers the file with its Content-Length, `GET /redirect/NAME` a 302
//! to `/NAME`, anything else 404. TEST DOUBLE for what a real web server cannot do on demand:
//! `GET /stall/NAME` holds the answer back until [`FileServer::release`] of `NAME`.

use std::collections::HashSet;
use std::io::{BufRead as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

type Gate = Arc<(Mutex<HashSet<String>>, Condvar)>;

/// The server. One thread per connection; it runs until the process ends.
pub struct FileServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The directory it serves.
    pub dir: PathBuf,
    gate: Gate,
}

impl FileServer {
    /// Serves `dir` (created if missing).
    pub fn start(dir: &Path) -> FileServer {
        std::fs::create_dir_all(dir).expect("served directory");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind file server");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let gate: Gate = Arc::new((Mutex::new(HashSet::new()), Condvar::new()));
        let (d, g) = (dir.to_owned(), gate.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (d, g) = (d.clone(), g.clone());
                std::thread::spawn(move || {
                    let _ = serve_file(conn, &d, &g);
                });
            }
        });
        FileServer {
            url,
            dir: dir.to_owned(),
            gate,
        }
    }

    /// The URL of `name` (a path under the directory, or `stall/NAME`).
    pub fn file_url(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }

    /// Stalled downloads of `name` go on, and later ones are not stalled.
    pub fn release(&self, name: &str) {
        let (open, cv) = &*self.gate;
        open.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned());
        cv.notify_all();
    }
}

fn serve_file(mut conn: TcpStream, dir: &Path, gate: &Gate) -> std::io::Result<()> {
    let mut reader = std::io::BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // The headers are not needed.
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let mut name = path.trim_start_matches('/');
    if let Some(target) = name.strip_prefix("redirect/") {
        let head = format!(
            "HTTP/1.1 302 Found\r\nLocation: /{target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        return conn.write_all(head.as_bytes());
    }
    if let Some(target) = name.strip_prefix("stall/") {
        let (open, cv) = &**gate;
        let mut released = open.lock().unwrap_or_else(PoisonError::into_inner);
        while !released.contains(target) {
            released = cv.wait(released).unwrap_or_else(PoisonError::into_inner);
        }
        name = target;
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
