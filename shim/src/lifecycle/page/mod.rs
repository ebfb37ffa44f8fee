//! The stats page: one small file per process in a per-user directory, kept up to date while the
//! process runs, that `cuguard top` and `cuguard exporter` read. Its layout, encoder and decoder
//! are the `cuguard_page` crate's; this module makes, fills, publishes and removes it.
//!
//! # Where
//!
//! `CUGUARD_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/cuguard`, else `/tmp/cuguard-UID`
//! ([`cuguard_page::runtime_dir`], read with the settings), made with mode 0700. The first two
//! must be this user's and closed to others, or there is no page (said in one line). The last
//! is in a directory every user can write to: when another user made it first (or it is a link,
//! or open to others), the page goes to a fresh private `/tmp/cuguard-UID.XXXXXXXX` instead,
//! the one other processes of this user already use if there is one
//! ([`cuguard_files::private_dir`]), said in one line; `cuguard top` and `cuguard exporter` look
//! there too ([`cuguard_page::RuntimeDir::Shared`]). The file is `PID-STARTMS.page`
//! ([`cuguard_page::file_name`]), mode 0600 ([`mapping`] says how it is made safely, and how
//! temporaries that a killed process left are cleaned). `START` is when the shim started in the
//! process (in a forked child: the fork), in milliseconds since the Unix epoch. `CUGUARD_PAGE=0`
//! turns pages off.
//!
//! # When
//!
//! - Made by the cuguard thread when it starts (at the process's first allocation, never at
//!   load): [`start`]. When that fails (the directory cannot be made or is unsafe, the disk is
//!   full, …), one line on stderr says so and why, the report's `faults` too, and the process
//!   goes on without a page.
//! - Published by the cuguard thread every [`PUBLISH_MS`] (so at least once a second), never
//!   on the allocation path: [`Writer::tick`]. The history takes one sample a second.
//! - Removed when the final report has been written ([`remove`]), whichever way the process
//!   ends that writes one (exit, a terminating signal). A process that ends without one
//!   (`_exit`, SIGKILL, a crash with `CUGUARD_SIGNALS=0`) leaves its page behind: readers remove
//!   pages whose process is gone. The next image after an `exec` removes the pages of its pid.
//! - A forked child does not write its parent's page: the mapping is dropped in the child
//!   ([`after_fork_child`]), and the child makes its own page (its own pid, its own start) when
//!   its cuguard thread starts at its first allocation.
//!
//! # What
//!
//! What [`fill`] puts in: the process (pid, uid, start, exe, host, rank from the launchers'
//! variables, the report's path, the snapshot signal once the cuguard thread answers one; no
//! worker name), allocations refused for lack of memory, `CUGUARD_WARN_AT` alerts fired, live
//! device allocations; per device its name, UUID, total, live, peak and the pool's reserved bytes,
//! live bytes sampled once a second (the last 60), and growth = the last sample less the first;
//! the top sites by live bytes (named once per stack, with their owner) and each one's growth
//! over its device's history window, from the stack samples of the report's timeline (0 when
//! `CUGUARD_TIMELINE_MS=0`, or for a stack the samples do not follow); the live contexts. A
//! context's `live_bytes` is always 0: the shim does not count live bytes per context while the
//! program runs (only the report, at the end, walks the allocations).

mod fill;
mod mapping;

use std::ffi::CString;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use crate::process::global;

/// How often the page is published.
pub const PUBLISH_MS: u64 = 500;

/// What the thread that removes the page needs: the file's path; whether it was removed (a page
/// made after that is removed at once).
#[derive(Default)]
struct Shared {
    path: Option<CString>,
    removed: bool,
}

/// The shared state; a forked child replaces it (its lock may be held by the parent's cuguard
/// thread, which the child does not have).
static SHARED: AtomicPtr<Mutex<Shared>> = AtomicPtr::new(std::ptr::null_mut());
/// The mapping's address, for a forked child to drop it.
static MAPPED_AT: AtomicUsize = AtomicUsize::new(0);
/// When a forked child started (Unix ms); 0 in a process that was not forked.
static FORKED_AT_MS: AtomicU64 = AtomicU64::new(0);
/// Whether the failure to make a page was said.
static SAID: AtomicBool = AtomicBool::new(false);
/// Whether the fresh directory used in place of the shared one was said (once per process
/// tree: a forked child does not say it again).
static FRESH_SAID: AtomicBool = AtomicBool::new(false);

fn shared() -> &'static Mutex<Shared> {
    global::get_or_create(&SHARED, || Mutex::new(Shared::default()))
}

