//! The page's file and its shared mapping: made safely in the per-user directory, published
//! with the sequence protocol, unlinked at the end.
//!
//! - The directory is made with mode 0700 if missing, then opened with `O_NOFOLLOW |
//!   O_DIRECTORY` (a symbolic link is refused) and must be owned by this user and writable by
//!   nobody else; everything after goes through that descriptor.
//! - Pages this pid left in an earlier image (before an `exec`) or that a dead process with the
//!   same pid left are unlinked first: their writer is gone.
//! - So are the temporaries (`.PID-START.page.new`) a process killed between making its page
//!   and naming it left: this user's regular files (never a link: they are looked at with
//!   `AT_SYMLINK_NOFOLLOW`, and unlinking removes a name, never what it points to) of this pid,
//!   of a pid that no process has now, or older than [`STALE_TEMP_SECS`] (a temporary lives for
//!   microseconds; the age catches a pid taken again since).
//! - The page is written whole into a temporary file (`.PID-START.page.new`, `O_CREAT | O_EXCL |
//!   O_NOFOLLOW`, mode 0600, sized [`PAGE_SIZE`], mapped `MAP_SHARED`), then renamed to its
//!   name, so a reader never finds a page that was never whole.
//! - [`Mapped::publish`] stores an odd sequence number, copies bytes [`CHECKSUM_OFFSET`] to the
//!   end, then stores the next even number (release ordering), as `cuguard_page` describes.
//!
//! The mapping is never unmapped while the process runs (only in a forked child, which never
//! writes to it): unlinking the file at the end leaves it valid, so a last publish racing the
//! removal writes into a file nobody can open any more, never into unmapped memory.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering, fence};

use cuguard_page::{CHECKSUM_OFFSET, PAGE_SIZE, SEQ_OFFSET};

/// A page file's shared mapping, written by one thread (the cuguard thread).
pub struct Mapped {
    base: *mut u8,
    /// The sequence number of the last whole page (even).
    seq: u64,
}

// SAFETY: the mapping is process memory that lives as long as the process (never unmapped while
// it runs); only the thread that owns the `Mapped` writes to it.
unsafe impl Send for Mapped {}

impl Mapped {
    /// The mapping's address (for a forked child to unmap).
    pub fn base(&self) -> usize {
        self.base as usize
    }

    /// Publishes `page` (bytes from [`cuguard_page::encode`]): odd sequence, the bytes from the
    /// checksum on, even sequence.
    pub fn publish(&mut self, page: &[u8; PAGE_SIZE]) {
        // SAFETY: base is a live, page-aligned mapping of PAGE_SIZE bytes (never unmapped while
        // the process runs); SEQ_OFFSET is 8-aligned, and in this process only this thread
        // touches those 8 bytes, always atomically. Readers in other processes only read.
        let seq = unsafe { AtomicU64::from_ptr(self.base.add(SEQ_OFFSET).cast()) };
        seq.store(self.seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        // SAFETY: both ranges are PAGE_SIZE - CHECKSUM_OFFSET bytes inside their buffers, and a
        // mapping never overlaps a heap buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                page.as_ptr().add(CHECKSUM_OFFSET),
                self.base.add(CHECKSUM_OFFSET),
                PAGE_SIZE - CHECKSUM_OFFSET,
            );
        }
        seq.store(self.seq + 2, Ordering::Release);
        self.seq += 2;
    }
}

/// A descriptor closed on drop.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and open.
        unsafe { libc::close(self.0) };
    }
}

fn c_string(bytes: &[u8]) -> Result<CString, String> {
    CString::new(bytes).map_err(|_| "the path holds a NUL byte".to_string())
}

fn os_error(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Opens `dir` (made with mode 0700 if missing) and checks it is safe to put pages in.
fn open_dir(dir: &Path) -> Result<Fd, String> {
    use std::os::unix::fs::DirBuilderExt;
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(format!("cannot create {}: {e}", dir.display()));
    }
    let c = c_string(dir.as_os_str().as_bytes())?;
    // SAFETY: c is NUL-terminated.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
        return Err(if link {
            format!("{} is a symbolic link", dir.display())
        } else {
            format!("cannot open {}: {e}", dir.display())
        });
    }
    let fd = Fd(fd);
    // SAFETY: st is plain data, filled by fstat on our open descriptor.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.0, &mut st) != 0 {
            return Err(os_error(&format!("cannot stat {}", dir.display())));
        }
        st
    };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if st.st_uid != uid {
        return Err(format!(
            "{} belongs to uid {}, not to this user ({uid})",
            dir.display(),
            st.st_uid
        ));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(format!(
            "{} is writable by others (mode {:o})",
            dir.display(),
            st.st_mode & 0o7777
        ));
    }
    Ok(fd)
}

