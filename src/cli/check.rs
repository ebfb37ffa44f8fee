//! `cuguard check`: the CI gate (see [`crate::check`] for the rule).

use std::path::PathBuf;

use clap::Args;

use super::common::write_stdout;
use super::error::CliError;
use super::exit;
use crate::check::peaks::{PeakLimit, PeakVerdict};
use crate::check::suppressions::Suppressions;
use crate::check::{
    Baseline, CheckFold, Condense, FORMATS, FailingEvents, Limits, Needs, ProcessCheck, Verdict,
};
use crate::history::compare::{Member, compare, compare_job};
use crate::input;
use crate::output::{Options, Row};
use crate::owners::OwnerFilter;
use crate::style::Style;
use cuguard_format::{LeakFold, Report};

/// Arguments of `cuguard check`.
#[derive(Debug, Args)]
#[command(after_help = "\
The check fails (exit 1) when the leaks that count exceed a limit, when a site grew by more
than --max-growth, or when events of a failing kind remain.

Limits on leaks: with neither --max-leaked-bytes nor --max-leaks, both are 0 and any leak that
counts fails. Given one, only that measure is limited (the other is not: --max-leaked-bytes 1MiB
alone passes any number of leaks adding up to 1 MiB or less). Given both, either one over its
limit fails.

