//! `cuguard diff BASE NEW`: sites that are new, fixed, grown or shrunk, with byte deltas.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::Args;

use super::common::write_stdout;
use super::error::CliError;
use super::exit;
use crate::check::places::{Place, source_root};
use crate::diff::{Diff, FORMATS, Needs, leak_places};
use crate::history::compare::{Member, Peaks, compare, compare_job};
use crate::input;
use crate::output::{Options, Row};
use crate::style::Style;
use crate::summary::{ReportSummary, Summary};

/// Arguments of `cuguard diff`.
#[derive(Debug, Args)]
#[command(after_help = "\
BASE and NEW are each a report, a merged report, a directory (every *.json below it) or a glob;
each side's processes are added up. Where each is one process's report with a history (or the
history file), their peaks are compared too: the whole run's, and each phase's (NVTX ranges,
cuguard.phase) occurrence by occurrence, with the sites new, gone, grown or shrunk at each.
Where a side has several processes (a merged report of a job's ranks), the two sides' processes
are paired by rank (else by the label worker, else in order) and each pair's peaks compared. The
exit status is 0 whatever changed (use `cuguard check --baseline BASE NEW` to gate on leaks,
`--max-peak-growth` on peaks).

--format sarif and --format github point at the code: a warning per leak site new or grown in
NEW, and per site new or grown at a compared peak, at its line under --source-root (fixed,
shrunk and gone sites are not findings).

Examples:
  cuguard diff main/cuguard.train.4242.json branch/cuguard.train.5150.json
  cuguard diff --format json 'main/*.json' 'branch/*.json'
  cuguard diff main/job.json branch/job.json  # merged reports (cuguard merge), rank by rank
  cuguard diff --format github --source-root . main/new.json new.json  # annotations in a job
  cuguard diff --format sarif --source-root . main/new.json new.json > diff.sarif  # code scanning")]
pub struct DiffArgs {
    /// Output format.
    #[arg(long, value_parser = FORMATS, default_value = FORMATS.default_format().name())]
    pub format: &'static Row<Diff, Needs>,
    /// How many sites to list per group in text output (0: all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// The directory whose files `--format sarif` and `--format github` point at, relative to
    /// it: each site is placed at the first frame, from the site outward, whose file is under it
    /// [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub source_root: Option<PathBuf>,
    /// The earlier run.
    #[arg(value_name = "BASE")]
    pub base: PathBuf,
    /// The later run.
    #[arg(value_name = "NEW")]
    pub new: PathBuf,
    /// Allocation helpers (see `--helper`).
    #[command(flatten)]
    pub helpers: super::common::HelperArgs,
}

/// One side added up over its processes; with `places`, where its leak sites are in the source
/// too (a site's place the first process's that has it, with the others' added); and each
/// process as its peaks are compared ([`Member`]: who it was, where its history is).
fn summarize(path: &PathBuf, places: bool) -> Result<Side, CliError> {
    let processes = input::map_paths(std::slice::from_ref(path), |source, report| {
        let at = if places {
            leak_places(&report)
        } else {
            HashMap::new()
        };
        let member = Member::of_report(&source.path, &report);
        (ReportSummary::new(source, &report, 0), at, member)
    })?;
    let mut all: HashMap<String, Place> = HashMap::new();
    let mut summaries = Vec::with_capacity(processes.len());
    let mut members = Vec::with_capacity(processes.len());
    for (_, (summary, at, member)) in processes {
        summaries.push(summary);
        members.push(member);
        for (key, place) in at {
            match all.get_mut(&key) {
                Some(known) => known.merge(place),
                None => {
                    all.insert(key, place);
                }
            }
        }
    }
    Ok(Side {
        summary: Summary::new(summaries, usize::MAX),
        places: all,
        members,
    })
}

/// One side read: its summary, where its leak sites are, its processes.
struct Side {
    summary: Summary,
    places: HashMap<String, Place>,
    members: Vec<Member>,
}

/// The two runs' peaks, whole and by phase: where each side is one process with a history, the
/// two compared; where a side has several processes (a merged report, a directory), the two
/// sides' processes paired (by rank, else worker, else order) and each pair's compared. Why not,
/// when only one side has histories; neither when no side has one.
fn peaks(
    args: &DiffArgs,
    base: &[Member],
    new: &[Member],
) -> Result<(Option<Peaks>, Option<String>), CliError> {
    if base.len() > 1 || new.len() > 1 {
        let has = |side: &[Member]| side.iter().any(Member::has_history);
        return Ok(match (has(base), has(new)) {
            (true, true) => (Some(Peaks::Job(compare_job(base, new, true))), None),
            (true, false) => (
                None,
                Some("only BASE has histories: peaks not compared".into()),
            ),
            (false, true) => (
                None,
                Some("only NEW has histories: peaks not compared".into()),
            ),
            (false, false) => (None, None),
        });
    }
    // One process a side: a file as its history is read alone (a report, or the history
    // file); a directory's one report as it was read.
    let one = |p: &PathBuf, side: &[Member]| match side {
        _ if p.is_file() => Some(crate::history::load(p)),
        [m] if m.has_history() => Some(m.open()),
        _ => None,
    };
    match (one(&args.base, base), one(&args.new, new)) {
        (Some(Ok(b)), Some(Ok(n))) => Ok((Some(Peaks::One(compare(&b, &n, true)?)), None)),
        (Some(Ok(_)), _) => Ok((
            None,
            Some("only BASE has a history: peaks not compared".into()),
        )),
        (_, Some(Ok(_))) => Ok((
            None,
            Some("only NEW has a history: peaks not compared".into()),
        )),
        _ => Ok((None, None)),
    }
}

/// Runs `cuguard diff`.
pub fn run(args: DiffArgs) -> Result<u8, CliError> {
    // Where sites are in the source: only for the formats that point at code, and only NEW's
    // (the sites it does worse at are its own).
    let places = args.format.parts().places;
    let base = summarize(&args.base, false)?;
    let new = summarize(&args.new, places)?;
    let mut diff = Diff::new(&base.summary, &new.summary);
    diff.source_root = Some(source_root(args.source_root.as_deref()));
    (diff.peaks, diff.peaks_not_compared) = peaks(&args, &base.members, &new.members)?;
    diff.places = new.places;
    let top = if args.top == 0 { usize::MAX } else { args.top };
    let options = Options {
        style: Style::for_stdout(),
        top,
        cost: false,
    };
    write_stdout(|out| args.format.write(&diff, out, &options))?;
    Ok(exit::OK)
}
