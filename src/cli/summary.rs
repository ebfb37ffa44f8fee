//! `cuguard summary`: read reports, print what leaked where.

use std::io::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::common::write_stdout;
use super::error::CliError;
use super::exit;
use crate::identity::GroupBy;
use crate::input;
use crate::output::{Options, Row};
use crate::spill::Spill;
use crate::style::Style;
use crate::summary::{FORMATS, Parts, ReportSummary, Summary, SummaryFold};
use cuguard_format::{LeakFold, Report};

/// Arguments of `cuguard summary`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  cuguard summary cuguard.train.4242.json
  cuguard summary --top 5 reports/                  # every *.json below reports/
  cuguard summary --format markdown 'reports/*.json' > comment.md
  cuguard summary --by rank job-1234.json           # a merged report, one group per rank
  cuguard summary --cost cuguard.train.4242.json    # cuguard's own cost, the whole bill
  cuguard summary --helper make_buffer r.json       # make_buffer's leaks at its callers' lines
  cuguard summary --by phase r.json                 # each NVTX range's (phase's) peak and what it kept
  cuguard summary --by tag r.json                   # what leaked, by the program's tags
  cuguard summary --by tag --at peak r.json         # what was live at the peak, by tag
  cuguard summary --at phase:step#12 r.json         # what was live at step 12's peak
  cuguard summary --between phase:step#12 r.json    # what step 12 allocated and kept

Across three or more processes, a process that holds (or grew) at least 4x the median and
at least 64 MiB more at a site is called out; incomplete reports and ranks missing from
0..WORLD_SIZE are listed.")]
pub struct SummaryArgs {
    /// Output format.
    #[arg(long, value_parser = FORMATS, default_value = FORMATS.default_format().name())]
    pub format: &'static Row<Summary, Parts>,
    /// Group the processes of a job by worker (label `worker`), rank, host or process, with
    /// each group's leaks, peak, growth and largest sites; or one process's history by phase
    /// (its NVTX ranges and `cuguard.phase`s): each phase's peak, what it allocated and what
    /// stayed; or memory by the program's tags (`cuguard.tag`, `cuguard_tag_push`,
    /// `cuguard.annotate`): what leaked, or with `--at`/`--between` what was live or kept, each
    /// tag's bytes and sites.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub by: Option<By>,
    /// How many sites and leaks to list per process (0: all).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// What was live at this moment of the run, from its history: `12.5s`, `840ms`, `2m`, a
    /// number of seconds, `peak`, `oom` (the first refusal), `end`, or `phase:NAME[#N]` (the
    /// peak of a phase's Nth occurrence, or of the one whose NVTX payload is N). One process.
    #[arg(
        long,
        value_name = "TIME",
        allow_hyphen_values = true,
        conflicts_with = "between"
    )]
    pub at: Option<String>,
    /// What was allocated between two moments and still live at the second: what one step
    /// kept. Or one phase, `phase:NAME[#N]`: from its beginning to its end. One process.
    #[arg(long, num_args = 1..=2, value_names = ["T1", "T2"])]
    pub between: Option<Vec<String>>,
    /// cuguard's own cost whole (time in hooks, stacks, Python frames, one-time set-up, pool
    /// chunks, report writing, memory) rather than in one short line.
    #[arg(long)]
    pub cost: bool,
    /// Reports: files, directories (every *.json below them) or globs.
    #[arg(required_unless_present = "between", value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Allocation helpers (see `--helper`).
    #[command(flatten)]
    pub helpers: super::common::HelperArgs,
}

/// What `--by` groups by: the processes of a job, or one history's phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// The label `worker`.
    Worker,
    /// The rank.
    Rank,
    /// The host name.
    Host,
    /// One group per process.
    Process,
    /// One process's history, by phase (NVTX ranges, `cuguard.phase`).
    Phase,
    /// The program's tags (`cuguard.tag`, `cuguard_tag_push`, `cuguard.annotate`): reports'
    /// leaks, or a history at `--at` or over `--between`.
    Tag,
}

impl By {
    /// The job's grouping, `None` for [`By::Phase`] and [`By::Tag`].
    fn group(self) -> Option<GroupBy> {
        match self {
            By::Worker => Some(GroupBy::Worker),
            By::Rank => Some(GroupBy::Rank),
            By::Host => Some(GroupBy::Host),
            By::Process => Some(GroupBy::Process),
            By::Phase | By::Tag => None,
        }
    }
}

