//! `--format json`: the [`Summary`] as one JSON document.
//!
//! The format is documented on [`Json`], the type that writes it.

use std::io::{self, Write};

use super::Summary;
use crate::format::{Format, Options};

/// `--format json`: the [`Summary`] as one pretty-printed JSON document and a newline.
///
/// The document is an object:
///
/// ```text
/// reports            number of process reports read
/// complete_reports   how many of them have complete: true
/// leaked_bytes       bytes leaked, all processes
/// leaks              leaks, all processes
/// events[]           {kind, count}, all processes, most frequent first
/// sites[]            {site, location (str|null), leaked_bytes, leaks, processes}: across processes,
///                    most bytes first, at most --top
/// sites_total        number of distinct sites across processes
/// processes[]        one per process, in input order:
///   source           the report file; "FILE[i]" for the i-th process of a merged report
///   process          {exe, argv[], pid, ppid, hostname, rank (int|null)}
///   complete, reason, tool_version, driver_version
///   leaked_bytes, leaks, released_by_context_destroy
///   devices[]        {device, name|null, total_bytes|null, leaked_bytes, leaks,
///                     peak_live_bytes|null, pool_reserved_bytes|null}
///   contexts[]       {context (id|null), device, listed, primary, destroyed, destroyed_by|null,
///                     leaked_bytes, leaks}: contexts holding leaks, by device then id
///   sites[]          {site, location|null, leaked_bytes, leaks, apis[]}: most bytes first, at most --top
///   sites_total      number of distinct sites in this process
///   largest_leaks[]  {address ("0x…"), size, requested, api, memory, device, context|null, thread,
///                     seq, state, site}: largest first, at most --top
///   events[]         {kind, count}, most frequent first
///   events_dropped   events the shim saw but did not keep (0 when the report does not say)
///   faults[]         the shim's own problems
/// ```
///
/// Sizes are integers (bytes). Fields may be added; none will be removed or change meaning.
pub struct Json;

impl Format<Summary> for Json {
    const NAME: &'static str = "json";
    const HELP: &'static str = "One JSON document (see docs/cli.md)";

    /// Writes the summary as pretty-printed JSON and a newline, all of it (`options` do not apply).
    fn write(summary: &Summary, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, summary)?;
        out.write_all(b"\n")
    }
}
