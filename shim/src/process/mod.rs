//! What the shim needs of the process it lives in, with no CUDA in it: the bottom of the shim.
//!
//! - [`identity`]: pid, parent, executable, arguments, host and rank, for the report;
//! - [`clock`]: clocks, the process's start and thread ids, cheap enough for the allocation path;
//! - [`cost`]: the shim's own bill (sampled time on the allocation path, its own heap);
//! - [`diag`]: the shim's own lines on stderr;
//! - [`faults`]: the shim's own problems, kept for the report;
//! - [`aliases`]: the names the program gave its source files for people (notebook cells);
//! - [`labels`]: the labels the program set through the in-process API, with [`launcher`]'s;
//! - [`launcher`]: the labels a launcher (torchrun, Slurm, Open MPI) set in the environment;
//! - [`leaving`]: whether the process is leaving through `_exit`, and its status;
//! - [`local`]: the allocation path's per-thread words, in one thread-local;
//! - [`global`]: process-wide values created on first use and replaced in a forked child, and the
//!   lock that a panic does not poison;
//! - [`thread`]: the shim's own threads, started with every signal blocked;
//! - [`versions`]: the driver's release, the CUDA runtimes and the frameworks mapped, for the
//!   report (read from `/proc/self/maps` and installed metadata when a report is gathered).

pub mod aliases;
pub mod clock;
pub mod cost;
pub mod diag;
pub mod faults;
pub mod global;
pub mod identity;
pub mod labels;
pub mod launcher;
pub mod leaving;
pub mod local;
pub mod thread;
pub mod versions;