/// Runs `cuguard summary`.
pub fn run(mut args: SummaryArgs) -> Result<u8, CliError> {
    crate::history::phases::untangle(&mut args.between, &mut args.paths);
    if args.paths.is_empty() {
        return Err(CliError::Usage(
            "give the report or history file to read (see cuguard summary --help)".into(),
        ));
    }
    let top = if args.top == 0 { usize::MAX } else { args.top };
    if args.at.is_some() || args.between.is_some() {
        if let Some(by) = args.by.filter(|&b| b != By::Tag) {
            return Err(CliError::Usage(format!(
                "--at and --between answer one process's history: they take --by tag, not --by {}",
                clap::ValueEnum::to_possible_value(&by)
                    .map_or_else(String::new, |v| v.get_name().to_string())
            )));
        }
        return moment(&args, top);
    }
    match args.by {
        Some(By::Phase) => return by_phase(&args, top),
        Some(By::Tag) => return by_tag(&args, top),
        _ => {}
    }
    let files = input::expand(&args.paths)?;
    let options = Options {
        style: Style::for_stdout(),
        top,
        cost: args.cost,
    };
    let condense = |source: &input::Source, report: Report, leaks: LeakFold| {
        ReportSummary::folded(source, &report, &leaks, top)
    };
    let mut fold = SummaryFold::on_disk(top, args.by.and_then(By::group));
    let spilled = |e| CliError::Output {
        what: "a temporary file".into(),
        source: e,
    };
    let (head, process, tail) = args.format.parts().sections;
    // Each process is written (to a spill) as soon as it is read, and dropped: the totals that
    // come first in every format are known only at the end.
    let mut spill = Spill::new();
    let mut written = 0;
    let mut spill_error = None;
    input::for_each_folded(&files, top, condense, |_, mut p| {
        fold.count(&mut p);
        if spill_error.is_none()
            && let Err(e) = process(written, &p, &mut spill, &options)
        {
            spill_error = Some(e);
        }
        written += 1;
    })?;
    if let Some(e) = spill_error {
        return Err(spilled(e));
    }
    spill.flush().map_err(spilled)?;
    let summary = fold.finish().map_err(spilled)?;
    write_stdout(|out| {
        head(&summary, out, &options)?;
        spill.copy_to(out)?;
        tail(written, out, &options)
    })?;
    Ok(exit::OK)
}

/// `--at` and `--between`: one process's history, asked.
fn moment(args: &SummaryArgs, top: usize) -> Result<u8, CliError> {
    let [path] = &args.paths[..] else {
        return Err(CliError::Usage(format!(
            "--at and --between ask one process's history: give one report or history file, not {}",
            args.paths.len()
        )));
    };
    let opened = crate::history::load(path)?;
    let time = |t: &str, flag: &str| {
        crate::history::when::parse_time(t, &opened)
            .map_err(|why| CliError::Usage(format!("{flag} {why}")))
    };
    let by_tag = args.by == Some(By::Tag);
    let (mut m, tags) = match (&args.at, &args.between) {
        (Some(at), _) => {
            let t = match at.as_str() {
                // The card shown is the first that explains itself (a framework's, past the
                // driver's refusals inside its allocator): its moment, not the first refusal's.
                "oom" if !crate::history::is_history_file(path)? => {
                    match first_card_index(path)?.and_then(|n| opened.history.oom_ns(n)) {
                        Some(t) => t,
                        None => time(at, "--at")?,
                    }
                }
                _ => time(at, "--at")?,
            };
            let loaded = opened.read(t, t)?;
            let mut m = crate::history::moment::at(&loaded, t, top);
            m.phase = phase_label(at, &opened);
            let tags = by_tag.then(|| {
                let blocks: Vec<_> = loaded.replay.live_at(t).collect();
                crate::tags::of_blocks(&loaded, &blocks, &m, top)
            });
            (m, tags)
        }
        (_, Some(texts)) => {
            let (from, to, phase) = crate::history::when::parse_window(texts, &opened)
                .map_err(|why| CliError::Usage(format!("--between {why}")))?;
            let loaded = opened.read(from, to)?;
            let mut m = crate::history::moment::between(&loaded, from, to, top);
            m.phase = phase;
            let tags = by_tag.then(|| {
                let blocks: Vec<_> = loaded.replay.kept_between(from, to).collect();
                crate::tags::of_blocks(&loaded, &blocks, &m, top)
            });
            (m, tags)
        }
        _ => unreachable!("asked for a moment"),
    };
    if args.at.as_deref() == Some("oom") && !crate::history::is_history_file(path)? {
        m.oom = first_oom_card(path, top)?;
    }
    let source = path.display().to_string();
    let options = Options {
        style: Style::for_stdout(),
        top,
        cost: args.cost,
    };
    match &tags {
        Some(tags) => write_stdout(|out| (args.format.parts().tags)(tags, &source, out, &options))?,
        None => write_stdout(|out| (args.format.parts().moment)(&m, &source, out, &options))?,
    }
    Ok(exit::OK)
}

