//! The live side: the stats pages that processes under the shim keep up to date while they run
//! (layout in [`cuguard_page`]), read for `cuguard top` and `cuguard exporter`.
//!
//! - [`Reader`] lists this user's pages in the runtime directory ([`default_dir`]; for the shared
//!   `/tmp/cuguard-UID`, the private ones the shim uses when another user took it too), decodes
//!   each, checks that its process still runs, removes the pages of ended processes, and says
//!   each bad page once;
//! - [`process`]: whether a pid runs and when it started (`kill(pid, 0)`, `/proc/PID/stat`).
//!
//! ```no_run
//! let mut reader = cuguard::live::Reader::of(cuguard::live::default_dir());
//! let scan = reader.scan()?;
//! for p in &scan.processes {
//!     let live: u64 = p.page.devices.iter().map(|d| d.live_bytes).sum();
//!     println!("{} {}: {live} bytes live", p.page.pid, p.page.exe);
//! }
//! for note in &scan.notes {
//!     eprintln!("cuguard: {note}");
//! }
//! # Ok::<(), cuguard::live::ScanError>(())
//! ```

pub mod process;
mod reader;
#[cfg(test)]
mod tests;

use cuguard_page::RuntimeDir;

pub use reader::{LiveProcess, Reader, START_TOLERANCE_MS, Scan, ScanError};

/// This user's page directory, as the shim picks it: `CUGUARD_RUNTIME_DIR` if set, else
/// `$XDG_RUNTIME_DIR/cuguard`, else `/tmp/cuguard-UID` ([`cuguard_page::runtime_dir`]); for the
/// last, [`Reader::of`] looks in the fresh private directories the shim uses when another user
/// took that name.
pub fn default_dir() -> RuntimeDir {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    cuguard_page::runtime_dir(uid, |k| std::env::var(k).ok())
}

/// The file name of an executable path: what `top` and the exporter show (`python3.12` for
/// `/usr/bin/python3.12`), as `summary` names processes.
pub fn exe_name(exe: &str) -> &str {
    exe.rsplit('/').next().unwrap_or(exe)
}
