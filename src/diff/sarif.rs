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
//!   shrunk at a peak are not results.
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
use crate::history::compare::{PeakChange, PeakSite};
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
    // Each site once, at the first peak it is new or grown at; the later ones named.
    let mut first: Vec<(&PeakChange, &PeakSite)> = Vec::new();
    let mut also: HashMap<&str, Vec<&str>> = HashMap::new();
    for c in &p.peaks {
        for s in c
            .sites
            .iter()
            .filter(|s| matches!(s.change, "new" | "grown"))
        {
            match also.get_mut(s.label.as_str()) {
                Some(later) => later.push(&c.what),
                None => {
                    also.insert(&s.label, Vec::new());
                    first.push((c, s));
                }
            }
        }
    }
    for (c, s) in first {
        out.push(Finding {
            rule: "peak_increase".into(),
            level: "warning",
            message: peak_message(c, s, &also[s.label.as_str()]),
            site: s.site.clone(),
            place: Some(&s.place),
            suppressed: None,
        });
    }
    out
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
/// most 3 of the `later` peaks named.
fn peak_message(c: &PeakChange, s: &PeakSite, later: &[&str]) -> String {
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
    let mut also = String::new();
    if !later.is_empty() {
        let named: Vec<String> = later
            .iter()
            .take(3)
            .map(|w| format!("{w}'s peak"))
            .collect();
        also = format!("; also at {}", named.join(", "));
        if later.len() > 3 {
            also.push_str(&format!(", +{} more", later.len() - 3));
        }
    }
    format!(
        "{} at {}'s peak ({} → {}, {}): {what}{also}; site: {}",
        s.change,
        c.what,
        bytes(c.base_peak_bytes),
        bytes(c.new_peak_bytes),
        delta_bytes(i128::from(c.delta_bytes)),
        s.label
    )
}
