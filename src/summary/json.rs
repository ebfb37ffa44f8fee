//! `--format json`: the [`Summary`] as one JSON document.
//!
//! The format is documented on [`Json`], the type that writes it.

use std::io::{self, Write};

use super::model::Summary;
use super::report::ReportSummary;
use super::sections::Sections;
use crate::output::{Format, Options};

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
/// sites[]            {site, location (str|null), leaked_bytes, leaks, processes, label, kind,
///                     owner, owner_label, owner_kind, stack[]}: across processes, most bytes first,
///                    at most --top (the added fields as in processes[].sites[])
/// sites_total        number of distinct sites across processes
/// owners[]           OWNER_SHARE: bytes held at the end by owner, all processes, most first
///                    (count: leaks)
/// cost               COST: what cuguard itself cost, every process that says summed (counts,
///                    times, bytes; sample_every and first_timed the largest); null when none says
/// processes[]        one per process, in input order:
///   source           the report file; "FILE[i]" for the i-th process of a merged report
///   process          {exe, argv[], pid, ppid, hostname, rank (int|null)}
///   complete, reason, tool_version, driver_version
///   leaked_bytes, leaks, released_by_context_destroy
///   devices[]        {device, name|null, total_bytes|null, leaked_bytes, leaks,
///                     peak_live_bytes|null, pool_reserved_bytes|null, limit_bytes (absent
///                     when the process had no limit there)}
///   contexts[]       {context (id|null), device, listed, primary, destroyed, destroyed_by|null,
///                     leaked_bytes, leaks}: contexts holding leaks, by device then id
///   sites[]          {site, location|null, leaked_bytes, leaks, apis[],
///                     label (the site for people, its location once: "name (file:line)",
///                            "on the autograd thread: AddmmBackward0::apply (…)",
///                            "operation: …", "framework: …"),
///                     kind ("user" | "operation" | "fallback" | null: the report does not say),
///                     owner, owner_label, owner_kind (who holds most of its bytes),
///                     stack[] (its largest stack's frames, mixed native and Python order,
///                              innermost first; empty without Python frames)}:
///                    most bytes first, at most --top
///   sites_total      number of distinct sites in this process
///   largest_leaks[]  {address ("0x…"), size, requested, api, memory, device, context|null, thread,
///                     seq, state, site, owner, label, tag (the program's name for it:
///                     cuguard.tag, cuguard_tag_push, cuguard.annotate; absent without one)}:
///                    largest first, at most --top
///   events[]         {kind, count}, most frequent first
///   events_dropped   events the shim saw but did not keep (0 when the report does not say)
///   faults[]         the shim's own problems
///   cost             COST: the report's cost as written ({sample_every, first_timed, hooks, stacks,
///                    python: {calls, timed, ns}, reports {written, ns}, heap_bytes}; see
///                    docs/report.schema.json), null in older reports
///   owners[]         OWNER_SHARE: bytes held at the end by owner, most first (count: leaks)
///   ooms[]           what each out-of-memory refusal saw, in order, at most --top:
///                    {seq, time_ms, thread, api, size, device, site SITE, stack[], refused_by
///                     ("driver" | "pool_limit" | "limit"), message|null, device_free_bytes|null,
///                     device_total_bytes|null, live_bytes, by_owner[] OWNER_SHARE (count:
///                     allocations, 0 where the report gave bytes only), sites[] SITE_BYTES
///                     (at most --top), sites_total, pool {reserved_bytes, free_bytes,
///                     largest_free_block}|null, other_processes[] {pid, bytes} (NVML's, most
///                     first, at most 16; absent: not known), other_processes_bytes (absent:
///                     not known), other_processes_note (why not known; absent otherwise)}
///   ooms_dropped     refusals not in ooms[] (the shim's ooms_dropped, and those beyond --top)
///   peaks[]          per device, what was live at its peak (the report's last peaks[] record):
///                    {device, time_ms, live_bytes, peak_live_bytes|null, by_owner[] OWNER_SHARE
///                     (count: allocations), sites[] SITE_BYTES (at most --top), sites_total}
///   growing[]        sites whose live bytes were still rising at the end of the run
///                    (cuguard::growth), most grown first, at most --top: {site, label,
///                     location|null, kind|null, owner, owner_label, owner_kind, devices[],
///                     from_bytes, to_bytes, grown_bytes, from_ms, to_ms (the rise: from the low
///                     before it to its maximum), trend (Kendall's tau-b), increases,
///                     last_part_ms (when the run's last third, from the low on, began),
///                     last_part_grown_bytes (how far it rose there above every value before),
///                     stack[]}
///   growth_not_told  why growth could not be told, or null when it could (or nothing was
///                    allocated): {samples (sample times in the run), needed, end_ms (the end of
///                     a Python program's code, else the report's), span_ms|null (from the first
///                     sample to the end; null: none before it), code_end (whether end_ms is
///                     the end of the code), interval_ms|null (the shim's sampling interval;
///                     null: sampling was off)}
///   reconciliation[] per device: {device, used_bytes|null, used_by ("process": NVML's figure for
///                     the process | "device": the whole device's | null), device_used_bytes|null,
///                     process_used_bytes|null, process_used_note|null, explained {program_bytes,
///                     framework_cache_bytes, library_bytes, driver_bytes, pool_idle_bytes,
///                     context_overhead_bytes, given_back_bytes}, framework_cache_label,
///                     unexplained_bytes|null (never negative), unexplained_note|null,
///                     context_overhead_estimate_bytes|null (the contexts' whole estimate, when
///                     less is counted), excess_bytes|null (by how much cuguard's figures exceed
///                     what is used), given_back_pending_bytes|null (given back by the pool with
///                     cuMemFreeAsync, held by the driver until a synchronizing call)}
///   versions         the versions that must match (absent when the report has none):
///                    {line (the text summary's versions line, without its label),
///                     driver_release|null, driver_cuda|null ("13.0"), runtimes[] {version
///                     (absent: unknown), path}, frameworks[] {name, version, package, cuda
///                     (absent: unknown), site}, mismatches[] {rule (an id of
///                     cuguard::versions::rules::RULES), message, citations[] (URLs)}}
///
/// SITE         {site (the key), label, location|null, kind|null}
/// SITE_BYTES   {site, label, location|null, kind|null, owner, owner_label, owner_kind, bytes,
///               allocations}: live bytes by site and owner, most first
/// OWNER_SHARE  {owner (id), kind ("program" | "framework_cache" | "library" | "driver"), label,
///               hint|null (what a framework cache's memory means), bytes, count}
/// ```
///
/// Sizes are integers (bytes); times are milliseconds since the process started. Fields may be
/// added; none will be removed or change meaning.
pub struct Json;

