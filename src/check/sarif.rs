//! `--format sarif`: the verdict as a SARIF 2.1.0 log, for code scanning (GitHub's
//! `upload-sarif`, GitLab, IDEs).
//!
//! One run; its `tool.driver` is cuguard, with one rule per kind of finding the check can fail
//! on ([`RULES`]: `cuguard/leak`, `cuguard/growth`, and one per event kind,
//! `cuguard/double_free`, …). Each rule says what it means (`shortDescription`,
//! `fullDescription`) and what to do (`help`, text and Markdown on one line: how to fix it, then
//! how to accept it: a suppression, a baseline, a limit). The driver has an `informationUri`
//! only when the package's repository is a real web address (none now: cuguard has no public
//! site, and a placeholder would send people nowhere; the property is optional). Its results:
//!
//! - one per failing finding, level `error`: each counting leak site when the leaks exceed a
//!   limit, each site that grew by more than `--max-growth` (one per process), each site with
//!   events of a failing kind;
//! - one per suppressed leak or event site, level `note`, with `suppressions: [{"kind":
//!   "external", "justification": the rule}]`.
//!
//! Each result is located at the first frame, from the site's outward, whose file is under the
//! source root (`--source-root`, see [`super::places`]): `physicalLocation.artifactLocation`
//! `{uri: relative path, uriBaseId: "%SRCROOT%"}` and `region.startLine`; the run's
//! `originalUriBaseIds` gives `%SRCROOT%` as a `file://` URI. Every location also has
//! `logicalLocations`: the site's function (and its module), so a site with no file under the
//! root still says where it is. `partialFingerprints["cuguard/v1"]` hashes the rule id and the
//! shim's fingerprint of the site (else the site key): equal across runs of the same code, never
//! made of addresses, pids or times. `run.properties.cuguard` carries `{passed, failures[]}`.
//!
//! Texts for people (messages, names, the failures, a suppression's rule, an unknown event
//! kind's rule) have every character [`cuguard_format::needs_escape`] names written as the text
//! output writes it (`\n`, `\u{202e}`): JSON escapes control characters, but a viewer shows NEL,
//! U+2028 and the reordering characters as they are. Fingerprints hash the texts as reported.
//!
//! How a finding becomes a result, and the log around the results, are [`super::sarif_log`]'s,
//! which `cuguard diff --format sarif` shares; this file says which findings the check has.
//!
//! ```text
//! {"version": "2.1.0", "$schema": "…sarif-2.1.0.json",
//!  "runs": [{"tool": {"driver": {"name": "cuguard", "version", "rules": [
//!              {"id": "cuguard/leak", "name": "Leak", "shortDescription": {"text"},
//!               "fullDescription": {"text"}, "help": {"text", "markdown"},
//!               "defaultConfiguration": {"level": "error"}}, …]}},
//!            "originalUriBaseIds": {"%SRCROOT%": {"uri": "file:///src/app/"}},
//!            "results": [{"ruleId": "cuguard/leak", "ruleIndex": 0, "level": "error",
//!              "message": {"text": "3.0 MiB leaked in 2 allocations (cuMemAlloc_v2) by 1 process (train[4242]); owner: the program"},
//!              "locations": [{"physicalLocation": {"artifactLocation": {"uri": "src/train.c",
//!                 "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 42}},
//!                 "logicalLocations": [{"name": "make_buffers", "kind": "function"}]}],
//!              "partialFingerprints": {"cuguard/v1": "9c3e…"}}, …],
//!            "properties": {"cuguard": {"passed": false, "failures": […]}}}]}
//! ```

use std::io::{self, Write};
use std::path::Path;

use cuguard_format::escaped;
use serde_json::{Value, json};

use super::places::{Located, source_root};
pub use super::sarif_log::Rule;
use super::sarif_log::{Finding, describe, help_property, rule_id};
use super::verdict::Verdict;
use crate::output::{Format, Options};
use crate::wording::{bytes, millis, plural};

