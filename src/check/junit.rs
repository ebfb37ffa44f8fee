//! `--format junit`: the verdict as JUnit XML, for CI systems that show test results.
//!
//! One `<testsuite name="cuguard check">` with a test case per process (`classname`
//! `cuguard.process`, name `exe[pid] (host, rank R)`, `exe[pid] (host, worker W)` or
//! `exe[pid] (host)`; the failure message of a ranked or labelled worker process starts with
//! who failed, `rank 3 (host node17, pid 9001) failed: `) that fails when the process contributed to
//! a failure (its leaks at counting sites, its failing events, its sites that grew by more than
//! `--max-growth`, or its incompleteness under `--require-complete`), and one case `cuguard.check` / `limits` that carries the overall
//! verdict and its reasons (and, in its `<system-out>`, the reports whose growth `--max-growth`
//! could not check: too few samples).
//!
//! Texts from the reports (sites, kinds, names, the failures) are escaped as the text output
//! escapes them ([`cuguard_format::needs_escape`]: `\n`, `\u{202e}`), so the failure's lines are
//! the ones cuguard wrote and a viewer shows each name as it is.

use std::io::{self, Write};

use cuguard_format::{escaped, needs_escape};

use super::verdict::Verdict;
use crate::output::{Format, Options};
use crate::wording::{bytes, one_line, plural};

/// Escapes text for XML attributes and content: `\n` and `\t` (cuguard's own line breaks) as
/// character references, any other character [`needs_escape`] names as `\u{…}`; drops the
/// characters XML 1.0 cannot hold.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            c if needs_escape(c) => out.extend(c.escape_default()),
            '\u{fffe}' | '\u{ffff}' => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// `--format junit`.
pub struct Junit;

impl Format<Verdict> for Junit {
    const NAME: &'static str = "junit";
    const HELP: &'static str = "JUnit XML, one test case per process";

    /// Writes the verdict as JUnit XML.
    fn write(verdict: &Verdict, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        let mut failed_processes = 0;
        for p in verdict.processes.iter() {
            failed_processes += usize::from(p?.failed);
        }
        let tests = verdict.processes.len() + 1;
        let failures = failed_processes + usize::from(!verdict.passed);
        writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
        writeln!(
            out,
            r#"<testsuites name="cuguard" tests="{tests}" failures="{failures}" errors="0">"#
        )?;
        writeln!(
            out,
            r#"  <testsuite name="cuguard check" tests="{tests}" failures="{failures}" errors="0" skipped="0">"#
        )?;
        write!(
            out,
            r#"    <testcase classname="cuguard.check" name="limits">"#
        )?;
        // Reports too short to tell growth, when it was asked for: said, not failed.
        let not_told: Vec<String> = match verdict.limits.max_growth {
            Some(_) => verdict
                .growth_not_told
                .iter()
                .map(|n| {
                    format!(
                        "growth not checked in {}: {}",
                        escaped(&n.source),
                        n.why.why()
                    )
                })
                .collect(),
            None => Vec::new(),
        };
        if verdict.passed && not_told.is_empty() {
            writeln!(out, "</testcase>")?;
        } else {
            writeln!(out)?;
            if !verdict.passed {
                let failures: Vec<String> = verdict.failures.iter().map(|f| escaped(f)).collect();
                writeln!(
                    out,
                    r#"      <failure type="cuguard" message="{}">{}</failure>"#,
                    xml(&failures.join("; ")),
                    xml(&failures.join("\n"))
                )?;
            }
            if !not_told.is_empty() {
                writeln!(
                    out,
                    "      <system-out>{}</system-out>",
                    xml(&not_told.join("\n"))
                )?;
            }
            writeln!(out, "    </testcase>")?;
        }
        for p in verdict.processes.iter() {
            let p = p?;
            let mut name = p.name.clone();
            match (p.rank, &p.worker) {
                (_, Some(w)) => name.push_str(&format!(" ({}, worker {w})", p.hostname)),
                (Some(r), None) => name.push_str(&format!(" ({}, rank {r})", p.hostname)),
                (None, None) => name.push_str(&format!(" ({})", p.hostname)),
            }
            write!(
                out,
                r#"    <testcase classname="cuguard.process" name="{}" file="{}">"#,
                xml(&one_line(&name)),
                xml(&one_line(&p.source))
            )?;
            if !p.failed {
                writeln!(out, "</testcase>")?;
                continue;
            }
            writeln!(out)?;
            let mut lines = Vec::new();
            for (site, b, n) in &p.failing_sites {
                lines.push(format!(
                    "{} in {} at {}",
                    bytes(*b),
                    plural(*n, "leak", "leaks"),
                    escaped(site)
                ));
            }
            for (kind, site, n) in &p.failing_events {
                lines.push(format!("{n} × {} at {}", escaped(kind), escaped(site)));
            }
            for (site, grown) in &p.failing_growth {
                lines.push(format!("{} grew by {}", escaped(site), bytes(*grown)));
            }
            if !p.complete {
                lines.push("the report is incomplete".into());
            }
            let message = format!(
                "{}{} leaked in {}",
                if p.rank.is_some() || p.worker.is_some() {
                    format!("{} failed: ", escaped(&p.who))
                } else {
                    String::new()
                },
                bytes(p.leaked_bytes),
                plural(p.leaks, "leak", "leaks")
            );
            writeln!(
                out,
                r#"      <failure type="cuguard" message="{}">{}</failure>"#,
                xml(&message),
                xml(&lines.join("\n"))
            )?;
            writeln!(out, "    </testcase>")?;
        }
        writeln!(out, "  </testsuite>")?;
        writeln!(out, "</testsuites>")
    }
}
