//! `--format github`: GitHub Actions workflow commands, one `::error` per failing finding (the
//! same findings as the error results of [`super::sarif`]), so the runner annotates the code.
//!
//! ```text
//! ::error file=src/train.c,line=42,title=cuguard leak::3.0 MiB leaked in 2 allocations (cuMemAlloc_v2) by 1 process (train[4242]); owner: the program; site: make_buffers (train.c:42)
//! ::error title=cuguard double_free::1 double_free event at cudaFree
//! ```
//!
//! `file` is relative to the source root (`--source-root`), the first frame from the site's
//! outward whose file is under it; without one, `file` and `line` are left out. Values are
//! escaped as the runner unescapes them ([`message`], [`property`]), and every character
//! [`needs_escape`] names (line breaks, NEL, U+2028, terminal escapes, reordering characters: a
//! report's names may hold any) is written as the text output writes it (`\n`, `\u{202e}`), so
//! each command is one line and reads as it is. Nothing is written when the check passes.

use std::io::{self, Write};

use cuguard_format::needs_escape;

use super::places::{Located, source_root};
use super::verdict::Verdict;
use crate::output::{Format, Options};

/// `--format github`.
pub struct Github;

impl Format<Verdict> for Github {
    const NAME: &'static str = "github";
    const HELP: &'static str = "GitHub Actions workflow commands (::error, one per failing site)";

    /// Writes one `::error` line per failing finding (`options` do not apply).
    fn write(verdict: &Verdict, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        let root = match &verdict.source_root {
            Some(r) => r.clone(),
            None => source_root(None),
        };
        for f in super::sarif::failing(verdict, &root)? {
            command(out, "error", &f.rule, &f.message, f.located.as_ref())?;
        }
        Ok(())
    }
}

/// Writes one workflow command, `::LEVEL file=…,line=…,title=cuguard RULE::MESSAGE` (`LEVEL`:
/// `error`, `warning` or `notice`), `file` and `line` left out when the finding is not
/// `located` under the source root; every value escaped ([`message`], [`property`]). `cuguard
/// diff --format github` writes its `::warning` lines through it too.
pub fn command(
    out: &mut dyn Write,
    level: &str,
    rule: &str,
    text: &str,
    located: Option<&Located>,
) -> io::Result<()> {
    let mut props = Vec::new();
    if let Some(l) = located {
        props.push(format!("file={}", property(&l.path)));
        if let Some(line) = l.line.filter(|l| *l > 0) {
            props.push(format!("line={line}"));
        }
    }
    props.push(format!("title={}", property(&format!("cuguard {rule}"))));
    writeln!(out, "::{level} {}::{}", props.join(","), message(text))
}

/// Escapes a command's message: `%` as the runner unescapes it (`%25`, as `@actions/core`
/// does), and every character [`needs_escape`] names as `\n`, `\u{1b}` (`\r` and `\n` among
/// them, so none is left for `%0D`, `%0A`).
pub fn message(text: &str) -> String {
    escape(text, &[])
}

/// Escapes a command's property value: as [`message`], and `:` and `,`.
pub fn property(text: &str) -> String {
    escape(text, &[(':', "%3A"), (',', "%2C")])
}

fn escape(text: &str, more: &[(char, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '%' {
            out.push_str("%25");
        } else if let Some((_, to)) = more.iter().find(|(from, _)| *from == c) {
            out.push_str(to);
        } else if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{message, property};

    #[test]
    fn workflow_command_escaping() {
        let path = "my dir/a,b:c%d\nx\r.c";
        assert_eq!(property(path), r"my dir/a%2Cb%3Ac%25d\nx\r.c");
        assert_eq!(message(path), r"my dir/a,b:c%25d\nx\r.c");
        // An escape is never escaped twice.
        assert_eq!(property("%3A"), "%253A");
        // What ends a line for some readers, drives a terminal or reorders text.
        let name = "a\u{85}b\u{2028}c\u{1b}[2Jd\u{202e}e\u{2066}f";
        let shown = r"a\u{85}b\u{2028}c\u{1b}[2Jd\u{202e}e\u{2066}f";
        assert_eq!(message(name), shown);
        assert_eq!(property(name), shown);
    }
}
