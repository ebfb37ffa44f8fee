//! [`Spill`]: output written before what must precede it is known, kept in a temporary file
//! (removed from its directory at once, so nothing is left behind) and copied out afterwards;
//! in memory where no temporary file can be made. A spill written to the end becomes a [`Log`],
//! read back from its start as often as needed (the records of [`crate::record`]).

use std::fs::File;
use std::io::{self, BufRead, BufWriter, Read, Seek, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes written now and copied out later, in order.
#[derive(Debug)]
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

impl Spill {
    /// Ends writing: what was written, to read back.
    pub fn into_log(self) -> io::Result<Log> {
        match self {
            Spill::File(w) => {
                let file = w.into_inner().map_err(io::IntoInnerError::into_error)?;
                let len = file.metadata()?.len();
                Ok(Log::File(file, len))
            }
            Spill::Memory(bytes) => Ok(Log::Memory(bytes)),
        }
    }
}

/// What a [`Spill`] was given, read back with [`Log::reader`], from the start, any number of
/// times.
#[derive(Debug)]
pub enum Log {
    /// In an unlinked temporary file, of this length.
    File(File, u64),
    /// In memory.
    Memory(Vec<u8>),
}

impl Default for Log {
    fn default() -> Log {
        Log::Memory(Vec::new())
    }
}

impl Log {
    /// A reader from the start (buffered; readers do not disturb one another).
    pub fn reader(&self) -> LogReader<'_> {
        self.reader_at(0)
    }

    /// A reader from byte `at`.
    pub fn reader_at(&self, at: u64) -> LogReader<'_> {
        LogReader {
            log: self,
            at,
            buf: Vec::new(),
            pos: 0,
        }
    }
}

/// Reads a [`Log`] from its start.
#[derive(Debug)]
pub struct LogReader<'a> {
    log: &'a Log,
    /// Where the next read of the file starts.
    at: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for LogReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let have = self.fill_buf()?;
            let n = have.len().min(out.len());
            out[..n].copy_from_slice(&have[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for LogReader<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self.log {
            Log::Memory(bytes) => Ok(&bytes[(self.at as usize).min(bytes.len())..]),
            Log::File(file, len) => {
                if self.pos == self.buf.len() && self.at < *len {
                    let want = (*len - self.at).min(1 << 16) as usize;
                    self.buf.resize(want, 0);
                    file.read_exact_at(&mut self.buf, self.at)?;
                    self.at += want as u64;
                    self.pos = 0;
                }
                Ok(&self.buf[self.pos..])
            }
        }
    }

    fn consume(&mut self, n: usize) {
        match self.log {
            Log::Memory(_) => self.at += n as u64,
            Log::File(..) => self.pos = (self.pos + n).min(self.buf.len()),
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

    #[test]
    fn a_log_reads_back_from_its_start_each_time() {
        let want: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        for mut spill in [Spill::new(), Spill::Memory(Vec::new())] {
            spill.write_all(&want).unwrap();
            let log = spill.into_log().unwrap();
            for _ in 0..2 {
                let mut got = Vec::new();
                log.reader().read_to_end(&mut got).unwrap();
                assert_eq!(got, want);
            }
        }
        let mut none = Vec::new();
        Log::default().reader().read_to_end(&mut none).unwrap();
        assert!(none.is_empty());
    }
}