Which leaks count: only the program's own by default. For a Python program run under `cuguard
run`, the leaks are what was live when its code ended (before the interpreter's teardown), and
only what no Python object held then (the lost) counts; --held counts the held too, a tensor
kept in a framework's cache included. Memory a framework keeps in its cache
(PyTorch's caching allocator, CuPy's or RMM's pools, XLA's BFC allocator), CUDA libraries'
workspaces and the driver's own allocations are listed but do not count unless --owners names
them; leaks without a known owner are the program's. Suppressed leaks and events never count;
with --baseline only new sites, and the growth of grown sites, count.

Exit 0: pass. Exit 1: fail. Exit 2: usage error, unreadable input, or PATHs that hold no report
(an empty directory: did the program run under cuguard?); --allow-empty passes those.

Examples:
  cuguard check cuguard.*.json
  cuguard check --suppressions .cuguard-supp --format junit reports/ > cuguard-junit.xml
  cuguard check --baseline main-reports/ --max-leaked-bytes 1048576 reports/
  cuguard check --fail-on-events all --require-complete reports/
  cuguard check --owners framework_cache,cublas --max-leaked-bytes 8GiB --max-growth 256MiB reports/
  cuguard check --held cuguard.python3.*.json  # fail on memory still held at the end too
  cuguard check --format sarif --source-root . reports/ > cuguard.sarif  # for code scanning
  cuguard check --format github reports/  # annotations in a GitHub Actions job
  cuguard check --suppressions .cuguard-supp --show-suppressed reports/  # which rule silenced what
  cuguard check --allow-empty reports/  # pass a job that may run no program under cuguard
  cuguard check --baseline main.json --max-peak-growth 5% --by phase branch.json  # a step needs more
  cuguard check --baseline main-job.json --max-peak-growth 5% job.json  # merged reports, rank by rank

Suppression rules (one per line, terms separated by spaces, all must match):
  leak:PATTERN     a frame's function, file or module      api:PATTERN     the driver entry
  memory:PATTERN   device|pitched|managed|async|vmm|host_pinned
  event:PATTERN    an event kind (makes it an event rule)  frame:PATTERN   a frame, in event rules
Patterns match anywhere unless anchored with ^ or $; * ? and [..] are wildcards.")]
pub struct CheckArgs {
    /// Fail when the leaks that count add up to more than N bytes (new or grown ones with
    /// --baseline; units allowed: 64KiB, 1.5MiB, 2GB). Default: 0 when --max-leaks is not given
    /// either (any leak fails); not limited when only --max-leaks is given.
    #[arg(long, value_name = "N", value_parser = parse_bytes)]
    pub max_leaked_bytes: Option<u64>,
    /// Fail when more than N leaks count (new or grown ones with --baseline). Default: 0 when
    /// --max-leaked-bytes is not given either (any leak fails); not limited when only
    /// --max-leaked-bytes is given.
    #[arg(long, value_name = "N")]
    pub max_leaks: Option<u64>,
    /// Fail when a site of a checked owner grew by more than SIZE in a process: its live bytes
    /// were still rising in the last part of the run, even if freed at exit; set-up followed by
    /// a plateau is not growth (needs reports with stack_samples). Default: growth is not
    /// checked.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_growth: Option<u64>,
    /// Whose leaks (and growth) are checked besides the program's own: owner ids
    /// (pytorch_caching_allocator, cupy_memory_pool, rmm_pool, cublas, …) or kinds
    /// (framework_cache, library, driver), comma-separated, or `all`. Default: the program's
    /// only.
    #[arg(long, value_name = "LIST", value_parser = OwnerFilter::parse)]
    pub owners: Option<OwnerFilter>,
    /// Suppressions file (repeatable).
    #[arg(long, value_name = "FILE")]
    pub suppressions: Vec<PathBuf>,
    /// Reports of a known-good run: fail only on leaks and events that are new or have grown.
    #[arg(long, value_name = "PATH")]
    pub baseline: Vec<PathBuf>,
    /// Event kinds that fail the check: a comma-separated list, `all` or `none`.
    #[arg(
        long,
        value_name = "KINDS",
        default_value = "double_free,invalid_free,free_in_wrong_context"
    )]
    pub fail_on_events: String,
    /// Fail when a report is incomplete (a checkpoint, or cut short by a signal).
    #[arg(long)]
    pub require_complete: bool,
    /// For Python programs whose end was recorded: count also what Python objects still held at
    /// the end of their code (by default only the lost counts: what nothing held).
    #[arg(long)]
    pub held: bool,
    /// Output format.
    #[arg(long, value_parser = FORMATS, default_value = FORMATS.default_format().name())]
    pub format: &'static Row<Verdict, Needs>,
    /// How many sites and events to list in text output (0: all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// The directory whose files `--format sarif` and `--format github` point at, relative to
    /// it: each finding is placed at the first frame, from its site outward, whose file is
    /// under it [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub source_root: Option<PathBuf>,
    /// List each suppressed site with the rule that silenced it (file:line: rule).
    #[arg(long)]
    pub show_suppressed: bool,
    /// Pass when the PATHs hold no report (empty directories, globs that match nothing). By
    /// default that is an error (exit 2): a program that never ran under cuguard writes none.
    #[arg(long)]
    pub allow_empty: bool,
    /// Fail when the run's peak grew past this against --baseline: a percentage of the
    /// baseline's peak (`5%`) or a size (`256MiB`). Each side one process's report with its
    /// history (or the history file), or a merged report (each rank's peak judged against the
    /// baseline's same rank); with --by phase, each phase occurrence's peak too.
    #[arg(long, value_name = "GROWTH", value_parser = parse_peak_limit, requires = "baseline")]
    pub max_peak_growth: Option<PeakLimit>,
    /// With --max-peak-growth: judge each phase occurrence's peak (NVTX ranges, cuguard.phase),
    /// aligned with the baseline's by name and occurrence, as well as the run's.
    #[arg(long, value_enum, value_name = "WHAT", requires = "max_peak_growth")]
    pub by: Option<CheckBy>,
    /// Reports: files, directories (every *.json below them) or globs.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Allocation helpers (see `--helper`).
    #[command(flatten)]
    pub helpers: super::common::HelperArgs,
}

/// What `check --by` judges apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckBy {
    /// Each phase occurrence's peak (`--max-peak-growth`).
    Phase,
}

/// `--max-peak-growth`: `5%` or a size.
fn parse_peak_limit(text: &str) -> Result<PeakLimit, String> {
    PeakLimit::parse(text, parse_bytes)
}

/// The peaks of NEW (`paths`) against the baseline's, judged: each side must be one file, a
/// report (one process's, or a merged report's processes) or a history file. One process a
/// side: the two compared; else the sides' processes paired (by rank, else worker, else order)
/// and each pair judged, refused (exit 2) only when no pair could be compared.
fn judge_peaks(args: &CheckArgs, limit: PeakLimit) -> Result<PeakVerdict, CliError> {
    let one = |paths: &[PathBuf], which: &str| -> Result<Vec<Member>, CliError> {
        match paths {
            [p] if p.is_file() => Ok(Member::of_file(p)?),
            _ => Err(CliError::Usage(format!(
                "--max-peak-growth compares one process's history with another's: give one report (or history file) as {which}, not {}",
                if paths.len() == 1 {
                    "a directory or glob".to_string()
                } else {
                    format!("{}", paths.len())
                }
            ))),
        }
    };
    let base = one(&args.baseline, "--baseline")?;
    let new = one(&args.paths, "PATH")?;
    let by_phase = args.by == Some(CheckBy::Phase);
    if let ([b], [n]) = (base.as_slice(), new.as_slice()) {
        let diff = compare(&b.open()?, &n.open()?, by_phase)?;
        return Ok(PeakVerdict::new(diff, limit, by_phase));
    }
    let job = compare_job(&base, &new, by_phase);
    if job.processes.is_empty() {
        let why = job.uncompared_lines();
        return Err(CliError::Usage(format!(
            "--max-peak-growth compared no process: {}",
            if why.is_empty() {
                "no process on a side".to_string()
            } else {
                why.join("; ")
            }
        )));
    }
    Ok(PeakVerdict::job(job, limit, by_phase))
}

/// Parses a byte count: an integer with an optional unit (`512`, `64KiB`, `1.5MiB`, `2GB`).
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count"))?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(bytes as u64)
}

fn failing_events(text: &str) -> FailingEvents {
    match text.trim() {
        "all" => FailingEvents::All,
        "none" | "" => FailingEvents::None,
        list => FailingEvents::Kinds(
            list.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(String::from)
                .collect(),
        ),
    }
}

/// Reads every suppressions file named.
pub(crate) fn read_suppressions(files: &[PathBuf]) -> Result<Suppressions, CliError> {
    let mut all = Suppressions::default();
    for f in files {
        all.extend(Suppressions::read(f).map_err(CliError::Suppressions)?);
    }
    Ok(all)
}

/// Runs `cuguard check`.
pub fn run(args: CheckArgs) -> Result<u8, CliError> {
    let suppressions = read_suppressions(&args.suppressions)?;
    let owners = args.owners.clone().unwrap_or_default();
    // Where sites are in the source: only for the formats that point at code.
    let how = Condense {
        suppressions: &suppressions,
        owners: &owners,
        held: args.held,
        places: args.format.parts().places,
    };
    let condense = |source: &input::Source, report: Report, leaks: LeakFold| {
        ProcessCheck::condensed(source, &report, &leaks, &how)
    };
    // No report at all is a job whose program never ran under the shim: refused unless allowed,
    // before anything is read or written.
    let files = input::expand_maybe_empty(&args.paths)?;
    if files.is_empty() && !args.allow_empty {
        return Err(CliError::NoReport(args.paths));
    }
    let mut fold = CheckFold::on_disk(&suppressions);
    input::for_each_folded(&files, 0, condense, |_, p| fold.add(p))?;
    let baseline = if args.baseline.is_empty() {
        None
    } else {
        let mut base = Baseline::default();
        input::for_each_folded(&input::expand(&args.baseline)?, 0, condense, |_, p| {
            base.add(&p)
        })?;
        Some(base)
    };
    let (max_leaked_bytes, max_leaks) = Limits::leaks(args.max_leaked_bytes, args.max_leaks);
    let limits = Limits {
        max_leaked_bytes,
        max_leaks,
        max_growth: args.max_growth,
        owners,
        fail_on_events: failing_events(&args.fail_on_events),
        require_complete: args.require_complete,
        held: args.held,
    };
    let mut verdict = fold
        .finish(baseline.as_ref(), &suppressions, limits)
        .map_err(|source| CliError::Output {
            what: "a temporary file".into(),
            source,
        })?;
    verdict.show_suppressed = args.show_suppressed;
    if let Some(limit) = args.max_peak_growth {
        let peaks = judge_peaks(&args, limit)?;
        let failing = peaks.failing();
        if !failing.is_empty() {
            verdict.passed = false;
            verdict.failures.extend(peaks.failures());
        }
        for f in failing {
            if let Some(s) = f.peak.change.sites.first() {
                verdict
                    .places
                    .entry(s.site.clone())
                    .or_insert_with(|| s.place.clone());
            }
        }
        verdict.peaks = Some(peaks);
    }
    verdict.source_root = Some(crate::check::places::source_root(
        args.source_root.as_deref(),
    ));
    let code = if verdict.passed {
        exit::OK
    } else {
        exit::CHECK_FAILED
    };
    let top = if args.top == 0 { usize::MAX } else { args.top };
    let options = Options {
        style: Style::for_stdout(),
        top,
        cost: false,
    };
    let written = write_stdout(|out| args.format.write(&verdict, out, &options));
    match written {
        // A closed pipe does not change the verdict.
        Err(e) if e.is_broken_pipe() => Ok(code),
        Err(e) => Err(e),
        Ok(()) => Ok(code),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_counts() {
        use super::parse_bytes;
        assert_eq!(parse_bytes("0"), Ok(0));
        assert_eq!(parse_bytes("64KiB"), Ok(65536));
        assert_eq!(parse_bytes("1.5 MiB"), Ok(1_572_864));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("99999999999999999999999TiB").is_err());
    }
}
