//! Suppressions: rules that keep known leaks and events out of `cuguard check`'s verdict, and
//! their generation from reports (`cuguard suppressions`), like Valgrind's `--gen-suppressions`.
//!
//! # Format
//!
//! One rule per line; `#` starts a comment; blank lines are ignored. A rule is one or more
//! `TYPE:PATTERN` terms separated by spaces, and matches when all its terms do:
//!
//! | term | matches a leak or event… |
//! |---|---|
//! | `leak:PATTERN` | (a leak rule) whose stack has a frame whose function, file or module matches; Python frames' function and file count too |
//! | `frame:PATTERN` | same condition, usable in event rules |
//! | `site:PATTERN` | charged to a matching function: its site's (after an allocation helper, the caller's: [`crate::call_path`]), else the site's name |
//! | `api:PATTERN` | made by a matching driver entry (`cuMemAllocManaged`) |
//! | `memory:PATTERN` | of a matching memory kind (`device`, `pitched`, `managed`, `async`, `vmm`, `host_pinned`) |
//! | `event:PATTERN` | (an event rule) of a matching kind (`double_free`, …) |
//!
//! A rule with an `event:` term applies to events, any other rule to leaks; `leak:` and `event:`
//! cannot be on one line. Patterns work as in LeakSanitizer: a pattern matches anywhere in the
//! text unless anchored with `^` (start) or `$` (end); `*` matches any run of characters, `?` one
//! character, `[abc]` one of a set. A leak without a stack matches frame patterns only when the
//! pattern is `*`.
//!
//! Generated rules name the site a leak is charged to (`site:^step$`), and for a site reached
//! through an allocation helper the helper too (`site:^step$ leak:^alloc$`), never a helper
//! alone: a rule for the helper would silence every leak made through it, next run's new ones
//! included. A rule that matches the stack of every allocation the report saw (a report
//! remembers each distinct stack, freed allocations' too) is not written (it is commented out,
//! with why): it could tell no leak from another.
//!
//! Generated rules match what they were made from: a name's wildcard characters are written as
//! classes (`[*]`), and a character no pattern can hold (whitespace, which separates terms, and
//! every character [`cuguard_format::needs_escape`] names, such as line breaks) as `?`, the one
//! place a generated rule is wider than its name. The comments above them carry the report's
//! texts escaped (`\n`, `\u{202e}`), so nothing a report holds starts a line of the file.
//!
//! ```text
//! # a known leak in a vendor library
//! leak:libvendor.so
//! # CUDA graphs keep this buffer on purpose
//! leak:^capture_graph$ api:cuMemAllocAsync
//! # the buffer step keeps on purpose, made through the helper alloc
//! site:^step$ leak:^alloc$
//! memory:host_pinned
//! event:untracked_free frame:cupy_
//! ```

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::sites::Site;
use crate::wording::one_line;
use cuguard_format::{Event, Leak, Stack};
use cuguard_format::{escaped, needs_escape};
use cuguard_symbolize::glob;

/// A suppressions file, parsed.
#[derive(Clone, Debug, Default)]
pub struct Suppressions {
    rules: Vec<Rule>,
}

/// One rule.
#[derive(Clone, Debug, Serialize)]
pub struct Rule {
    /// The file it came from.
    pub file: String,
    /// Its line number (1-based).
    pub line: usize,
    /// The rule as written (trimmed).
    pub text: String,
    #[serde(skip)]
    for_events: bool,
    #[serde(skip)]
    terms: Vec<(Term, String)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Term {
    Frame,
    Site,
    Api,
    Memory,
    Event,
}

/// A line that is not a rule.
#[derive(Debug)]
pub struct ParseError {
    /// Where.
    pub file: String,
    /// Line number (1-based).
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}",
            one_line(&self.file),
            self.line,
            one_line(&self.reason)
        )
    }
}

impl std::error::Error for ParseError {}

/// Turns an LSan-style pattern into a whole-text glob.
fn anchored(pattern: &str) -> String {
    let (start, body) = match pattern.strip_prefix('^') {
        Some(rest) => ("", rest),
        None => ("*", pattern),
    };
    let (body, end) = match body.strip_suffix('$') {
        Some(rest) => (rest, ""),
        None => (body, "*"),
    };
    format!("{start}{body}{end}")
}