/// The rules, in `tool.driver.rules` order (an event kind not listed gets a rule after them).
pub const RULES: &[Rule] = &[
    Rule {
        id: "leak",
        name: "Leak",
        short: "GPU memory leaked",
        full: "Memory allocated through the CUDA driver was still allocated when the process \
               ended (for a Python program checked on its end: when its code ended, and nothing \
               held it), and the leaks that count exceed the limits of `cuguard check`.",
        fix: "Free the allocation before the process ends (`cuMemFree`, `cudaFree`, or drop the \
              last reference to the tensor or buffer that holds it).",
    },
    Rule {
        id: "growth",
        name: "Growth",
        short: "GPU memory kept growing",
        full: "The live memory allocated at this site kept growing until the end of the run, \
               by more than `cuguard check --max-growth`.",
        fix: "Find what this site keeps adding to (a list, a cache or a buffer that grows every \
              step) and bound it or free what it no longer needs.",
    },
    Rule {
        id: "peak_growth",
        name: "PeakGrowth",
        short: "A run needs more GPU memory than its baseline",
        full: "The run's peak of live GPU memory, or the peak of one of its phases (an NVTX \
               range or a cuguard.phase), grew past `cuguard check --max-peak-growth` against \
               the baseline's run; the result points at the site that grew most at that peak.",
        fix: "Find what this site allocates at the peak that the baseline did not (a larger \
              batch, a buffer kept longer, a temporary not freed before the next one) and \
              shrink or free it, or raise the limit if the growth is intended.",
    },
    Rule {
        id: "double_free",
        name: "DoubleFree",
        short: "GPU memory freed twice",
        full: "A pointer was freed a second time.",
        fix: "Free each allocation once: give the memory one owner, or clear the pointer when it \
              is freed.",
    },
    Rule {
        id: "invalid_free",
        name: "InvalidFree",
        short: "Invalid free of GPU memory",
        full: "The driver refused a free: the pointer was not an allocation, or pointed inside one.",
        fix: "Free only a pointer an allocation returned, itself: not an offset into a block, \
              nor memory of another allocator.",
    },
    Rule {
        id: "untracked_free",
        name: "UntrackedFree",
        short: "Free of memory cuguard never saw allocated",
        full: "A pointer was freed that cuguard never saw allocated; the free was forwarded to \
               the driver.",
        fix: "Run the whole program under `cuguard run`, so that its allocations are seen from \
              its start: memory allocated before the shim was loaded is freed untracked.",
    },
    Rule {
        id: "free_in_wrong_context",
        name: "FreeInWrongContext",
        short: "GPU memory freed in another context",
        full: "An allocation was freed while another CUDA context than its own was current.",
        fix: "Make the allocation's own context current (`cuCtxSetCurrent`, or its device) \
              before freeing it.",
    },
    Rule {
        id: "free_after_context_destroy",
        name: "FreeAfterContextDestroy",
        short: "Free after the context was destroyed",
        full: "An allocation was freed after its CUDA context had been destroyed (and the \
               allocation with it).",
        fix: "Free allocations before their context is destroyed (`cuCtxDestroy`, \
              `cudaDeviceReset`): destroying it already released them.",
    },
    Rule {
        id: "context_destroyed_with_live_allocations",
        name: "ContextDestroyedWithLiveAllocations",
        short: "CUDA context destroyed with live allocations",
        full: "A CUDA context was destroyed while allocations made in it were still live.",
        fix: "Free the context's allocations before destroying it: its destruction releases \
              them, and hides leaks that would otherwise show.",
    },
    Rule {
        id: "alloc_failed",
        name: "AllocFailed",
        short: "GPU allocation failed (out of memory)",
        full: "An allocation call through the CUDA driver failed, most often for lack of memory.",
        fix: "Lower the program's peak (smaller batches; free what is no longer needed before \
              allocating more); `cuguard summary` says what was live.",
    },
    Rule {
        id: "ipc_refused",
        name: "IpcRefused",
        short: "IPC export refused",
        full: "An IPC export of a pointer from a memory pool was refused.",
        fix: "Allocate memory to be shared between processes 2 MiB or larger (it then has a \
              chunk of its own in cuguard's pool), or run with `CUGUARD_POOL=0`.",
    },
    Rule {
        id: "warn_threshold_crossed",
        name: "WarnThresholdCrossed",
        short: "Live GPU memory crossed the warning threshold",
        full: "Live memory crossed the threshold the run was configured to warn at.",
        fix: "Lower the program's peak of live memory, or raise `CUGUARD_WARN_AT`.",
    },
    Rule {
        id: "shim_fault",
        name: "ShimFault",
        short: "A fault of cuguard itself",
        full: "cuguard's shim met a problem of its own while recording.",
        fix: "The report's `faults` say what went wrong, and the report may be incomplete: \
              please report it to cuguard's maintainers with the report.",
    },
];

/// `--format sarif`.
pub struct Sarif;

