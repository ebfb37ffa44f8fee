//! Files on a shared machine: the one way cuguard (the shim and the command alike) creates,
//! replaces and appends a file it writes for a user, so that another local user's link, file or
//! guessed name can neither redirect the write nor stop it.
//!
//! - [`replace`] writes a whole file: to a temporary file in the target's directory, with an
//!   unpredictable name ([`temp_path`]) opened `O_CREAT | O_EXCL | O_NOFOLLOW` with mode 0600 (or
//!   the mode asked for), then renamed into place. What is at the destination is judged first
//!   ([`check_destination`]): a link, a file of another user, or anything but a regular file is
//!   refused with an error that says so. It is never followed nor replaced.
//! - [`append`] opens a file to add lines to (alerts): without following a link, refusing a file
//!   of another user or one that is not a regular file, creating it 0600.
//! - [`temp_path`] makes names that fit: a destination name of up to 255 bytes still gets a
//!   temporary name within the file system's 255-byte limit, shortened rather than failing.
//! - [`private_dir`] makes or checks a per-user directory that no one else can own or fill.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("cuguard-files-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let out = dir.join("view.html");
//! cuguard_files::replace(&out, 0o600, |f| std::io::Write::write_all(f, b"<html>")).unwrap();
//! assert_eq!(std::fs::read(&out).unwrap(), b"<html>");
//! std::os::unix::fs::symlink("/etc/passwd", dir.join("link.html")).unwrap();
//! let refused = cuguard_files::replace(&dir.join("link.html"), 0o600, |_| Ok(())).unwrap_err();
//! assert!(refused.to_string().contains("is a symbolic link"));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! Everything here works on paths and file descriptors with plain system calls; nothing
//! allocates except the path buffers, so the shim's report writer can use it.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The longest file name most Linux file systems take, in bytes.
pub const NAME_MAX: usize = 255;

/// Writes a whole file at `path` with mode `mode`: `fill` writes the contents into a fresh
/// temporary file beside it, which is then synced and renamed over `path`.
///
/// Refused, with an error that names why, when `path` is a symbolic link, a file of another
/// user, or not a regular file ([`check_destination`]). The temporary file is removed on any
/// failure.
pub fn replace(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    check_destination(path)?;
    let (mut file, temp) = create_temp(path, mode)?;
    let result = (|| {
        fill(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        drop(file);
        // Judged again just before the rename: the window left is the rename itself, and a
        // rename replaces a name, never writes through it.
        check_destination(path)?;
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// [`replace`] with bytes already in hand.
pub fn replace_with(path: &Path, mode: u32, contents: &[u8]) -> io::Result<()> {
    replace(path, mode, |f| f.write_all(contents))
}

/// Whether a file may be put at `path`: nothing is there, or a regular file of this user.
/// A symbolic link, another user's file, a directory, a FIFO or a device is an error that says
/// which (kind `AlreadyExists` for a link, `PermissionDenied` for another user's file,
/// `InvalidInput` otherwise).
pub fn check_destination(path: &Path) -> io::Result<()> {
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "names a directory; give a file name",
        ));
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) => judge(&m),
    }
}

fn judge(m: &std::fs::Metadata) -> io::Result<()> {
    let kind = m.file_type();
    if kind.is_symlink() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "is a symbolic link; cuguard never writes through a link (remove it, or give the \
             path it points to)",
        ));
    }
    if kind.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a directory; give a file name",
        ));
    }
    if !kind.is_file() {
        return Err(not_regular());
    }
    let me = euid();
    if m.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "belongs to another user (uid {}); cuguard does not replace another user's file",
                m.uid()
            ),
        ));
    }
    Ok(())
}

fn not_regular() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "is not a regular file (a FIFO, socket or device); not written",
    )
}

/// Opens `path` to append to: created with mode 0600 if it is not there, never through a link,
/// and refused if it is another user's file or not a regular file (the same words as
/// [`check_destination`]).
pub fn append(path: &Path) -> io::Result<File> {
    let c = cstring(path)?;
    // SAFETY: c is NUL-terminated; the flags never follow a link at the last component and never
    // block on a FIFO.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY
                | libc::O_APPEND
                | libc::O_CREAT
                | libc::O_NOFOLLOW
                | libc::O_NONBLOCK
                | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        // A link gives ELOOP, or EACCES in a sticky directory where another user owns the link:
        // either way it is said as a link.
        let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        if link || e.raw_os_error() == Some(libc::ELOOP) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "is a symbolic link; cuguard never writes through a link (remove it, or give the \
                 path it points to)",
            ));
        }
        if e.raw_os_error() == Some(libc::ENXIO) {
            // A FIFO without a reader (or a socket): opening for writing without blocking fails.
            return Err(not_regular());
        }
        return Err(e);
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    judge(&file.metadata()?)?;
    // Writes block again once the file is known to be a regular file.
    // SAFETY: fd is open; F_SETFL takes the new flags.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_WRONLY | libc::O_APPEND) };
    Ok(file)
}