/// The largest suppressions file read, bytes.
const MAX_FILE: u64 = 64 << 20;

impl Suppressions {
    /// Reads a suppressions file.
    pub fn read(path: &Path) -> Result<Suppressions, ParseError> {
        use std::io::Read as _;
        let name = path.display().to_string();
        let failed = |reason: String| ParseError {
            file: name.clone(),
            line: 0,
            reason,
        };
        // A regular file only, read to its size when opened (a FIFO would block, a device never
        // end), at most MAX_FILE.
        let (file, size) =
            cuguard_format::read::open_regular(path).map_err(|e| failed(e.to_string()))?;
        if size > MAX_FILE {
            return Err(failed(format!(
                "{size} bytes: larger than a suppressions file is ({MAX_FILE} at most)"
            )));
        }
        let mut text = String::new();
        file.take(size)
            .read_to_string(&mut text)
            .map_err(|e| failed(e.to_string()))?;
        Self::parse(&name, &text)
    }

    /// Parses rules; `file` names them in errors and listings.
    pub fn parse(file: &str, text: &str) -> Result<Suppressions, ParseError> {
        let mut rules = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |reason: String| ParseError {
                file: file.to_string(),
                line: i + 1,
                reason,
            };
            let mut terms = Vec::new();
            let (mut leak, mut event) = (false, false);
            for word in line.split_whitespace() {
                let Some((kind, pattern)) = word.split_once(':') else {
                    return Err(err(format!(
                        "{word:?} is not TYPE:PATTERN (types: leak, frame, site, api, memory, event)"
                    )));
                };
                if pattern.is_empty() {
                    return Err(err(format!("{kind}: has an empty pattern")));
                }
                let term = match kind {
                    "leak" => {
                        leak = true;
                        Term::Frame
                    }
                    "frame" => Term::Frame,
                    "site" => Term::Site,
                    "api" => Term::Api,
                    "memory" => Term::Memory,
                    "event" => {
                        event = true;
                        Term::Event
                    }
                    other => {
                        return Err(err(format!(
                            "unknown type {other:?} (types: leak, frame, site, api, memory, event)"
                        )));
                    }
                };
                terms.push((term, anchored(pattern)));
            }
            if leak && event {
                return Err(err(
                    "a rule is for leaks (leak:) or events (event:), not both".into(),
                ));
            }
            rules.push(Rule {
                file: file.to_string(),
                line: i + 1,
                text: line.to_string(),
                for_events: event,
                terms,
            });
        }
        Ok(Suppressions { rules })
    }

    /// Adds another file's rules after these.
    pub fn extend(&mut self, other: Suppressions) {
        self.rules.extend(other.rules);
    }

    /// The rules, in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The first rule that suppresses `leak`, whose stack is `stack` and site `site`.
    pub fn match_leak(&self, leak: &Leak, stack: Option<&Stack>, site: &Site) -> Option<usize> {
        self.rules.iter().position(|r| {
            !r.for_events
                && r.terms.iter().all(|(term, p)| match term {
                    Term::Frame => frame_matches(p, stack),
                    Term::Site => site_matches(p, stack, site),
                    Term::Api => glob::matches(p, &leak.api),
                    Term::Memory => glob::matches(p, leak.memory.as_str()),
                    Term::Event => false,
                })
        })
    }

    /// The first rule that suppresses `event`, whose stack is `stack` and site `site`.
    pub fn match_event(&self, event: &Event, stack: Option<&Stack>, site: &Site) -> Option<usize> {
        self.rules.iter().position(|r| {
            r.for_events
                && r.terms.iter().all(|(term, p)| match term {
                    Term::Frame => frame_matches(p, stack),
                    Term::Site => site_matches(p, stack, site),
                    Term::Api => event.api.as_deref().is_some_and(|a| glob::matches(p, a)),
                    Term::Memory => false,
                    Term::Event => glob::matches(p, event.kind.as_str()),
                })
        })
    }

    /// Whether no rule has a frame condition (so stacks need not be looked up).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Whether the function a leak is charged to (its site's, else the site's name) matches; a leak
