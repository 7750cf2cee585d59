//! A plain HTTP/1.1 file server on loopback for the importer to download from: `GET /NAME`
//! serves `DIR/NAME` with its Content-Length. TEST DOUBLE for what a real web server cannot
//! do on demand: `GET /stall/NAME` holds the answer back until [`FileServer::release`] of
//! `NAME`.

use std::collections::HashSet;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

/// The server; it runs until the test process ends.
pub struct FileServer {
    /// The directory it serves.
    pub dir: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    gate: Arc<(Mutex<HashSet<String>>, Condvar)>,
}

impl FileServer {
    /// Serves `dir`.
    pub fn start(dir: PathBuf) -> FileServer {
        std::fs::create_dir_all(&dir).expect("served directory");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let gate = Arc::new((Mutex::new(HashSet::new()), Condvar::new()));
        let (d, g) = (dir.clone(), gate.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (d, g) = (d.clone(), g.clone());
                std::thread::spawn(move || serve(conn, &d, &g));
            }
        });
        FileServer { dir, port, gate }
    }

    /// The URL of `name`.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
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

fn serve(mut conn: TcpStream, dir: &std::path::Path, gate: &(Mutex<HashSet<String>>, Condvar)) {
    let mut reader = BufReader::new(conn.try_clone().expect("dup"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    // The headers are not needed.
    loop {
        let mut h = String::new();
        match reader.read_line(&mut h) {
            Ok(0) | Err(_) => return,
            Ok(_) if h == "\r\n" || h == "\n" => break,
            Ok(_) => {}
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let name = match path.strip_prefix("/stall/") {
        Some(name) => {
            let (open, cv) = gate;
            let mut o = open.lock().unwrap_or_else(PoisonError::into_inner);
            while !o.contains(name) {
                o = cv.wait(o).unwrap_or_else(PoisonError::into_inner);
            }
            name.to_owned()
        }
        None => path.trim_start_matches('/').to_owned(),
    };
    let file = (!name.contains("..")).then(|| dir.join(&name));
    match file.and_then(|f| std::fs::File::open(f).ok()) {
        Some(mut f) => {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
            );
            if conn.write_all(head.as_bytes()).is_ok() {
                let _ = std::io::copy(&mut f, &mut conn);
            }
        }
        None => {
            let _ = conn.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found\n",
            );
        }
    }
}
