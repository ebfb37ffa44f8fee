//! A report file's bytes in memory ([`Buffer`]): read into a buffer the thread reuses from file
//! to file, at an address the kernel copies to at full speed.
//!
//! Where the file's bytes land matters as much as how many there are. The kernel's copy from
//! the page cache (`rep movsb`) runs at a third of its speed on some machines when the
//! destination sits 16 bytes past a 64-byte boundary, and that is exactly where glibc puts a
//! large allocation (a page, then its 16-byte header). Measured on the 2-core AMD EPYC machine
//! this project is built on (`scripts/read-alignment.sh`, three rounds), 1,429 MB of reports read
//! into a buffer 16 bytes off: 0.70–0.75 s; at 0, 32, 48 or 64 bytes off: 0.21–0.26 s. So the
//! bytes start at the first 64-byte boundary of the buffer, and the few bytes before it are left
//! unused.

use std::cell::Cell;
use std::io::Read;
use std::ops::Deref;
use std::path::Path;

use super::error::ReadError;
use super::open::{OpenError, open_regular};

/// Where a file's bytes start in memory: a multiple of this.
const ALIGN: usize = 64;

/// A document's bytes: `vec[start..]`.
#[derive(Debug, Default)]
pub(super) struct Buffer {
    vec: Vec<u8>,
    start: usize,
}

impl Buffer {
    /// Bytes already in memory, where they are.
    pub(super) fn from_vec(vec: Vec<u8>) -> Buffer {
        Buffer { vec, start: 0 }
    }

    /// A report file's bytes, refused over `limit` bytes or when the name is not a regular file
    /// ([`open_regular`]: a FIFO never blocks, a device is never read), read into this thread's
    /// spare buffer, from a 64-byte boundary. A file that grows while read is read up to the
    /// size it had when opened.
    pub(super) fn read(path: &Path, limit: u64) -> Result<Buffer, ReadError> {
        let io = |source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let (file, size) = open_regular(path).map_err(|e| match e {
            OpenError::Io(source) => io(source),
            OpenError::NotRegular(what) => ReadError::NotRegular {
                path: path.to_path_buf(),
                what,
            },
        })?;
        if size > limit {
            return Err(ReadError::TooLarge {
                path: path.to_path_buf(),
                size,
                limit,
            });
        }
        let mut vec = SPARE.take();
        vec.clear();
        // Exactly: a buffer grown by doubling would hold up to twice the file.
        vec.reserve_exact(usize::try_from(size).unwrap_or(0).saturating_add(ALIGN));
        let start = vec.as_ptr().align_offset(ALIGN).min(ALIGN);
        vec.resize(start, 0);
        file.take(size).read_to_end(&mut vec).map_err(io)?;
        Ok(Buffer { vec, start })
    }

    /// Gives the memory back to this thread's spare buffer, if it is the largest yet and not
    /// too large; leaves this buffer empty.
    pub(super) fn recycle(&mut self) {
        let vec = std::mem::take(&mut self.vec);
        self.start = 0;
        let spare = SPARE.take();
        let keep = if vec.capacity() > spare.capacity() && vec.capacity() <= SPARE_MAX {
            vec
        } else {
            spare
        };
        SPARE.set(keep);
    }
}

impl Deref for Buffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.vec[self.start..]
    }
}

thread_local! {
    /// A file's buffer that its document is done with, kept for the next file this thread
    /// reads (files are read one after the other: a buffer reused spares the allocator a large
    /// allocation and free per file).
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The largest buffer kept for reuse (16 MiB).
const SPARE_MAX: usize = 16 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_whole_from_a_64_byte_boundary() {
        let dir = std::env::temp_dir().join(format!("cuguard-buffer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.json");
        // Several sizes, each read after the last one's buffer went back to the spare.
        for size in [0usize, 1, 63, 64, 65, 4096, 300_001] {
            let text: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
            std::fs::write(&path, &text).unwrap();
            let mut buffer = Buffer::read(&path, 1 << 20).unwrap();
            assert_eq!(&*buffer, &text[..], "size {size}");
            assert_eq!(buffer.as_ptr() as usize % ALIGN, 0, "size {size}");
            buffer.recycle();
            assert!(buffer.is_empty());
        }
        let e = Buffer::read(&path, 1000).unwrap_err();
        assert!(
            e.to_string().contains("more than the limit of 1000 bytes"),
            "{e}"
        );
        // A device is refused, not read up to the limit.
        let e = Buffer::read(Path::new("/dev/zero"), 1 << 30).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero: not a regular file (a character device)"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
