//! `--format json`: the [`Verdict`] as one JSON document.
//!
//! The format is documented on [`Json`], the type that writes it.

use std::io::{self, Write};

use super::verdict::Verdict;
use crate::output::{Format, Options};

/// `--format json`: the [`Verdict`] as one pretty-printed JSON document and a newline.
///
/// ```text
/// passed              bool
/// failures[]          why it fails, one line each (empty when it passes)
/// limits              {max_leaked_bytes (int|null: not limited), max_leaks (int|null),
///                      max_growth (int|null: growth not checked),
///                      owners ("all" | {"program": [ids or kinds checked besides the program's]}),
///                      fail_on_events ("none" | "all" | {"kinds": [...]}), require_complete}
/// baseline            whether a baseline was used
/// reports             process reports read
/// incomplete[]        sources of incomplete reports
/// growth_not_told[]   {source, samples, needed, end_ms, span_ms|null, code_end,
///                      interval_ms|null}: reports whose run had too few samples to tell growth
///                     (see cuguard::growth::not_told); with --max-growth, not checked for it
/// leaked_bytes, leaks                 unsuppressed, all processes
/// counted_bytes, counted_leaks        what counts against the limits (new or grown with a baseline)
/// suppressed_bytes, suppressed_leaks, suppressed_events
/// other_owners[]      {owner, kind, label, hint|null, bytes, count (leaks)}: unsuppressed leaks not
///                     checked because of their owner, most bytes first
/// sites[]             {site, location|null, status ("leak" | "new" | "grown" | "baselined"),
///                      leaked_bytes, leaks, baseline_bytes, baseline_leaks, counted_bytes,
///                      counted_leaks, apis[], processes[] (at most 5 "exe[pid]"), process_count,
///                      label (the site for people, its location once),
///                      kind ("user" | "operation" | "fallback" | null)}
///                     counting sites first, most counted bytes first
/// growing[]           {process ("exe[pid]"), site, label, location|null, kind|null, owner,
///                      owner_label, owner_kind, devices[], from_bytes, to_bytes, grown_bytes,
///                      from_ms, to_ms, trend, increases, last_part_ms, last_part_grown_bytes,
///                      stack[], failing}: sites of checked owners still growing at the end of
///                     the run (see cuguard::growth), failing first, most grown first
/// events[]            {kind, site, count, baseline_count, counted, failing}: failing first
/// suppressions[]      {file, line, rule, matched}: every rule; matched 0 = unused
/// processes[]         {source, name, hostname, rank|null, worker (only when labelled), who
///                      ("rank 3 (host node17, pid 9001)"), complete, leaked_bytes, leaks, failed,
///                      failing_sites[] [site, bytes, leaks], failing_events[] [kind, site, count],
///                      failing_growth[] [site, grown bytes]}
/// ```
pub struct Json;

impl Format<Verdict> for Json {
    const NAME: &'static str = "json";
    const HELP: &'static str = "One JSON document (see docs/cli.md)";

    /// Writes the verdict as pretty-printed JSON and a newline, all of it (`options` do not apply).
    fn write(verdict: &Verdict, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, verdict)?;
        out.write_all(b"\n")
    }
}