/// The phase `text` names (`phase:step#3`), for people (`step #3`); `None` for another moment.
fn phase_label(text: &str, opened: &crate::history::Opened) -> Option<String> {
    use crate::history::when::Moments as _;
    let asked = crate::history::phases::Asked::parse(text)?.ok()?;
    let p = asked.find(opened.phases()).ok()?;
    Some(crate::history::phases::label(opened.phases(), p))
}

/// `--by phase`: one process's history, phase by phase.
fn by_phase(args: &SummaryArgs, top: usize) -> Result<u8, CliError> {
    let [path] = &args.paths[..] else {
        return Err(CliError::Usage(format!(
            "--by phase reads one process's history: give one report or history file, not {}",
            args.paths.len()
        )));
    };
    let opened = crate::history::load(path)?;
    let process = opened.names_of(std::iter::empty()).process_name();
    let s = crate::history::phases::summary(&opened, process, top)?;
    let source = path.display().to_string();
    let options = Options {
        style: Style::for_stdout(),
        top,
        cost: args.cost,
    };
    write_stdout(|out| (args.format.parts().phases)(&s, &source, out, &options))?;
    Ok(exit::OK)
}

/// `--by tag` of reports: their leaks by the program's tags, every process added up.
fn by_tag(args: &SummaryArgs, top: usize) -> Result<u8, CliError> {
    if let [path] = &args.paths[..]
        && path.is_file()
        && crate::history::is_history_file(path)?
    {
        return Err(CliError::Usage(
            "--by tag of a history file asks a moment: add --at TIME (--at end: what was live at \
             its end) or --between T1 T2"
                .into(),
        ));
    }
    let files = input::expand(&args.paths)?;
    let per_report = input::map_reports(&files, |_, report| {
        let (tally, end) = crate::tags::of_report(&report);
        (report.process_name(), tally, end)
    })?;
    let mut tally = crate::tags::Tally::default();
    let mut names = Vec::with_capacity(per_report.len());
    let mut end_of_code = 0;
    for (_, (name, t, end)) in per_report {
        names.push(name);
        tally.merge(t);
        end_of_code += usize::from(end);
    }
    let s = crate::tags::of_reports(tally, &names, end_of_code, top);
    let source = match &files[..] {
        [one] => one.display().to_string(),
        all => format!("{} reports", all.len()),
    };
    let options = Options {
        style: Style::for_stdout(),
        top,
        cost: args.cost,
    };
    write_stdout(|out| (args.format.parts().tags)(&s, &source, out, &options))?;
    Ok(exit::OK)
}

/// The out-of-memory card of the report at `path`'s first refusal, for `--at oom`.
fn first_oom_card(
    path: &std::path::Path,
    top: usize,
) -> Result<Option<crate::summary::attribution::OomSummary>, CliError> {
    let cards = input::map_reports(&[path.to_path_buf()], |source, report| {
        let ooms = ReportSummary::new(source, &report, top).ooms;
        let first = first_explained(ooms.iter().map(|o| o.within.is_some()));
        ooms.into_iter().nth(first)
    })?;
    Ok(cards.into_iter().next().and_then(|(_, card)| card))
}

/// Which of the report's refusals is the first card `--at oom` shows ([`first_explained`]), so
/// that its moment is that refusal's in the history (each recorded refusal is one there, in
/// the report's order); `None` without refusals.
fn first_card_index(path: &std::path::Path) -> Result<Option<usize>, CliError> {
    let found = input::map_reports(&[path.to_path_buf()], |_, report| {
        (!report.ooms.is_empty())
            .then(|| first_explained(report.ooms.iter().map(|o| o.within.is_some())))
    })?;
    Ok(found.into_iter().next().and_then(|(_, n)| n))
}

/// The first refusal not inside a framework's allocator (a driver's refusal inside one is
/// explained by the framework's card, later), given whether each is; the first when all are.
fn first_explained(within: impl Iterator<Item = bool>) -> usize {
    within.enumerate().find(|(_, w)| !w).map_or(0, |(i, _)| i)
}