/// Creates a fresh temporary file beside `path` ([`temp_path`]), `O_EXCL | O_NOFOLLOW`, with
/// mode `mode`; the file and its path. A name taken meanwhile is tried again with another.
pub fn create_temp(path: &Path, mode: u32) -> io::Result<(File, PathBuf)> {
    let mut last = None;
    for _ in 0..16 {
        let temp = temp_path(path, random())?;
        match create_new(&temp, mode) {
            Ok(f) => return Ok((f, temp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary name could be made")))
}

/// Creates the file `path`, which must not exist (a link there is not followed: the call fails),
/// with mode `mode`.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let c = cstring(path)?;
    // SAFETY: c is NUL-terminated; the flags create a new file and never follow a link.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // The mode asked for, whatever the umask: 0600 stays 0600, and a wider report mode
    // (CUGUARD_REPORT_MODE) is what the user asked for.
    // SAFETY: fd is open and ours.
    unsafe { libc::fchmod(fd, mode as libc::mode_t) };
    // SAFETY: fd was just opened and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The temporary name for writing `path`: `.NAME.TAG.tmp` in the same directory, TAG sixteen hex
/// digits of `tag`, NAME shortened (at a character boundary where it is UTF-8) so that the whole
/// name stays within [`NAME_MAX`] bytes.
pub fn temp_path(path: &Path, tag: u64) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok(dir.join(temp_name(name, tag)))
}

/// The file name part of [`temp_path`].
pub fn temp_name(name: &OsStr, tag: u64) -> OsString {
    let suffix = format!(".{tag:016x}.tmp");
    let room = NAME_MAX - 1 - suffix.len();
    let mut out = vec![b'.'];
    out.extend_from_slice(shorten(name.as_bytes(), room));
    out.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(out)
}

/// `name` cut to at most `room` bytes, at a character boundary where it is UTF-8.
pub fn shorten(name: &[u8], room: usize) -> &[u8] {
    if name.len() <= room {
        return name;
    }
    let mut end = room;
    if let Ok(s) = std::str::from_utf8(name) {
        while !s.is_char_boundary(end) {
            end -= 1;
        }
    }
    &name[..end]
}

/// Whether `name` looks like one of [`temp_name`]'s names for `dest` (`.DEST.<16 hex>.tmp`,
/// DEST shortened as there): what a writer killed before its rename leaves behind.
pub fn is_temp_of(name: &OsStr, dest: &OsStr) -> bool {
    let b = name.as_bytes();
    let Some(rest) = b.strip_prefix(b".") else {
        return false;
    };
    let Some(rest) = rest.strip_suffix(b".tmp") else {
        return false;
    };
    if rest.len() < 17 || rest[rest.len() - 17] != b'.' {
        return false;
    }
    let (stem, tag) = rest.split_at(rest.len() - 17);
    tag[1..].iter().all(u8::is_ascii_hexdigit)
        && stem == shorten(dest.as_bytes(), NAME_MAX - 1 - 21)
}

/// Removes this user's temporary files of [`temp_name`]'s shape for `dest` that are older than
/// `age` (writers killed before their rename); how many it removed. Never follows a link and
/// never touches another user's file.
pub fn clean_stale_temps(dest: &Path, age: std::time::Duration) -> usize {
    let (Some(name), dir) = (
        dest.file_name(),
        dest.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    ) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    let me = euid();
    let mut removed = 0;
    for e in entries.flatten() {
        if !is_temp_of(&e.file_name(), name) {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        let old = m
            .modified()
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|d| d >= age);
        if m.file_type().is_file() && m.uid() == me && old && std::fs::remove_file(e.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// How [`private_dir`] found or made a per-user directory.
#[derive(Debug, PartialEq, Eq)]
pub enum Private {
    /// The directory asked for, this user's and closed to others.
    Asked(PathBuf),
    /// The directory asked for could not be used (why): a fresh private one with a random name
    /// was made instead, which the caller should say in one line.
    Fresh { path: PathBuf, why: String },
}

impl Private {
    /// The directory to use.
    pub fn path(&self) -> &Path {
        match self {
            Private::Asked(p) | Private::Fresh { path: p, .. } => p,
        }
    }
}

/// A per-user directory at `path` that no other user can own, fill or redirect: made 0700 if it
/// is not there; used if it is a real directory (not a link) of this user that no one else can
/// write to. Otherwise (another user made it first, or it is a link or a file) a fresh one
/// beside it, `PATH.XXXXXXXX` with a random tag: one an earlier call made, if there is one this
/// user's and closed to others ([`fresh_dirs`]), else a new one, 0700; the reason is returned
/// with it.
pub fn private_dir(path: &Path) -> io::Result<Private> {
    match usable_private(path) {
        Ok(()) => Ok(Private::Asked(path.to_path_buf())),
        Err(why) => {
            if let Some(earlier) = fresh_dirs(path).into_iter().next() {
                return Ok(Private::Fresh {
                    path: earlier,
                    why: format!("{} {why}", path.display()),
                });
            }
            let mut name = path.as_os_str().to_os_string();
            for _ in 0..16 {
                let mut fresh = name.clone();
                fresh.push(format!(".{:08x}", random() as u32));
                let fresh = PathBuf::from(fresh);
                match std::fs::DirBuilder::new().mode_private().create(&fresh) {
                    Ok(()) => {
                        return Ok(Private::Fresh {
                            path: fresh,
                            why: format!("{} {why}", path.display()),
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
            name.push(": no fresh name could be made");
            Err(io::Error::other(name.to_string_lossy().into_owned()))
        }
    }
}

/// The fresh directories [`private_dir`] made for `path` (`PATH.XXXXXXXX`, eight hexadecimal
/// digits) that are there now, this user's and closed to others (what [`private_dir`] asks of
/// a directory), oldest first: where a reader finds what a writer put in one.
pub fn fresh_dirs(path: &Path) -> Vec<PathBuf> {
    let (Some(name), Some(dir)) = (path.file_name(), path.parent()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.as_bytes();
            n.len() == name.len() + 9
                && n.starts_with(name.as_bytes())
                && n[name.len()] == b'.'
                && n[name.len() + 1..]
                    .iter()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        })
        .filter_map(|e| {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).ok()?;
            let closed = m.is_dir() && m.uid() == euid() && m.mode() & 0o022 == 0;
            closed.then(|| (m.modified().unwrap_or(std::time::UNIX_EPOCH), p))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// Whether `path` is (or has just been made) a directory this user alone owns and can write.
fn usable_private(path: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode_private().create(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot be made ({e})")),
    }
    let m = std::fs::symlink_metadata(path).map_err(|e| format!("cannot be read ({e})"))?;
    if m.file_type().is_symlink() {
        return Err("is a symbolic link".into());
    }
    if !m.is_dir() {
        return Err("is not a directory".into());
    }
    if m.uid() != euid() {
        return Err(format!("belongs to another user (uid {})", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!(
            "can be written by other users (mode {:o})",
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

trait PrivateMode {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateMode for std::fs::DirBuilder {
    fn mode_private(&mut self) -> &mut Self {
        use std::os::unix::fs::DirBuilderExt;
        self.mode(0o700)
    }
}

/// 64 unpredictable bits: the kernel's random numbers (`getrandom`, never blocking), or where
/// that fails, the clocks, the process id and an address mixed together. Async-signal-safe.
pub fn random() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: buf is writable for its length; GRND_NONBLOCK never blocks.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getrandom,
            buf.as_mut_ptr(),
            buf.len(),
            libc::GRND_NONBLOCK,
        )
    };
    if n == 8 {
        return u64::from_ne_bytes(buf);
    }
    // SAFETY: an all-zero timespec is a valid out-parameter; clock_gettime and getpid have no
    // preconditions and are async-signal-safe.
    let (t, pid) = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        (
            (ts.tv_sec as u64).wrapping_mul(1_000_000_007) ^ ts.tv_nsec as u64,
            libc::getpid() as u64,
        )
    };
    splitmix(t ^ pid.rotate_left(32) ^ (&buf as *const _ as u64))
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path contains a NUL byte"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(test: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cuguard-files-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replaces_atomically_0600_and_leaves_no_temporary() {
        let d = dir("replace");
        let p = d.join("out.html");
        replace_with(&p, 0o600, b"one").unwrap();
        replace_with(&p, 0o600, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["out.html"]);
        // A failing fill leaves nothing behind and the old file as it was.
        let e = replace(&p, 0o600, |_| Err(io::Error::other("full"))).unwrap_err();
        assert_eq!(e.to_string(), "full");
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_directories_and_fifos_are_refused() {
        let d = dir("refuse");
        let target = d.join("theirs");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, d.join("link")).unwrap();
        let e = replace_with(&d.join("link"), 0o600, b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().starts_with("is a symbolic link"), "{e}");
        let e = append(&d.join("link")).unwrap_err();
        assert!(e.to_string().starts_with("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        let e = replace_with(&d, 0o600, b"x").unwrap_err();
        assert!(e.to_string().starts_with("is a directory"), "{e}");
        let mut slash = d.as_os_str().to_owned();
        slash.push("/");
        let e = replace_with(Path::new(&slash), 0o600, b"x").unwrap_err();
        assert!(e.to_string().starts_with("names a directory"), "{e}");
        let fifo = d.join("fifo");
        let c = cstring(&fifo).unwrap();
        // SAFETY: c is NUL-terminated.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = append(&fifo).unwrap_err();
        assert!(e.to_string().starts_with("is not a regular file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn append_creates_0600_and_adds() {
        let d = dir("append");
        let p = d.join("alerts.jsonl");
        append(&p).unwrap().write_all(b"a\n").unwrap();
        append(&p).unwrap().write_all(b"b\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"a\nb\n");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn long_names_get_temporary_names_that_fit() {
        let d = dir("long");
        for len in [1, 200, 238, 240, 250, 255] {
            let name = "é".repeat(len / 2) + &"x".repeat(len % 2);
            assert_eq!(name.len(), len);
            let p = d.join(&name);
            let t = temp_path(&p, random()).unwrap();
            let tn = t.file_name().unwrap();
            assert!(tn.len() <= NAME_MAX, "{len}: {}", tn.len());
            assert!(std::str::from_utf8(tn.as_bytes()).is_ok(), "{len}");
            assert!(is_temp_of(tn, p.file_name().unwrap()), "{len}");
            replace_with(&p, 0o600, b"ok").unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), b"ok");
        }
        assert!(!is_temp_of(OsStr::new(".a.tmp"), OsStr::new("a")));
        assert!(!is_temp_of(
            OsStr::new(".b.0123456789abcdef.tmp"),
            OsStr::new("a")
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn temporary_names_are_not_predictable() {
        let p = Path::new("/x/out.json");
        let a = temp_path(p, random()).unwrap();
        let b = temp_path(p, random()).unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with("/x"));
    }

    #[test]
    fn stale_temporaries_are_cleaned_fresh_ones_kept() {
        let d = dir("stale");
        let p = d.join("r.json");
        let old = temp_path(&p, 1).unwrap();
        let new = temp_path(&p, 2).unwrap();
        std::fs::write(&old, b"").unwrap();
        std::fs::write(&new, b"").unwrap();
        std::fs::write(d.join(".other.0000000000000001.tmp"), b"").unwrap();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        assert_eq!(
            clean_stale_temps(&p, std::time::Duration::from_secs(600)),
            1
        );
        assert!(!old.exists());
        assert!(new.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn private_dirs_are_made_or_replaced_by_fresh_ones() {
        let d = dir("private");
        let p = d.join("cuguard-python-7");
        assert_eq!(private_dir(&p).unwrap(), Private::Asked(p.clone()));
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(private_dir(&p).unwrap(), Private::Asked(p.clone()));
        // Open to others: not used; a fresh one instead, with the reason.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
        let fresh = private_dir(&p).unwrap();
        let Private::Fresh { path, why } = &fresh else {
            panic!("{fresh:?}")
        };
        assert!(
            why.ends_with("can be written by other users (mode 777)"),
            "{why}"
        );
        assert_eq!(
            std::fs::metadata(path).unwrap().permissions().mode() & 0o777,
            0o700
        );
        // Asked again: the fresh one made before, not one more.
        assert_eq!(private_dir(&p).unwrap(), fresh);
        assert_eq!(fresh_dirs(&p), std::slice::from_ref(path));
        // A fresh one opened to others is not used again.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(fresh_dirs(&p).is_empty());
        let again = private_dir(&p).unwrap();
        assert_ne!(again.path(), path);
        assert_eq!(fresh_dirs(&p), [again.path().to_path_buf()]);
        // A link: not used.
        let link = d.join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(
            matches!(private_dir(&link).unwrap(), Private::Fresh { why, .. } if why.ends_with("is a symbolic link"))
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
