//! `--format sarif`: what NEW does worse than BASE as a SARIF 2.1.0 log, for code scanning
//! (GitHub's `upload-sarif`, GitLab, IDEs), in `cuguard check --format sarif`'s log
//! ([`crate::check::sarif_log`]: the same tool, result locations and fingerprints).
//!
//! Two rules ([`RULES`]), each result of level `warning` (`diff` reports; `check` gates):
//!
//! - `cuguard/leak_increase`: one result per leak site that is *new* (only NEW leaks there) or
//!   *grown* (more bytes, or as many bytes in more leaks); fixed and shrunk sites are not
//!   results;
//! - `cuguard/peak_increase`: where each side is one process with a history, one result per
//!   site *new* or *grown* at a compared peak (the run's, each phase occurrence's), once per site:
//!   at the first such peak (the run's first), the others named in its message; sites gone or
//!   shrunk at a peak are not results. Where the sides are jobs compared pair by pair (merged
//!   reports, rank by rank), still once per site: at the first pair (in key order) and peak it
//!   is new or grown at, the message naming the pair first (`rank 1: new at the run's peak …`)
//!   and the other pairs where it is (`; also on rank 4, rank 6`).
//!
//! Each result is placed as `check` places its findings: at the first frame, from the site's
//! outward, whose file is under `--source-root` (`physicalLocation`, with `region.startLine`),
//! and always at the site's function (`logicalLocations`); `partialFingerprints["cuguard/v1"]`
//! hashes the rule id and the site's fingerprint (else its key), the same for the same code on
//! every run. `run.properties.cuguard` carries each side's totals, `{base, new}`, each
//! `{reports, leaked_bytes, leaks}`. Event counts are not results.
//!
//! ```text
//! {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "cuguard", "rules": [
//!     {"id": "cuguard/leak_increase", …, "defaultConfiguration": {"level": "warning"}},
//!     {"id": "cuguard/peak_increase", …}]}},
//!   "results": [{"ruleId": "cuguard/peak_increase", "ruleIndex": 1, "level": "warning",
//!     "message": {"text": "new at the run's peak (144.0 MiB → 384.0 MiB, +240.0 MiB): 256.0 MiB, none in the base run; also at step #4's peak; site: heavy_site (phase_steps.c:50)"},
//!     "locations": [{"physicalLocation": {"artifactLocation": {"uri": "phase_steps.c",
//!       "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 50}}, "logicalLocations": […]}],
//!     "partialFingerprints": {"cuguard/v1": "…"}}],
//!   "properties": {"cuguard": {"base": {…}, "new": {…}}}}]}
//! ```

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::json;

use super::model::{Change, Diff, SiteChange};
use crate::check::places::source_root;
use crate::check::sarif_log::{self, Finding, Rule, describe, rule_id};
use crate::history::compare::{PeakChange, PeakSite, Peaks};
use crate::output::{Format, Options};
use crate::wording::{bytes, delta_bytes, plural};

/// The rules, in `tool.driver.rules` order.
pub const RULES: &[Rule] = &[
    Rule {
        id: "leak_increase",
        name: "LeakIncrease",
        short: "A site leaks more GPU memory than in the base run",
        full: "Memory allocated at this site was still allocated when the process ended, and \
               more of it than in the base run of `cuguard diff BASE NEW`: the site leaks only \
               in the new run, or it leaks more bytes there, or as many bytes in more \
               allocations.",
        fix: "Free what this site allocates before the process ends (`cuMemFree`, `cudaFree`, \
              or drop the last reference to the tensor or buffer that holds it); the change \
              between the two runs is what keeps it.",
    },
    Rule {
        id: "peak_increase",
        name: "PeakIncrease",
        short: "A site holds more GPU memory at a peak than in the base run",
        full: "At the run's peak of live GPU memory, or at the peak of one of its phases (an \
               NVTX range or a cuguard.phase, aligned with the base run's by name and \
               occurrence), this site held memory that it held none of at the base run's peak \
               (new), or more than there (grown).",
        fix: "Find what this site allocates at the peak that the base run did not (a larger \
              batch, a buffer kept longer, a temporary not freed before the next one) and \
              shrink it or free it sooner.",
    },
];

/// `help` of the rule `id`, in Markdown on one line: `fix`, then how to gate on it (`diff`
/// never fails).
fn help(id: &str, fix: &str) -> String {
    let gate = match id {
        "peak_increase" => {
            "`cuguard diff` only reports: `cuguard check --baseline BASE --max-peak-growth 5% \
             --by phase NEW` fails when a peak grows past a limit."
        }
        _ => {
            "`cuguard diff` only reports: `cuguard check --baseline BASE NEW` fails on new and \
             grown leaks (`--max-leaked-bytes` and `--max-leaks` allow some), and a suppression \
             (`cuguard suppressions`) accepts a leak kept on purpose."
        }
    };
    format!("{fix} {gate}")
}

/// `--format sarif`.
pub struct Sarif;

impl Format<Diff> for Sarif {
    const NAME: &'static str = "sarif";
    const HELP: &'static str = "SARIF 2.1.0, for code scanning (a warning per new or grown site)";

    /// Writes the log as pretty-printed JSON and a newline (`options` do not apply).
    fn write(diff: &Diff, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        let root = match &diff.source_root {
            Some(r) => r.clone(),
            None => source_root(None),
        };
        let rules = RULES
            .iter()
            .map(|r| (r.id.to_string(), describe(r, &help(r.id, r.fix), "warning")))
            .collect();
        let properties = json!({"base": diff.base, "new": diff.new});
        // Every finding is of a rule above: `unknown` is never asked.
        let unknown = |kind: &str| json!({"id": rule_id(kind)});
        let log = sarif_log::log(rules, &findings(diff), &root, unknown, properties);
        serde_json::to_writer_pretty(&mut *out, &log)?;
        out.write_all(b"\n")
    }
}