/// without a stack only `*`.
fn site_matches(pattern: &str, stack: Option<&Stack>, site: &Site) -> bool {
    if stack.is_none() {
        return pattern.chars().all(|c| c == '*');
    }
    glob::matches(pattern, site.function.as_deref().unwrap_or(&site.name))
}

fn frame_matches(pattern: &str, stack: Option<&Stack>) -> bool {
    let Some(stack) = stack else {
        return pattern.chars().all(|c| c == '*');
    };
    stack.frames.iter().any(|f| {
        f.function
            .as_deref()
            .is_some_and(|s| glob::matches(pattern, s))
            || f.file.as_deref().is_some_and(|s| glob::matches(pattern, s))
            || glob::matches(pattern, &f.module)
    }) || stack
        .python
        .iter()
        .any(|f| glob::matches(pattern, &f.function) || glob::matches(pattern, &f.file))
}

/// Escapes text so that, anchored with `^…$`, it matches itself only (a leading `^` of the text
/// stays literal: only the first `^` anchors).
pub fn escape(text: &str) -> String {
    format!("^{}$", escape_body(text))
}

/// Escapes wildcard characters, and turns what a pattern cannot hold into `?`: whitespace (it
/// separates terms) and what [`needs_escape`] names (line breaks, escapes, reordering
/// characters), so the rule stays one line of the file and one term. A trailing `$` is written
/// `[$]` (else it would anchor).
fn escape_body(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '*' | '?' | '[' => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            c if c.is_whitespace() || needs_escape(c) => out.push('?'),
            c => out.push(c),
        }
    }
    if out.ends_with('$') {
        out.pop();
        out.push_str("[$]");
    }
    out
}

/// A rule proposed for a site, with what it would suppress.
#[derive(Clone, Debug, Default)]
pub struct Proposal {
    /// The rule line; commented out (`# `) when no precise rule exists (leaks without a stack).
    pub rule: String,
    /// The site's label.
    pub site: String,
    /// Leaks it covers.
    pub leaks: u64,
    /// Bytes it covers.
    pub bytes: u64,
    /// Events it covers, by kind.
    pub events: u64,
    /// Driver entries of the leaks.
    pub apis: std::collections::BTreeSet<String>,
    /// Processes (`exe[pid]`), at most 3 kept.
    pub processes: Vec<String>,
    /// How many processes.
    pub process_count: u64,
}

/// The conditions that pick out a site: the function it is charged to (`site:`), and the
/// allocation helper it went through (`leak:`); or, for a site without a function, its module
/// (`leak:…so$`); `None` when the site has no frame.
fn site_condition(site: &Site) -> Option<String> {
    match (&site.function, &site.module) {
        (Some(f), _) => {
            let mut c = format!("site:{}", escape(f));
            if let Some(helper) = site.via.as_ref().and_then(|h| h.function.as_deref()) {
                c.push_str(&format!(" leak:{}", escape(helper)));
            }
            Some(c)
        }
        (None, Some(m)) => {
            // Anchored at the end only; a leading `*` keeps a name's leading `^` literal.
            let body = escape_body(crate::sites::file_name(m));
            let star = if body.starts_with('^') { "*" } else { "" };
            Some(format!("leak:{star}{body}$"))
        }
        (None, None) => None,
    }
}