/// The page of this process, owned by the cuguard thread.
pub struct Writer {
    mapped: mapping::Mapped,
    filler: fill::Filler,
    next_ms: u64,
}

/// When the shim started in this process (in a forked child: the fork), Unix ms.
fn start_unix_ms() -> u64 {
    match FORKED_AT_MS.load(Ordering::Relaxed) {
        0 => crate::process::clock::start().0,
        at => at,
    }
}

/// Makes this process's page (the cuguard thread calls this when it starts). `None` when pages
/// are off, or when making one failed (said once on stderr and in the report's faults).
pub fn start() -> Option<Writer> {
    let asked = crate::config::get().page_dir.as_ref()?;
    let t = crate::tracker::if_any()?;
    let dir = directory(asked)?;
    let dir = dir.as_path();
    let start = start_unix_ms();
    let mut filler = fill::Filler::new(start);
    let now = crate::process::clock::since_start_ms();
    let first = cuguard_page::encode(&filler.page(t, now), 0);
    let pid = crate::process::identity::pid();
    let name = cuguard_page::file_name(pid, start);
    let (mapped, path) = match mapping::create(dir, &name, pid, &first) {
        Ok(made) => made,
        Err(why) => {
            no_page(&why);
            return None;
        }
    };
    MAPPED_AT.store(mapped.base(), Ordering::Relaxed);
    let mut s = global::lock(shared());
    if s.removed || crate::phase::final_claimed() {
        // The final report came first: this page would outlive the process.
        mapping::unlink(&path);
        return None;
    }
    s.path = Some(path);
    Some(Writer {
        mapped,
        filler,
        next_ms: now + PUBLISH_MS,
    })
}

/// Says once, on stderr and in the report's faults, that this process has no page, and why.
fn no_page(why: &str) {
    let message = format!(
        "no stats page (`cuguard top` and `cuguard exporter` will not see this process): {why}; set CUGUARD_RUNTIME_DIR to a directory of yours, or CUGUARD_PAGE=0"
    );
    if !SAID.swap(true, Ordering::Relaxed) {
        // The fault first: whoever reads the line and then ends the process finds it in the
        // report (a test failed once where the report was written between the two).
        crate::process::faults::record(message.clone());
        crate::process::diag::warn(&message);
    }
}

/// The directory the page goes in (see the module documentation): the one asked for, or for
/// the shared `/tmp/cuguard-UID` that another user took, a fresh private one (said once).
fn directory(asked: &cuguard_page::RuntimeDir) -> Option<std::path::PathBuf> {
    let shared = match asked {
        cuguard_page::RuntimeDir::Given(dir) => return Some(dir.clone()),
        cuguard_page::RuntimeDir::Shared(dir) => dir,
    };
    match cuguard_files::private_dir(shared) {
        Ok(cuguard_files::Private::Asked(dir)) => Some(dir),
        Ok(cuguard_files::Private::Fresh { path, why }) => {
            if !FRESH_SAID.swap(true, Ordering::Relaxed) {
                crate::process::diag::warn(&format!(
                    "the stats page: {why}; using {} (`cuguard top` and `cuguard exporter` look there too; CUGUARD_RUNTIME_DIR sets another)",
                    path.display()
                ));
            }
            Some(path)
        }
        Err(e) => {
            no_page(&format!("{}: {e}", shared.display()));
            None
        }
    }
}

impl Writer {
    /// Publishes the page if it is due; returns how long until the next one is (ms).
    pub fn tick(&mut self) -> u64 {
        let now = crate::process::clock::since_start_ms();
        if now < self.next_ms {
            return self.next_ms - now;
        }
        if !crate::phase::final_claimed()
            && let Some(t) = crate::tracker::if_any()
        {
            let page = self.filler.page(t, now);
            self.mapped.publish(&cuguard_page::encode(&page, 0));
        }
        self.next_ms = now + PUBLISH_MS;
        PUBLISH_MS
    }
}

/// Removes the page (the final report is written): unlinks its file; a page made later is
/// removed at once.
pub fn remove() {
    let mut s = global::lock(shared());
    s.removed = true;
    if let Some(path) = s.path.take() {
        mapping::unlink(&path);
    }
}

/// In a forked child: the page and its mapping are the parent's. Drop the mapping, forget the
/// path (the child's exit must not remove the parent's page), and note when the child started.
pub fn after_fork_child() {
    mapping::unmap(MAPPED_AT.swap(0, Ordering::Relaxed));
    global::replace(&SHARED, Mutex::new(Shared::default()));
    FORKED_AT_MS.store(crate::process::clock::unix_ms(), Ordering::Relaxed);
    SAID.store(false, Ordering::Relaxed);
}