/// Unlinks the pages of `pid` in `dir`: an earlier image of this process (before an `exec`) or a
/// dead process that had this pid left them.
fn remove_stale(dir: &Path, dirfd: &Fd, pid: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some((p, _)) = name.to_str().and_then(cuguard_page::parse_file_name) else {
            continue;
        };
        if p == pid
            && let Ok(c) = c_string(name.as_bytes())
        {
            // SAFETY: c is NUL-terminated; dirfd is open.
            unsafe { libc::unlinkat(dirfd.0, c.as_ptr(), 0) };
        }
    }
}

/// How old a page's temporary must be to be removed whatever its pid (see the module
/// documentation).
pub const STALE_TEMP_SECS: i64 = 600;

/// The pid a page temporary's name (`.PID-START.page.new`) says, if it is one.
fn temp_pid(name: &[u8]) -> Option<u32> {
    let page = std::str::from_utf8(name.strip_prefix(b".")?.strip_suffix(b".new")?).ok()?;
    Some(cuguard_page::parse_file_name(page)?.0)
}

/// Whether a process has `pid` now (a zombie counts: its pid is not free yet).
fn pid_taken(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 checks only; it sends nothing.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Unlinks the page temporaries in `dir` that their writers left (see the module
/// documentation); how many.
fn remove_stale_temps(dir: &Path, dirfd: &Fd, pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let now = crate::process::clock::unix_ms() as i64 / 1000;
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(writer) = temp_pid(name.as_bytes()) else {
            continue;
        };
        let Ok(c) = c_string(name.as_bytes()) else {
            continue;
        };
        // SAFETY: st is plain data filled by fstatat; c is NUL-terminated; dirfd is open. The
        // name is looked at itself, never what it points to.
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstatat(dirfd.0, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) != 0 {
                continue;
            }
            st
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != me {
            continue;
        }
        let old = now - st.st_mtime >= STALE_TEMP_SECS;
        let ours_to_remove = writer == pid || old || !pid_taken(writer);
        if ours_to_remove
            // SAFETY: c is NUL-terminated; dirfd is open; unlinkat removes the name only.
            && unsafe { libc::unlinkat(dirfd.0, c.as_ptr(), 0) } == 0
        {
            removed += 1;
        }
    }
    removed
}

/// Makes the page file `name` in `dir` holding `first` (a whole page), mapped; returns the
/// mapping and the file's path. Nothing is left behind on failure.
pub fn create(
    dir: &Path,
    name: &str,
    pid: u32,
    first: &[u8; PAGE_SIZE],
) -> Result<(Mapped, CString), String> {
    let dirfd = open_dir(dir)?;
    remove_stale(dir, &dirfd, pid);
    remove_stale_temps(dir, &dirfd, pid);
    let tmp = c_string(format!(".{name}.new").as_bytes())?;
    let final_name = c_string(name.as_bytes())?;
    let path = c_string(dir.join(name).as_os_str().as_bytes())?;
    // SAFETY: tmp is NUL-terminated; dirfd is open.
    let fd = unsafe {
        libc::openat(
            dirfd.0,
            tmp.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(os_error(&format!(
            "cannot create a page in {}",
            dir.display()
        )));
    }
    let fd = Fd(fd);
    let undo = |why: String| {
        // SAFETY: tmp is NUL-terminated; dirfd is open.
        unsafe { libc::unlinkat(dirfd.0, tmp.as_ptr(), 0) };
        Err(why)
    };
    // SAFETY: fd is our open file.
    if unsafe { libc::ftruncate(fd.0, PAGE_SIZE as libc::off_t) } != 0 {
        return undo(os_error(&format!(
            "cannot size a page in {}",
            dir.display()
        )));
    }
    // SAFETY: a fresh shared mapping of PAGE_SIZE bytes of our file; nothing else is mapped there.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return undo(os_error(&format!("cannot map a page in {}", dir.display())));
    }
    let base = base.cast::<u8>();
    // SAFETY: base is a fresh mapping of PAGE_SIZE bytes that no one else writes yet (the file
    // has its temporary name).
    unsafe { std::ptr::copy_nonoverlapping(first.as_ptr(), base, PAGE_SIZE) };
    // SAFETY: both names are NUL-terminated; dirfd is open.
    if unsafe { libc::renameat(dirfd.0, tmp.as_ptr(), dirfd.0, final_name.as_ptr()) } != 0 {
        let why = os_error(&format!("cannot name a page in {}", dir.display()));
        // SAFETY: base is our mapping, unused elsewhere.
        unsafe { libc::munmap(base.cast(), PAGE_SIZE) };
        return undo(why);
    }
    let seq = u64::from_le_bytes(
        first[SEQ_OFFSET..SEQ_OFFSET + 8]
            .try_into()
            .expect("8 bytes"),
    );
    Ok((Mapped { base, seq }, path))
}

/// Unlinks the page file at `path`.
pub fn unlink(path: &CString) {
    // SAFETY: path is NUL-terminated.
    unsafe { libc::unlink(path.as_ptr()) };
}

/// Unmaps the page at `base` (in a forked child: the mapping is the parent's page).
pub fn unmap(base: usize) {
    if base != 0 {
        // SAFETY: base is a mapping of PAGE_SIZE bytes made by `create`, which the child's
        // threads (only the forking one exists) do not use.
        unsafe { libc::munmap(base as *mut libc::c_void, PAGE_SIZE) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuguard_page::{Page, decode, encode};

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("cuguard-mapping-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_page_is_made_private_published_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("ok").join("sub");
        let pid = std::process::id();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(dir.join(cuguard_page::file_name(pid, 1)), b"stale").unwrap();
        std::fs::write(dir.join(cuguard_page::file_name(pid + 1, 1)), b"other").unwrap();
        let mut page = Page {
            pid,
            ..Page::default()
        };
        let name = cuguard_page::file_name(pid, 2);
        let (mut m, path) = create(&dir, &name, pid, &encode(&page, 0)).unwrap();
        assert_eq!(path.to_str().unwrap(), dir.join(&name).to_str().unwrap());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mut want = [cuguard_page::file_name(pid + 1, 1), name.clone()];
        want.sort();
        assert_eq!(names, want, "the stale page of this pid is gone");
        let meta = std::fs::metadata(dir.join(&name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), PAGE_SIZE as u64);
        assert_eq!(
            decode(&std::fs::read(dir.join(&name)).unwrap()).unwrap(),
            page
        );
        page.live_allocations = 7;
        m.publish(&encode(&page, 0));
        let bytes = std::fs::read(dir.join(&name)).unwrap();
        assert_eq!(decode(&bytes).unwrap(), page);
        assert_eq!(bytes[SEQ_OFFSET], 2, "even, one publish later");
        unlink(&path);
        assert!(!dir.join(&name).exists());
        m.publish(&encode(&page, 0)); // after the removal: harmless
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn temporaries_left_by_killed_writers_are_removed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("temps");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let pid = std::process::id();
        // A pid no process has: a child's, waited for.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let dead = child.id();
        let temp = |p: u32, start: u64| format!(".{}.new", cuguard_page::file_name(p, start));
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let make = |name: &str, old: bool| {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            if old {
                f.set_modified(hour_ago).unwrap();
            }
        };
        make(&temp(dead, 1), false); // its writer is gone
        make(&temp(pid, 1), false); // an earlier image of this process
        make(&temp(1, 1), true); // pid 1 runs, but this is an hour old: the pid was taken again
        make(&temp(1, 2), false); // pid 1 may be writing it now
        make(".other.new", true); // not a page's temporary
        let target = dir.join("precious");
        std::fs::write(&target, b"x").unwrap();
        std::os::unix::fs::symlink(&target, dir.join(temp(dead, 3))).unwrap();
        let page = encode(&Page::default(), 0);
        let (_, path) = create(&dir, &cuguard_page::file_name(pid, 9), pid, &page).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let mut want = vec![
            temp(1, 2),
            ".other.new".to_string(),
            temp(dead, 3),
            cuguard_page::file_name(pid, 9),
            "precious".to_string(),
        ];
        want.sort();
        assert_eq!(names, want);
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
        unlink(&path);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unsafe_directories_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = scratch("bad");
        std::fs::create_dir_all(&root).unwrap();
        let open = root.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        let file = root.join("file");
        std::fs::write(&file, b"").unwrap();
        let page = encode(&Page::default(), 0);
        let err = |d: &Path| create(d, "1-1.page", 1, &page).err().unwrap();
        assert!(err(&open).contains("writable by others"), "{}", err(&open));
        assert!(err(&link).contains("symbolic link"), "{}", err(&link));
        assert!(
            err(&file.join("x")).contains("cannot create"),
            "{}",
            err(&file.join("x"))
        );
        assert_eq!(
            std::fs::read_dir(&open).unwrap().count(),
            0,
            "nothing left behind"
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
