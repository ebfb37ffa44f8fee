//! Exit codes of the `cuguard` command, all in one place.
//!
//! | code | meaning |
//! |---:|---|
//! | 0 | success; for `check`, the reports pass the gate |
//! | 1 | `check`: the reports fail the gate (leaks or events over the limits) |
//! | 2 | usage error (one line: [`super::main`]), or input that is missing, unreadable or not a version-1 report, or output that could not be written; `check`: PATHs that hold no report (unless `--allow-empty`); `run`: the shim or simulated driver could not be found; `top`, `exporter`: the page directory cannot be listed; `exporter`: the address cannot be listened on (a port in use); `top` without `--once`: no terminal |
//! | 126 | `run`: PROGRAM exists but could not be executed (as shells do) |
//! | 127 | `run`: PROGRAM not found (as shells do) |
//! | any | `run`: PROGRAM's own exit status, or 128+N when signal N killed it (as shells do) |
//!
//! A closed standard output (`cuguard summary … | head`) ends the command quietly with the code
//! it would have had.

/// Success; `check` passed.
pub const OK: u8 = 0;
/// `check` failed.
pub const CHECK_FAILED: u8 = 1;
/// Usage or input error.
pub const USAGE: u8 = 2;
/// `run`: PROGRAM could not be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// `run`: PROGRAM not found.
pub const NOT_FOUND: u8 = 127;

/// The exit-code table for `--help`.
pub const HELP: &str = "\
Exit status:
  0    success; for `check`, the reports pass
  1    `check`: the reports fail (leaks or events over the limits)
  2    usage error, or input missing, unreadable or not a cuguard report (version 1);
       `check`: no report at all (unless --allow-empty)
  126  `run`: PROGRAM could not be executed
  127  `run`: PROGRAM not found
  `run` otherwise exits with PROGRAM's status, or 128+N if signal N killed it.";
