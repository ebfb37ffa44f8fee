//! `cuguard export --format pprof`: reports and their histories as a heap profile.

use std::io::{self, Write};

use cuguard_format::Report;

use super::request::{Made, Request};
use crate::cli::CliError;
use crate::export::heap::{HeapError, HistoryAt, Process, When, heap};
use crate::export::pprof;
use crate::input::InputError;
use crate::output::{Format, Options};

/// `--format pprof`.
pub struct Pprof;

impl Format<Made> for Pprof {
    const NAME: &'static str = "pprof";
    const HELP: &'static str = "pprof's profile.proto, gzipped: a heap profile (inuse_space, alloc_space…) for go tool pprof";

    fn write(made: &Made, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        out.write_all(&made.bytes)
    }
}

/// Makes the heap profile of the reports and histories `args` names, at the end or at `--at`;
/// refuses `--between`.
pub(super) fn make(args: &Request) -> Result<Made, CliError> {
    if args.between.is_some() {
        return Err(CliError::Usage(
            "--between is memory-viz's: pprof takes --at".into(),
        ));
    }
    let mut processes = Vec::new();
    // Processes without a history, and why, for the one line that says so.
    let mut without: Vec<(String, String)> = Vec::new();
    for path in &args.paths {
        if crate::history::is_history_file(path)? {
            // Read now, so that a file that is not one is said before anything is written.
            crate::history::load(path)?;
            processes.push(Process {
                report: None,
                history: Some(HistoryAt::File(path.clone())),
            });
            continue;
        }
        let doc = cuguard_format::Document::read_with_limit(path, crate::input::max_report_bytes())
            .map_err(|e| CliError::Input(InputError::from(e)))?;
        for r in doc.into_reports() {
            let r: Report = r.map_err(|e| CliError::Input(InputError::from(e)))?;
            let history = match crate::history::of_report(&r, path) {
                Ok(_) => Some(HistoryAt::OfReport(path.clone())),
                Err(e) if args.at.is_some() => return Err(e.into()),
                Err(e) => {
                    without.push((r.process_name(), why_no_history(&r, &e)));
                    None
                }
            };
            processes.push(Process {
                report: Some(r),
                history,
            });
        }
    }
    let when = if args.at.is_some() {
        When::At
    } else {
        When::End
    };
    let alloc = without.is_empty();
    if let Some((first, why)) = without.first() {
        let others = match without.len() {
            1 => String::new(),
            2 => " (and 1 more process)".to_string(),
            n => format!(" (and {} more processes)", n - 1),
        };
        eprintln!(
            "cuguard: {}{others} has no history ({}): the profile holds inuse_space and inuse_objects only, no alloc_*",
            crate::wording::one_line(first),
            crate::wording::one_line(why)
        );
    }
    let profile = heap(&processes, when, args.at.as_deref(), alloc).map_err(|e| match e {
        HeapError::Input(e) => CliError::from(e),
        HeapError::Moment(why) => CliError::Usage(why),
    })?;
    let bytes = pprof::pprof(&profile);
    let said = format!(
        "cuguard: wrote {} ({}, {} sample{} of {} process{}; {})",
        crate::wording::one_line(&args.output.display().to_string()),
        crate::wording::bytes(bytes.len() as u64),
        profile.samples.len(),
        if profile.samples.len() == 1 { "" } else { "s" },
        processes.len(),
        if processes.len() == 1 { "" } else { "es" },
        profile
            .types
            .iter()
            .map(|t| t.kind)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(Made { bytes, said })
}

/// Why a report's history is not at hand, in a few words.
fn why_no_history(r: &Report, e: &InputError) -> String {
    match &r.history {
        None => "CUGUARD_HISTORY=0, or a cuguard without one".into(),
        Some(_) => e.to_string(),
    }
}