/// The diff's findings, each of level `warning`: the new and grown leak sites (new first, as
/// the diff lists them), then the sites new or grown at the compared peaks (see the module doc).
pub(crate) fn findings(diff: &Diff) -> Vec<Finding<'_>> {
    let mut out: Vec<Finding<'_>> = diff
        .sites
        .iter()
        .filter(|s| matches!(s.change, Change::New | Change::Grown))
        .map(|s| Finding {
            rule: "leak_increase".into(),
            level: "warning",
            message: leak_message(s),
            site: s.site.clone(),
            place: diff.places.get(&s.site),
            suppressed: None,
        })
        .collect();
    let Some(p) = &diff.peaks else { return out };
    // The peaks in order, each with its pair's name where the sides are jobs.
    let peaks: Vec<(Option<&str>, &PeakChange)> = match p {
        Peaks::One(d) => d.peaks.iter().map(|c| (None, c)).collect(),
        Peaks::Job(job) => job
            .processes
            .iter()
            .flat_map(|n| n.peaks.peaks.iter().map(|c| (Some(n.name.as_str()), c)))
            .collect(),
    };
    // Each site once, at the first peak it is new or grown at (of the first pair that has it);
    // the pair's later peaks and the other pairs named.
    let mut first: Vec<First<'_>> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (who, c) in peaks {
        for s in c
            .sites
            .iter()
            .filter(|s| matches!(s.change, "new" | "grown"))
        {
            match index.get(s.label.as_str()) {
                Some(&i) => {
                    let f = &mut first[i];
                    if f.who == who {
                        f.later.push(&c.what);
                    } else if f.others.last().copied() != who {
                        f.others.extend(who);
                    }
                }
                None => {
                    index.insert(&s.label, first.len());
                    first.push(First {
                        who,
                        change: c,
                        site: s,
                        later: Vec::new(),
                        others: Vec::new(),
                    });
                }
            }
        }
    }
    for f in first {
        out.push(Finding {
            rule: "peak_increase".into(),
            level: "warning",
            message: peak_message(&f),
            site: f.site.site.clone(),
            place: Some(&f.site.place),
            suppressed: None,
        });
    }
    out
}

/// A site new or grown at a peak, where it is first: the pair (`rank 3`, for jobs), the peak
/// and the site; the pair's later peaks it is new or grown at, and the other pairs'.
struct First<'d> {
    who: Option<&'d str>,
    change: &'d PeakChange,
    site: &'d PeakSite,
    later: Vec<&'d str>,
    others: Vec<&'d str>,
}

/// `new leak: 4.0 MiB in 1 allocation (none in the base run); site: …`, or `grown leak: +4.0
/// MiB, +1 leak: 4.0 MiB in 1 allocation → 8.0 MiB in 2 allocations; site: …`.
fn leak_message(s: &SiteChange) -> String {
    let allocations = |n: u64| plural(n, "allocation", "allocations");
    if s.change == Change::New {
        return format!(
            "new leak: {} in {} (none in the base run); site: {}",
            bytes(s.new_bytes),
            allocations(s.new_leaks),
            s.label
        );
    }
    format!(
        "grown leak: {}, {:+} {}: {} in {} → {} in {}; site: {}",
        delta_bytes(s.delta_bytes),
        s.delta_leaks,
        if s.delta_leaks.abs() == 1 {
            "leak"
        } else {
            "leaks"
        },
        bytes(s.base_bytes),
        allocations(s.base_leaks),
        bytes(s.new_bytes),
        allocations(s.new_leaks),
        s.label
    )
}

/// `new at the run's peak (144.0 MiB → 384.0 MiB, +240.0 MiB): 256.0 MiB, none in the base run;
/// also at step #4's peak; site: …` (`grown at …: +16.0 MiB, 32.0 MiB → 48.0 MiB`), with at
/// most 3 of the later peaks named; for jobs, the pair first (`rank 1: new at …`) and at most 3
/// of the other pairs named (`; also on rank 4, rank 6`).
fn peak_message(f: &First<'_>) -> String {
    let (c, s) = (f.change, f.site);
    let what = if s.change == "new" {
        format!("{}, none in the base run", bytes(s.new_bytes))
    } else {
        format!(
            "{}, {} → {}",
            delta_bytes(i128::from(s.delta_bytes)),
            bytes(s.base_bytes),
            bytes(s.new_bytes)
        )
    };
    let named = |list: &[&str], each: &dyn Fn(&str) -> String| {
        let mut out: Vec<String> = list.iter().take(3).map(|w| each(w)).collect();
        if list.len() > 3 {
            out.push(format!("+{} more", list.len() - 3));
        }
        out.join(", ")
    };
    let mut also = String::new();
    if !f.later.is_empty() {
        also = format!(
            "; also at {}",
            named(&f.later, &|w: &str| format!("{w}'s peak"))
        );
    }
    if !f.others.is_empty() {
        also.push_str(&format!(
            "; also on {}",
            named(&f.others, &|w: &str| w.to_string())
        ));
    }
    let who = f.who.map_or(String::new(), |w| format!("{w}: "));
    format!(
        "{who}{} at {}'s peak ({} → {}, {}): {what}{also}; site: {}",
        s.change,
        c.what,
        bytes(c.base_peak_bytes),
        bytes(c.new_peak_bytes),
        delta_bytes(i128::from(c.delta_bytes)),
        s.label
    )
}
