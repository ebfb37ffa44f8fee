//! Opening a file that a report, a history or another process named ([`open_regular`]): what
//! is at the name is read only if it is a regular file, and only as much of it as it held
//! when opened.
//!
//! A name can stand for anything: a FIFO, whose `open` waits for a writer that never comes
//! and whose reads wait for bytes; `/dev/zero`, which never ends; a terminal. So the file is
//! opened `O_NONBLOCK | O_NOCTTY | O_CLOEXEC` (a FIFO's `open` returns at once, a terminal
//! never becomes the process's own), and judged by `fstat` on the descriptor opened, never
//! by the name (which may be replaced between a look and the `open`). Anything but a regular
//! file is refused ([`OpenError::NotRegular`], which says what it was). The size `fstat`
//! gave bounds what the caller reads: a file that grows meanwhile is read up to that size.
//!
//! A link is followed: reading through it gives nothing the user could not read by the name
//! it points to, and the names that are links by design (`libcuda.so.1`, a debug directory's
//! `.build-id/xx/yyyy.debug`) must be read. What is at its end is judged, as any file.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a name that should be a regular file turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotRegular {
    Directory,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
    /// A kind `fstat` gave that none of the above is.
    Other,
}

impl fmt::Display for NotRegular {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotRegular::Directory => "a directory",
            NotRegular::Fifo => "a FIFO",
            NotRegular::CharDevice => "a character device",
            NotRegular::BlockDevice => "a block device",
            NotRegular::Socket => "a socket",
            NotRegular::Other => "not a file",
        })
    }
}

/// Why [`open_regular`] gave no file.
#[derive(Debug)]
pub enum OpenError {
    /// The operating system refused the `open` or the `fstat`.
    Io(io::Error),
    /// The name is not a regular file: what it is.
    NotRegular(NotRegular),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Io(e) => e.fmt(f),
            OpenError::NotRegular(what) => write!(f, "not a regular file ({what})"),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Io(e) => Some(e),
            OpenError::NotRegular(_) => None,
        }
    }
}

/// Opens `path` to read, without blocking, and returns it with its size at that moment; or
/// refuses it when it is not a regular file (see the module's documentation). Read at most
/// the size returned (`Read::take`, a map of that length).
///
/// ```
/// use cuguard_format::read::{NotRegular, OpenError, open_regular};
/// let refused = open_regular(std::path::Path::new("/dev/null")).unwrap_err();
/// assert!(matches!(refused, OpenError::NotRegular(NotRegular::CharDevice)));
/// assert_eq!(refused.to_string(), "not a regular file (a character device)");
/// ```
pub fn open_regular(path: &Path) -> Result<(File, u64), OpenError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        // std adds O_CLOEXEC itself.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(OpenError::Io)?;
    let meta = file.metadata().map_err(OpenError::Io)?;
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok((file, meta.len()));
    }
    Err(OpenError::NotRegular(if kind.is_dir() {
        NotRegular::Directory
    } else if kind.is_fifo() {
        NotRegular::Fifo
    } else if kind.is_char_device() {
        NotRegular::CharDevice
    } else if kind.is_block_device() {
        NotRegular::BlockDevice
    } else if kind.is_socket() {
        NotRegular::Socket
    } else {
        NotRegular::Other
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_fifo_and_devices_are_refused_at_once_and_a_file_is_read_to_its_size_at_open() {
        let dir = std::env::temp_dir().join(format!("cuguard-open-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: c is a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let kind = |p: &Path| match open_regular(p) {
            Err(OpenError::NotRegular(k)) => Some(k),
            _ => None,
        };
        // Without O_NONBLOCK, this open would wait for a writer forever.
        assert_eq!(kind(&fifo), Some(NotRegular::Fifo));
        assert_eq!(kind(Path::new("/dev/zero")), Some(NotRegular::CharDevice));
        assert_eq!(kind(&dir), Some(NotRegular::Directory));
        assert!(matches!(
            open_regular(&dir.join("missing")),
            Err(OpenError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
        // A link is followed, and what it points to judged.
        std::os::unix::fs::symlink(&fifo, dir.join("link")).unwrap();
        assert_eq!(kind(&dir.join("link")), Some(NotRegular::Fifo));

        let path = dir.join("grows");
        std::fs::write(&path, b"0123456789").unwrap();
        let (file, size) = open_regular(&path).unwrap();
        assert_eq!(size, 10);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"more"))
            .unwrap();
        let mut read = Vec::new();
        file.take(size).read_to_end(&mut read).unwrap();
        assert_eq!(read, b"0123456789");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