/// `help` of the rule for finding `kind`, in Markdown on one line: `fix`, then how to accept
/// the finding instead.
fn help(kind: &str, fix: &str) -> String {
    let accept = match kind {
        "leak" => "If it is kept on purpose, suppress the site: `cuguard suppressions REPORTS` \
                   writes a `leak:` rule per site, for `cuguard check --suppressions FILE`; \
                   `--baseline` counts only new and grown leaks, and `--max-leaked-bytes` and \
                   `--max-leaks` allow some."
            .to_string(),
        "growth" => "Growth is measured on the live memory over the run, so suppressions and \
                     baselines do not apply to it: where it is expected, raise `--max-growth`."
            .to_string(),
        "peak_growth" => "To accept it, raise `--max-peak-growth`, or make this run the \
                          baseline: suppressions do not apply to peaks."
            .to_string(),
        kind => format!(
            "To accept it, suppress it: `cuguard suppressions REPORTS` writes an \
             `event:{kind}` rule per site, for `cuguard check --suppressions FILE`; \
             `--fail-on-events` chooses the kinds that fail."
        ),
    };
    if fix.is_empty() {
        accept
    } else {
        format!("{fix} {accept}")
    }
}

impl Format<Verdict> for Sarif {
    const NAME: &'static str = "sarif";
    const HELP: &'static str = "SARIF 2.1.0, for code scanning (one result per failing site)";

    /// Writes the log as pretty-printed JSON and a newline (`options` do not apply).
    fn write(verdict: &Verdict, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        let root = match &verdict.source_root {
            Some(r) => r.clone(),
            None => source_root(None),
        };
        let log = log(verdict, &root)?;
        serde_json::to_writer_pretty(&mut *out, &log)?;
        out.write_all(b"\n")
    }
}

/// The processes for a message: `1 process (train[4242])`, `7 processes (a[1], b[2], … +2)`.
pub(crate) fn processes(names: &[String], count: u64) -> String {
    let mut listed = names.join(", ");
    if count > names.len() as u64 {
        listed.push_str(&format!(", +{}", count - names.len() as u64));
    }
    format!("{} ({listed})", plural(count, "process", "processes"))
}

/// The failing peaks of `--max-peak-growth`, each at the site that grew most at it; for two
/// jobs, one per failing peak of each pair, its message naming the pair (`rank 3: …`).
fn peak_findings<'v>(verdict: &'v Verdict, out: &mut Vec<Finding<'v>>) {
    let Some(p) = &verdict.peaks else { return };
    for f in p.failing() {
        let j = f.peak;
        let site = j.change.sites.first();
        let at = site.map_or(String::new(), |s| {
            format!(
                "; at its peak {} {} ({})",
                s.label,
                s.change,
                crate::wording::delta_bytes(i128::from(s.delta_bytes))
            )
        });
        out.push(Finding {
            rule: "peak_growth".into(),
            level: "error",
            message: format!(
                "{}{}, over --max-peak-growth {} ({} against {}){at}",
                f.who.map_or(String::new(), |w| format!("{w}: ")),
                super::peaks::growth_words(&j.change),
                p.limit,
                f.process.new_process,
                f.process.base_process
            ),
            site: site.map_or_else(|| j.change.what.clone(), |s| s.site.clone()),
            place: site.and_then(|s| verdict.places.get(&s.site)),
            suppressed: None,
        });
    }
}

