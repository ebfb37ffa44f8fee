//! [`Reader`]: this user's stats pages in the runtime directory, read and checked, each bad page
//! said once, the pages of ended processes removed.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cuguard_page::{Page, PageError, RuntimeDir};

use super::process::{self, Liveness};

/// How many times a page caught mid-write is read before it is given up for this scan.
const READS: u32 = 5;

/// How much later than its page's last update a process may seem to have started and still be
/// the page's writer: the error of the start time read from `/proc` (a clock tick, and the
/// drift between the real-time and boot-time clocks since it started).
pub const START_TOLERANCE_MS: u64 = 2_000;

/// One process under the shim, as its page says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveProcess {
    /// The page file.
    pub path: PathBuf,
    /// What it holds.
    pub page: Page,
}

/// What one look at the directory found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// The processes whose pages could be read, by pid (then start).
    pub processes: Vec<LiveProcess>,
    /// Pages skipped for the first time (or for a new reason), one line each, to show the user.
    pub notes: Vec<String>,
    /// Pages of ended processes this look removed.
    pub removed: usize,
    /// Whether the directory did not exist (no process under the shim has run as this user
    /// since it was last cleaned).
    pub no_directory: bool,
}

/// The page directory could not be listed.
#[derive(Debug)]
pub struct ScanError {
    /// The directory.
    pub dir: PathBuf,
    /// The operating system's error.
    pub source: io::Error,
}

impl fmt::Display for ScanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reading the page directory {}: {}",
            crate::wording::one_line(&self.dir.display().to_string()),
            self.source
        )
    }
}

impl std::error::Error for ScanError {}

/// Reads the pages in a user's page directory, again and again (`cuguard top` refreshes,
/// `cuguard exporter` is scraped), remembering which bad pages it has already said.
///
/// Which directories: one ([`Reader::new`]: `--dir`, `CUGUARD_RUNTIME_DIR`,
/// `$XDG_RUNTIME_DIR/cuguard`), or for the shared `/tmp/cuguard-UID`
/// ([`cuguard_page::RuntimeDir::Shared`], [`Reader::of`]) that one when it is this user's and
/// closed to others, and every fresh private `/tmp/cuguard-UID.XXXXXXXX` of this user's, where
/// the shim puts its page when another user took the shared name
/// ([`cuguard_files::fresh_dirs`]); looked for again at each scan. A shared directory that is
/// not this user's (or is a link, or open to others) is not read, and said once.
///
/// What it trusts, and what it does (see also [`Reader::scan`]):
/// - only files named `PID-STARTMS.page` ([`cuguard_page::parse_file_name`]); anything else in
///   the directory is left alone, unread;
/// - only regular files owned by the user it runs as, opened without following symbolic links:
///   another user's page is never read, whatever directory it is found in;
/// - a page whose process has ended (no such pid, or a zombie) is removed unread;
/// - a page whose pid now belongs to another process (one that started more than
///   [`START_TOLERANCE_MS`] after the page was last written, and after the start its name
///   says) is removed too;
/// - a page that does not decode (truncated, zeroed, of a newer layout, garbage, or caught
///   mid-write [`READS`] times running) is skipped and said once, not at every look.
#[derive(Debug)]
pub struct Reader {
    dirs: Dirs,
    euid: u32,
    /// The bad pages (and refused directories) already said, by path, with what was said.
    said: HashMap<PathBuf, String>,
}

/// The directories a [`Reader`] reads.
#[derive(Debug)]
enum Dirs {
    /// This one.
    One(PathBuf),
    /// The shared one, when it is this user's, and the fresh private ones beside it.
    Shared(PathBuf),
}

impl Reader {
    /// A reader of the pages in `dir`.
    pub fn new(dir: PathBuf) -> Reader {
        Reader::with(Dirs::One(dir))
    }

    /// A reader of the pages where the shim puts them for `dir` (see [`Reader`]).
    pub fn of(dir: RuntimeDir) -> Reader {
        Reader::with(match dir {
            RuntimeDir::Given(dir) => Dirs::One(dir),
            RuntimeDir::Shared(dir) => Dirs::Shared(dir),
        })
    }

    fn with(dirs: Dirs) -> Reader {
        Reader {
            dirs,
            // SAFETY: geteuid has no preconditions and cannot fail.
            euid: unsafe { libc::geteuid() },
            said: HashMap::new(),
        }
    }

    /// The directory it reads (the shared one asked for, for [`Reader::of`] a shared one).
    pub fn dir(&self) -> &Path {
        match &self.dirs {
            Dirs::One(dir) | Dirs::Shared(dir) => dir,
        }
    }

    /// Looks at the directories once: every page of a running process of this user, decoded;
    /// the pages of ended processes removed; new problems as [`Scan::notes`]. A missing
    /// directory is no error (no processes); one that cannot be listed is.
    pub fn scan(&mut self) -> Result<Scan, ScanError> {
        let mut scan = Scan::default();
        let mut seen = Vec::new();
        let dirs = match &self.dirs {
            Dirs::One(dir) => vec![dir.clone()],
            Dirs::Shared(asked) => {
                let asked = asked.clone();
                let mut dirs = Vec::new();
                match self.closed(&asked) {
                    Ok(true) => dirs.push(asked.clone()),
                    Ok(false) => {}
                    Err(why) => {
                        seen.push(asked.clone());
                        if self.said.get(&asked) != Some(&why) {
                            let shown = crate::wording::one_line(&asked.display().to_string());
                            scan.notes.push(format!(
                                "{shown} {why}: not read (the shim puts this user's pages in a private {shown}.XXXXXXXX then)"
                            ));
                            self.said.insert(asked.clone(), why);
                        }
                    }
                }
                dirs.extend(cuguard_files::fresh_dirs(&asked));
                dirs
            }
        };
        let mut found = false;
        for dir in &dirs {
            found |= self.scan_dir(dir, &mut scan, &mut seen)?;
        }
        scan.no_directory = !found;
        self.said.retain(|path, _| seen.contains(path));
        scan.processes
            .sort_by_key(|p| (p.page.pid, p.page.start_unix_ms));
        Ok(scan)
    }

