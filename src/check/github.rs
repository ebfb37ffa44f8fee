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
//! escaped as the runner unescapes them ([`message`], [`property`]). Nothing is written when
//! the check passes.

use std::io::{self, Write};

use super::Verdict;
use super::places::source_root;
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
            let mut props = Vec::new();
            if let Some(l) = &f.located {
                props.push(format!("file={}", property(&l.path)));
                if let Some(line) = l.line.filter(|l| *l > 0) {
                    props.push(format!("line={line}"));
                }
            }
            props.push(format!(
                "title={}",
                property(&format!("cuguard {}", f.rule))
            ));
            writeln!(out, "::error {}::{}", props.join(","), message(&f.message))?;
        }
        Ok(())
    }
}

/// Escapes a command's message: `%`, `\r` and `\n` (as `@actions/core` does).
pub fn message(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a command's property value: as [`message`], and `:` and `,`.
pub fn property(text: &str) -> String {
    message(text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::{message, property};

    #[test]
    fn workflow_command_escaping() {
        let path = "my dir/a,b:c%d\nx\r.c";
        assert_eq!(property(path), "my dir/a%2Cb%3Ac%25d%0Ax%0D.c");
        assert_eq!(message(path), "my dir/a,b:c%25d%0Ax%0D.c");
        // Escaped `%` first, so an escape is never escaped twice.
        assert_eq!(property("%3A"), "%253A");
    }
}
