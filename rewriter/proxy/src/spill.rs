//! Output held back until the input proved valid: in memory up to a limit, then in a temporary
//! file, so that a malformed body leaves nothing on stdout and a huge one stays out of memory.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::PathBuf;

const IN_MEMORY: usize = 8 << 20;

pub struct Spill {
    mem: Vec<u8>,
    file: Option<(File, PathBuf)>,
}

impl Spill {
    pub fn new() -> io::Result<Spill> {
        Ok(Spill {
            mem: Vec::new(),
            file: None,
        })
    }

    /// Copies everything to `out`.
    pub fn finish(mut self, out: &mut impl Write) -> io::Result<()> {
        if let Some((f, _)) = &mut self.file {
            f.write_all(&self.mem)?;
            f.flush()?;
            f.seek(SeekFrom::Start(0))?;
            io::copy(f, out)?;
        } else {
            out.write_all(&self.mem)?;
        }
        out.flush()
    }
}

impl Write for Spill {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.mem.extend_from_slice(buf);
        if self.mem.len() > IN_MEMORY {
            if self.file.is_none() {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let path =
                    std::env::temp_dir().join(format!("kube-api-rewriter-{}-{nanos}", std::process::id()));
                let f = File::options()
                    .create_new(true)
                    .read(true)
                    .write(true)
                    .open(&path)?;
                self.file = Some((f, path));
            }
            let (f, _) = self.file.as_mut().expect("set above");
            f.write_all(&self.mem)?;
            self.mem.clear();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        if let Some((_, p)) = &self.file {
            let _ = std::fs::remove_file(p);
        }
    }
}