impl Format<Summary> for Json {
    const NAME: &'static str = "json";
    const HELP: &'static str = "One JSON document (see docs/cli.md)";

    /// Writes the summary as pretty-printed JSON and a newline, all of it (`options` do not apply).
    fn write(summary: &Summary, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        super::sections::write_in_sections::<Json>(summary, out, options)
    }
}

/// The document is written as `serde_json`'s pretty printer writes the whole [`Summary`]: its
/// fields up to `"processes": [`, then each process (indented one level deeper), then the end.
impl Sections for Json {
    fn head(summary: &Summary, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        let head = Summary {
            processes: Vec::new(),
            ..summary.clone()
        };
        let mut text = serde_json::to_vec_pretty(&head)?;
        // `"processes": []` ends the object: keep it open after the `[`.
        let end = b"[]\n}";
        if !text.ends_with(end) {
            return Err(io::Error::other("unexpected end of the summary's JSON"));
        }
        text.truncate(text.len() - end.len() + 1);
        out.write_all(&text)
    }

    fn process(i: usize, p: &ReportSummary, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        out.write_all(if i == 0 { b"\n    " } else { b",\n    " })?;
        let text = serde_json::to_vec_pretty(p)?;
        // JSON strings hold no raw newline: every newline starts a line to indent.
        for (k, line) in text.split(|b| *b == b'\n').enumerate() {
            if k > 0 {
                out.write_all(b"\n    ")?;
            }
            out.write_all(line)?;
        }
        Ok(())
    }

    fn tail(count: usize, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        out.write_all(if count == 0 { b"]\n}\n" } else { b"\n  ]\n}\n" })
    }
}