/// Proposes rules for every leak and event of one report, one per distinct rule. A rule that
/// would match the stack of every allocation the report saw is commented out, saying why.
pub fn propose(report: &cuguard_format::Report) -> Vec<Proposal> {
    use std::collections::BTreeMap;
    let index = crate::sites::SiteIndex::new(report);
    let name = report.process_name();
    let mut by_rule: BTreeMap<String, Proposal> = BTreeMap::new();
    fn add<'m>(
        map: &'m mut BTreeMap<String, Proposal>,
        rule: String,
        site: &Site,
        name: &str,
    ) -> &'m mut Proposal {
        map.entry(rule.clone()).or_insert_with(|| Proposal {
            rule,
            site: site.label(),
            processes: vec![name.to_string()],
            process_count: 1,
            ..Proposal::default()
        })
    }
    // What `check` counts: for a Python program whose end was recorded, what it held then
    // (held ones too, for `check --held`), not what the interpreter's teardown left.
    let at_end = report
        .python
        .as_ref()
        .and_then(|p| p.view.as_ref())
        .filter(|v| v.at == "end");
    let items: Vec<(std::borrow::Cow<'_, Leak>, Option<Site>)> = match at_end {
        Some(view) => super::end::end_items(view, true, &mut None)
            .into_iter()
            .map(|(leak, _, _, site)| (std::borrow::Cow::Owned(leak), site.map(|(s, _)| s)))
            .collect(),
        None => report
            .leaks
            .iter()
            .map(|l| (std::borrow::Cow::Borrowed(l), None))
            .collect(),
    };
    for (leak, own_site) in &items {
        let site = match own_site {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => index.site(leak.stack),
        };
        let rule = match site_condition(&site) {
            Some(c) => c,
            None => format!(
                "# no stack, so no precise rule; this would suppress every {} leak: api:{}",
                escaped(&leak.api),
                escape(&leak.api)
            ),
        };
        let p = add(&mut by_rule, rule, &site, &name);
        p.leaks += 1;
        p.bytes = p.bytes.saturating_add(leak.size);
        if !p.apis.contains(&*leak.api) {
            p.apis.insert(leak.api.to_string());
        }
    }
    for event in &report.events {
        let site = index.site(event.stack);
        let kind = escape(event.kind.as_str());
        let rule = match site_condition(&site) {
            Some(c) => format!("event:{kind} {}", c.replace("leak:", "frame:")),
            None => format!("event:{kind}"),
        };
        add(&mut by_rule, rule, &site, &name).events += 1;
    }
    let mut out: Vec<Proposal> = by_rule.into_values().collect();
    for p in &mut out {
        if let Some(why) = matches_every_stack(&p.rule, report, &index) {
            p.rule = format!("# not written: {} {why}", p.rule);
        }
    }
    out
}

/// Why a generated leak rule is refused: it matches the stack of every allocation in the
/// report (two call paths or more), so it would silence any leak, future ones too; `None`
/// when it picks out some stacks only (or is not a leak rule).
fn matches_every_stack(
    rule: &str,
    report: &cuguard_format::Report,
    index: &crate::sites::SiteIndex<'_>,
) -> Option<String> {
    if rule.starts_with('#') || rule.starts_with("event:") {
        return None;
    }
    let parsed = Suppressions::parse("", rule).ok()?;
    let r = parsed.rules.first()?;
    let frame_terms = |stack: &Stack| {
        let site = index.site(Some(stack.id));
        r.terms.iter().all(|(term, p)| match term {
            Term::Frame => frame_matches(p, Some(stack)),
            Term::Site => site_matches(p, Some(stack), &site),
            _ => true,
        })
    };
    // The stacks that made memory: not those that made a context.
    let contexts: std::collections::HashSet<u64> =
        report.contexts.iter().filter_map(|c| c.stack).collect();
    let made: Vec<&Stack> = report
        .stacks
        .iter()
        .filter(|s| !contexts.contains(&s.id))
        .collect();
    (made.len() >= 2 && made.iter().all(|s| frame_terms(s))).then(|| {
        format!(
            "would match all {} call paths of the report, so it would silence every future leak \
             too; name the callers (`--helper FUNCTION` makes a helper's callers the sites)",
            made.len()
        )
    })
}