    /// Whether `dir` is there (`Ok(false)` when not), a directory of this user's closed to
    /// others; why not, when it is something else.
    fn closed(&self, dir: &Path) -> Result<bool, String> {
        let m = match std::fs::symlink_metadata(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("cannot be read ({e})")),
        };
        if m.file_type().is_symlink() {
            Err("is a symbolic link".into())
        } else if !m.is_dir() {
            Err("is not a directory".into())
        } else if m.uid() != self.euid {
            Err(format!("belongs to another user (uid {})", m.uid()))
        } else if m.mode() & 0o022 != 0 {
            Err(format!(
                "can be written by other users (mode {:o})",
                m.mode() & 0o7777
            ))
        } else {
            Ok(true)
        }
    }

    /// Reads the pages in `dir` into `scan`, adding the paths looked at to `seen`; whether the
    /// directory was there.
    fn scan_dir(
        &mut self,
        dir: &Path,
        scan: &mut Scan,
        seen: &mut Vec<PathBuf>,
    ) -> Result<bool, ScanError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(source) => {
                return Err(ScanError {
                    dir: dir.to_path_buf(),
                    source,
                });
            }
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some((pid, start)) = name.to_str().and_then(cuguard_page::parse_file_name) else {
                continue;
            };
            let path = entry.path();
            seen.push(path.clone());
            match self.look(&path, pid, start) {
                Look::Read(page) => scan.processes.push(LiveProcess { path, page: *page }),
                Look::Stale => {
                    if std::fs::remove_file(&path).is_ok() {
                        scan.removed += 1;
                    }
                }
                Look::Vanished => {}
                Look::Bad(why) => {
                    if self.said.get(&path) != Some(&why) {
                        scan.notes.push(format!(
                            "page {}: {why}; skipped",
                            crate::wording::one_line(&path.display().to_string())
                        ));
                        self.said.insert(path, why);
                    }
                }
            }
        }
        Ok(true)
    }

    /// What the page file at `path`, named for `pid` started at `start`, is.
    fn look(&self, path: &Path, pid: u32, start: u64) -> Look {
        if pid == 0 || i32::try_from(pid).is_err() {
            return Look::Bad(format!(
                "its name holds pid {pid}, which no process can have"
            ));
        }
        let file = match std::fs::OpenOptions::new()
            .read(true)
            // Never through a symbolic link (it could lead to another user's file), and never
            // wait on a FIFO someone put there.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Look::Vanished,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Look::Bad("a symbolic link, not followed".into());
            }
            Err(e) => return Look::Bad(format!("cannot be opened: {e}")),
        };
        let meta = match file.metadata() {
            Ok(meta) => meta,
            Err(e) => return Look::Bad(format!("cannot be read: {e}")),
        };
        if !meta.file_type().is_file() {
            return Look::Bad("not a regular file".into());
        }
        if meta.uid() != self.euid {
            return Look::Bad(format!(
                "owned by uid {}, not by you (uid {}): not read",
                meta.uid(),
                self.euid
            ));
        }
        let running_since = match process::probe(pid) {
            Liveness::Gone => return Look::Stale,
            Liveness::Running { start_unix_ms } => start_unix_ms,
        };
        let page = match read_page(&file) {
            Ok(page) => page,
            Err(Failure::Io(e)) => return Look::Bad(format!("cannot be read: {e}")),
            Err(Failure::Page(e)) => return Look::Bad(e.to_string()),
        };
        if page.pid != pid || page.start_unix_ms != start {
            return Look::Bad(format!(
                "holds pid {} started at {}, not what its name says",
                page.pid, page.start_unix_ms
            ));
        }
        if let Some(since) = running_since {
            let written = start.max(page.updated_unix_ms);
            if since > written.saturating_add(START_TOLERANCE_MS) {
                // The pid was reused: the process that has it now started after the page's
                // writer last wrote it.
                return Look::Stale;
            }
        }
        Look::Read(Box::new(page))
    }
}

/// What a page file turned out to be.
enum Look {
    /// A page of a running process.
    Read(Box<Page>),
    /// The page of a process that has ended: to remove.
    Stale,
    /// Gone between listing and opening.
    Vanished,
    /// Not to be trusted, and why.
    Bad(String),
}

enum Failure {
    Io(io::Error),
    Page(PageError),
}

/// Reads and decodes a page, reading again (up to [`READS`] times, a few milliseconds apart)
/// while the writer is caught mid-write.
fn read_page(file: &File) -> Result<Page, Failure> {
    let mut buf = vec![0u8; cuguard_page::PAGE_SIZE];
    let mut attempt = 0;
    loop {
        let n = read_at_most(file, &mut buf).map_err(Failure::Io)?;
        match cuguard_page::decode(&buf[..n]) {
            Ok(page) => return Ok(page),
            Err(e) if e.is_transient() && attempt + 1 < READS => {
                std::thread::sleep(Duration::from_millis(1 << attempt));
                attempt += 1;
            }
            Err(e) => return Err(Failure::Page(e)),
        }
    }
}

/// Reads from the file's start into `buf` until it is full or the file ends; the bytes read.
fn read_at_most(file: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
