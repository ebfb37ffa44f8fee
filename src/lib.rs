//! cuguard: find, explain and gate CUDA device-memory leaks.
//!
//! The shim (`libcuguard.so`) writes one JSON report per process; this crate reads those reports
//! and turns them into summaries, CI verdicts, diffs and pictures. It is also the `cuguard`
//! command (see [`cli`]).
//!
//! - the report model (schema `"cuguard-report"` version 1) and its reader are the
//!   [`cuguard_format`] crate's (`shim/format`), named by that one name throughout;
//! - [`input`]: PATHs (files, directories, globs) to reports, read in parallel;
//! - [`compact`]: compact tables (strings kept once and numbered, columns that never move)
//!   for what is kept per site across thousands of reports;
//! - [`sites`]: the rule that charges a leak to a place in the program, and how a site is
//!   printed (its location once, its kind, its mixed native and Python stack); [`site_frames`]:
//!   the [`sites::Site`] type and the frames a site is read from, which [`sites`] re-exports;
//!   [`call_path`]: the allocation helpers a site's stacks share, looked through to the
//!   caller's line; [`block_sites`]: the same for a cache's blocks by their Python frames;
//! - [`owners`]: who holds each allocation (the program, a framework's cache, a library, the
//!   driver), bytes by owner, and `check --owners`;
//! - [`growth`]: which sites kept growing while the program ran (from `stack_samples`);
//! - [`versions`]: the versions that must match (driver, CUDA runtimes, frameworks) and the
//!   known mismatches, one table of rules with their sources (`versions/rules.rs`);
//! - [`identity`]: who a process was in a job (rank, worker, host, pid) and `--by`;
//!   [`compare`]: the processes of one job compared site by site;
//! - [`summary`]: per-process and overall summaries (with what each out-of-memory refusal saw,
//!   what was live at each peak, what grew, and device memory explained), with one module per
//!   output format;
//! - [`check`]: the CI gate: suppressions, owners, baselines, limits, growth; its output formats;
//! - [`merge`], [`diff`]: merged multi-process reports; the difference of two runs;
//! - [`output`]: the trait every output format implements, and the registries `--format`
//!   reads;
//! - [`view`]: the HTML page of `cuguard view`;
//! - [`history`]: a process's history of every allocation and free, read and answered for one
//!   moment or window; [`tags`]: the program's names for its memory (`summary --by tag`); [`naming`]: the frames of a report or a history named after the fact
//!   (`cuguard symbolize`, and the history's reader);
//! - [`export`]: reports and histories in other tools' formats (PyTorch's memory snapshot, pprof);
//! - [`replay`]: a history replayed against models of allocators at a capacity: what would have
//!   fit;
//! - [`live`]: the stats pages of running processes, read for `cuguard top` and `cuguard
//!   exporter`; [`top`]: the live terminal view; [`exporter`]: those pages as Prometheus
//!   metrics, and their HTTP server;
//! - [`cli`]: the command, one module per subcommand; exit codes in [`cli::exit`];
//! - [`spill`]: output written before what precedes it is known (the summary's processes, read
//!   before the totals that open it), and what is kept on disk until the end (the check's
//!   processes), in the records of [`record`];
//! - [`style`], [`wording`]: terminal colour and tables, number formatting (wildcards come from
//!   `cuguard_symbolize::glob`, the workspace's one matcher).
//!
//! ```no_run
//! use cuguard_format::Document;
//! let doc = Document::read("cuguard.train.4242.json".as_ref())?;
//! for report in doc.into_reports() {
//!     let report = report?;
//!     println!("{}: {} bytes leaked", report.process_name(), report.leaked_bytes());
//! }
//! # Ok::<(), cuguard_format::ReadError>(())
//! ```

pub mod block_sites;
pub mod call_path;
pub mod check;
pub mod cli;
pub mod compact;
pub mod compare;
pub mod diff;
pub mod export;
pub mod exporter;
#[doc(hidden)]
pub mod fuzzing;
pub mod growth;
pub mod history;
pub mod identity;
pub mod input;
pub mod live;
pub mod merge;
pub mod naming;
pub mod output;
pub mod owners;
pub mod record;
pub mod replay;
pub mod site_frames;
pub mod sites;
pub mod spill;
pub mod style;
pub mod summary;
pub mod tags;
pub mod top;
pub mod versions;
pub mod view;
pub mod wording;
