//! [`Spill`]: output written before what must precede it is known, kept in a temporary file
//! (removed from its directory at once, so nothing is left behind) and copied out afterwards;
//! in memory where no temporary file can be made.

use std::fs::File;
use std::io::{self, BufWriter, Seek, Write};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes written now and copied out later, in order.
pub enum Spill {
    /// In an unlinked temporary file.
    File(BufWriter<File>),
    /// In memory.
    Memory(Vec<u8>),
}

impl Spill {
    /// A new, empty spill: a file under the temporary directory when one can be made.
    pub fn new() -> Spill {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "cuguard-{}-{}.spill",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path);
        match file {
            Ok(file) => {
                // The open handle keeps the file; its name is not needed.
                let _ = std::fs::remove_file(&path);
                Spill::File(BufWriter::with_capacity(1 << 16, file))
            }
            Err(_) => Spill::Memory(Vec::new()),
        }
    }

    /// Copies everything written to `out`.
    pub fn copy_to(self, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Spill::File(w) => {
                let mut file = w.into_inner().map_err(io::IntoInnerError::into_error)?;
                file.rewind()?;
                io::copy(&mut file, out)?;
                Ok(())
            }
            Spill::Memory(bytes) => out.write_all(&bytes),
        }
    }
}

impl Default for Spill {
    fn default() -> Spill {
        Spill::new()
    }
}

impl Write for Spill {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Spill::File(w) => w.write(buf),
            Spill::Memory(v) => v.write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Spill::File(w) => w.write_all(buf),
            Spill::Memory(v) => v.write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Spill::File(w) => w.flush(),
            Spill::Memory(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_back_what_was_written() {
        let mut s = Spill::new();
        for i in 0..10_000 {
            write!(s, "{i},").unwrap();
        }
        let mut out = Vec::new();
        s.copy_to(&mut out).unwrap();
        let want: String = (0..10_000).map(|i| format!("{i},")).collect();
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