/// Adds up proposals from several reports (same rule: one proposal), most bytes first.
pub fn combine(all: impl IntoIterator<Item = Proposal>) -> Vec<Proposal> {
    let mut by_rule: std::collections::HashMap<String, Proposal> = Default::default();
    for p in all {
        match by_rule.get_mut(&p.rule) {
            None => {
                by_rule.insert(p.rule.clone(), p);
            }
            Some(q) => {
                q.leaks += p.leaks;
                q.bytes = q.bytes.saturating_add(p.bytes);
                q.events += p.events;
                q.apis.extend(p.apis);
                for name in p.processes {
                    if q.processes.len() < 3 {
                        q.processes.push(name);
                    }
                }
                q.process_count += p.process_count;
            }
        }
    }
    let mut out: Vec<Proposal> = by_rule.into_values().collect();
    out.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.leaks.cmp(&a.leaks))
            .then(b.events.cmp(&a.events))
            .then(a.rule.cmp(&b.rule))
    });
    out
}

/// Writes proposals as a suppressions file, each rule under a comment saying what it covers.
///
/// Every text from a report is escaped ([`needs_escape`]), so none can start a line (a rule) of
/// the file; rules are written whole (cut, a rule would match another name, or none).
pub fn write_file(
    proposals: &[Proposal],
    reports: usize,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use crate::wording::{bytes, plural};
    writeln!(
        out,
        "# cuguard suppressions, generated from {}.",
        plural(reports as u64, "report", "reports")
    )?;
    writeln!(
        out,
        "# Format: docs/cli.md#suppressions. Keep the rules you mean; delete the rest."
    )?;
    for p in proposals {
        let mut what = Vec::new();
        if p.leaks > 0 {
            what.push(format!(
                "{} in {} ({})",
                bytes(p.bytes),
                plural(p.leaks, "leak", "leaks"),
                p.apis
                    .iter()
                    .map(|a| escaped(a))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if p.events > 0 {
            what.push(plural(p.events, "event", "events"));
        }
        let mut whose = p.processes.join(", ");
        if p.process_count > p.processes.len() as u64 {
            whose.push_str(&format!(
                " and {} more",
                p.process_count - p.processes.len() as u64
            ));
        }
        writeln!(out)?;
        writeln!(
            out,
            "# {}: {}; in {}",
            one_line(&p.site),
            what.join(", "),
            one_line(&whose)
        )?;
        // Made of escaped texts and patterns that hold no character to escape, so this is
        // only a guard.
        writeln!(out, "{}", escaped(&p.rule))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack's site, as `check` gives it to the rules.
    fn site_of(stack: Option<&Stack>) -> Site {
        stack.map_or_else(
            || Site::placeholder("<no stack>".into()),
            crate::sites::site_of_stack,
        )
    }
    use cuguard_format::{Addr, EventKind, Frame, LeakState, Memory};

    fn leak(api: &str, memory: Memory) -> Leak {
        Leak {
            allocation: cuguard_format::Allocation {
                address: Addr(0x1000),
                size: 1,
                requested: 1,
                api: api.into(),
                memory,
                device: 0,
                context: None,
                thread: 1,
                seq: 1,
                time_ms: 0,
                stack: Some(1),
                tag: None,
            },
            state: LeakState::LiveAtExit,
            handle: None,
            owner: None,
        }
    }

    fn stack(functions: &[&str]) -> Stack {
        Stack {
            id: 1,
            frames: functions
                .iter()
                .map(|f| Frame {
                    ip: Addr(1),
                    module: "/opt/app/libvendor.so".into(),
                    offset: Addr(1),
                    function: Some((*f).into()),
                    file: Some("/src/vendor.cc".into()),
                    line: Some(1),
                    inlined: None,
                })
                .collect(),
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
            origin: None,
        }
    }

    #[test]
    fn lsan_style_patterns() {
        let s = Suppressions::parse(
            "s",
            "# comment\n\nleak:^make_buf$\nleak:vendor.cc api:cuMemAllocManaged\nmemory:host_pinned\n",
        )
        .unwrap();
        let st = stack(&["cuMemAlloc_v2", "make_buf", "main"]);
        assert_eq!(
            s.match_leak(
                &leak("cuMemAlloc_v2", Memory::Device),
                Some(&st),
                &site_of(Some(&st))
            ),
            Some(0)
        );
        let other = stack(&["make_buffers"]);
        assert_eq!(
            s.match_leak(
                &leak("cuMemAlloc_v2", Memory::Device),
                Some(&other),
                &site_of(Some(&other))
            ),
            None,
            "anchored"
        );
        assert_eq!(
            s.match_leak(
                &leak("cuMemAllocManaged", Memory::Managed),
                Some(&other),
                &site_of(Some(&other))
            ),
            Some(1),
            "file and api"
        );
        assert_eq!(
            s.match_leak(
                &leak("cuMemAllocHost_v2", Memory::HostPinned),
                None,
                &site_of(None)
            ),
            Some(2)
        );
        assert_eq!(s.rules()[1].line, 4);
    }

    #[test]
    fn event_rules_apply_to_events_only() {
        let s = Suppressions::parse("s", "event:double_free frame:cupy\nleak:*\n").unwrap();
        let e = Event {
            kind: EventKind::DoubleFree,
            address: None,
            api: Some("cuMemFree_v2".into()),
            seq: 1,
            thread: 1,
            stack: None,
            result: Some(1),
            size: None,
            context: None,
            time_ms: None,
            message: None,
            device: None,
        };
        assert_eq!(
            s.match_event(
                &e,
                Some(&stack(&["cupy_free"])),
                &site_of(Some(&stack(&["cupy_free"])))
            ),
            Some(0)
        );
        assert_eq!(s.match_event(&e, None, &site_of(None)), None);
        assert_eq!(
            s.match_leak(&leak("x", Memory::Device), None, &site_of(None)),
            Some(1)
        );
    }

    #[test]
    fn bad_lines_are_errors_with_their_line() {
        for (text, want) in [
            (
                "leak:a\nnonsense\n",
                "s:2: \"nonsense\" is not TYPE:PATTERN",
            ),
            ("fun:x", "s:1: unknown type \"fun\""),
            ("leak:", "s:1: leak: has an empty pattern"),
            ("leak:a event:b", "s:1: a rule is for leaks"),
        ] {
            let e = Suppressions::parse("s", text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}");
        }
    }

    #[test]
    fn escaped_names_match_only_themselves() {
        for name in [
            "operator new[]",
            "a*b",
            "std::vector<int, std::allocator<int> >::push",
            "f$",
            "^caret",
            "$^",
            "ev\u{202e}il\u{2028}\u{85}\u{1b}[2J",
            &format!("tmpl<{}>::alloc", "x".repeat(400)),
        ] {
            let s = Suppressions::parse("s", &format!("leak:{}", escape(name))).unwrap();
            assert!(
                s.match_leak(
                    &leak("x", Memory::Device),
                    Some(&stack(&[name])),
                    &site_of(Some(&stack(&[name])))
                )
                .is_some(),
                "{name}"
            );
            // Longer, and (for a leading `^`, which once became `?`) the same length.
            for other in [
                format!("{name}x"),
                format!("x{name}"),
                name.replacen('^', "x", 1),
            ] {
                if other == name {
                    continue;
                }
                assert!(
                    s.match_leak(
                        &leak("x", Memory::Device),
                        Some(&stack(&[&other])),
                        &site_of(Some(&stack(&[&other])))
                    )
                    .is_none(),
                    "{name:?} against {other:?}"
                );
            }
        }
    }

    #[test]
    fn a_module_rule_keeps_a_leading_caret_literal() {
        let site = crate::sites::Site {
            key: "^lib.so+0x10".into(),
            name: "^lib.so+0x10".into(),
            location: None,
            function: None,
            module: Some("/opt/^lib.so".into()),
            kind: None,
            context: None,
            origin: None,
            via: None,
        };
        let rule = site_condition(&site).unwrap();
        assert_eq!(rule, "leak:*^lib.so$");
        let s = Suppressions::parse("s", &rule).unwrap();
        let frame_in = |module: &str| {
            let mut st = stack(&["f"]);
            st.frames[0].module = module.into();
            st.frames[0].file = None;
            s.match_leak(&leak("x", Memory::Device), Some(&st), &site_of(Some(&st)))
                .is_some()
        };
        assert!(frame_in("/opt/^lib.so"));
        assert!(!frame_in("/opt/xlib.so"));
    }
}