/// The failing findings of a verdict, and, with `suppressed`, the suppressed ones, in order:
/// leak sites, growth, events, suppressed.
fn findings(verdict: &Verdict, suppressed: bool) -> io::Result<Vec<Finding<'_>>> {
    let mut out = Vec::new();
    if verdict.leaks_fail() {
        // Counting sites come first; [`kept::SiteVerdicts::iter`] makes them one at a time.
        let sites: Vec<_> = verdict
            .sites
            .iter()
            .take(verdict.sites.counting())
            .collect();
        for s in sites {
            let place = verdict.places.get(&s.site);
            let owners = place
                .map(|p| p.owners.iter().cloned().collect::<Vec<_>>().join(", "))
                .filter(|o| !o.is_empty())
                .unwrap_or_else(|| "the program".into());
            let counted = if s.counted_bytes < s.leaked_bytes {
                format!(
                    " ({} new or grown since the baseline)",
                    bytes(s.counted_bytes)
                )
            } else {
                String::new()
            };
            out.push(Finding {
                rule: "leak".into(),
                level: "error",
                message: format!(
                    "{} leaked in {}{counted} ({}) by {}; owner: {owners}; site: {}",
                    bytes(s.leaked_bytes),
                    plural(s.leaks, "allocation", "allocations"),
                    s.apis.join(", "),
                    processes(&s.processes, s.process_count),
                    s.label,
                ),
                site: s.site,
                place,
                suppressed: None,
            });
        }
    }
    if verdict.limits.max_growth.is_some() {
        for g in verdict.growing.iter().filter(|g| g.failing) {
            let grown = &g.growth.growth;
            out.push(Finding {
                rule: "growth".into(),
                level: "error",
                message: format!(
                    "{} grew by {} over {} in 1 process ({}); owner: {}; site: {}",
                    g.growth.label,
                    bytes(grown.grown_bytes),
                    millis(grown.to_ms.saturating_sub(grown.from_ms)),
                    g.process,
                    g.growth.owner_label,
                    g.growth.label,
                ),
                site: g.growth.site.clone(),
                place: verdict.places.get(&g.growth.site),
                suppressed: None,
            });
        }
    }
    peak_findings(verdict, &mut out);
    for e in verdict.events.iter().filter(|e| e.failing) {
        out.push(Finding {
            rule: e.kind.clone(),
            level: "error",
            message: format!(
                "{} {} event{} at {}",
                e.counted,
                e.kind,
                if e.counted == 1 { "" } else { "s" },
                e.site
            ),
            site: e.site.clone(),
            place: verdict.places.get(&e.site),
            suppressed: None,
        });
    }
    if suppressed {
        for s in &verdict.suppressed_sites {
            let what = if s.kind == "leak" {
                format!(
                    "{} leaked in {}",
                    bytes(s.bytes),
                    plural(s.count, "allocation", "allocations")
                )
            } else {
                format!(
                    "{} {} event{}",
                    s.count,
                    s.kind,
                    if s.count == 1 { "" } else { "s" }
                )
            };
            let rule = verdict.suppressions.get(s.rule);
            out.push(Finding {
                rule: s.kind.clone(),
                level: "note",
                message: format!(
                    "{what} by {} at {} (suppressed)",
                    processes(&s.processes, s.process_count),
                    s.site
                ),
                site: s.site.clone(),
                place: verdict.places.get(&s.site),
                suppressed: Some(match rule {
                    Some(r) => format!("{}:{}: {}", r.file, r.line, r.rule),
                    None => "a suppression rule".into(),
                }),
            });
        }
    }
    Ok(out)
}

/// A failing finding for workflow commands: its rule, message and place in the source.
pub(crate) struct Failing {
    /// Rule id.
    pub rule: String,
    /// For people.
    pub message: String,
    /// Under the source root, when found.
    pub located: Option<Located>,
}

/// The failing findings with their places under `root` (see [`findings`]).
pub(crate) fn failing(verdict: &Verdict, root: &Path) -> io::Result<Vec<Failing>> {
    Ok(findings(verdict, false)?
        .into_iter()
        .map(|f| Failing {
            located: f.place.and_then(|p| p.locate(root)),
            rule: f.rule,
            message: f.message,
        })
        .collect())
}

/// The log as a JSON value.
fn log(verdict: &Verdict, root: &Path) -> io::Result<Value> {
    let findings = findings(verdict, true)?;
    let rules = RULES
        .iter()
        .map(|r| (r.id.to_string(), describe(r, &help(r.id, r.fix), "error")))
        .collect();
    let properties = json!({
        "passed": verdict.passed,
        "failures": verdict.failures.iter().map(|f| escaped(f)).collect::<Vec<_>>(),
    });
    Ok(super::sarif_log::log(
        rules,
        &findings,
        root,
        |kind| unknown_kind_rule(&escaped(kind)),
        properties,
    ))
}

/// The rule of events of `kind` (escaped), a kind this cuguard does not describe.
fn unknown_kind_rule(kind: &str) -> Value {
    json!({
        "id": rule_id(kind),
        "name": kind,
        "shortDescription": {"text": format!("{kind} events")},
        "fullDescription": {"text": format!(
            "Events of kind {kind} in the report: a kind this cuguard does not \
             describe (the report may be from a newer cuguard)."
        )},
        "help": help_property(&help(
            kind,
            "`cuguard check --format json REPORTS` lists these events by site.",
        )),
        "defaultConfiguration": {"level": "error"},
    })
}

#[cfg(test)]
mod tests {
    use super::{RULES, help};

    #[test]
    fn every_rule_says_how_to_fix_it_and_how_to_accept_it() {
        for r in RULES {
            let help = help(r.id, r.fix);
            assert!(help.starts_with(r.fix) && !r.fix.is_empty(), "{}", r.id);
            assert!(!help.contains('\n'), "{}", r.id);
            let accept = match r.id {
                "growth" => "--max-growth",
                "peak_growth" => "--max-peak-growth",
                _ => "cuguard suppressions",
            };
            assert!(help.contains(accept), "{}: {help}", r.id);
        }
        assert!(help("future_kind", "").starts_with("To accept it"));
        assert!(help("future_kind", "").contains("`event:future_kind`"));
    }
}
