//! `--format text`: the diff for a terminal: the totals, then sites grouped as new, grown,
//! shrunk, fixed (unchanged ones only counted), then event counts that changed. A site is
//! printed with its location once; one whose stack has Python frames has its mixed native and
//! Python stack on the next line (`at::native::empty_cuda ← step (train.py:7) ← <module>
//! (train.py:12)`), as `py-spy --native` reads.

use std::io::{self, Write};

use super::model::{Change, Diff};
use crate::output::{Format, Options};
use crate::style::Table;
use crate::wording::{bytes, delta_bytes, one_line, plural};

/// `--format text`, the default.
pub struct Text;

impl Format<Diff> for Text {
    const NAME: &'static str = "text";
    const HELP: &'static str = "For a terminal";

    /// Writes the diff, coloured as `options.style` says, listing at most `options.top` sites
    /// per group.
    fn write(diff: &Diff, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        let (style, top) = (options.style, options.top);
        writeln!(
            out,
            "{} base {} in {} ({}) → new {} in {} ({}): {}, {:+} leaks",
            style.bold("cuguard diff:"),
            bytes(diff.base.leaked_bytes),
            plural(diff.base.leaks, "leak", "leaks"),
            plural(diff.base.reports as u64, "report", "reports"),
            bytes(diff.new.leaked_bytes),
            plural(diff.new.leaks, "leak", "leaks"),
            plural(diff.new.reports as u64, "report", "reports"),
            delta_bytes(diff.delta_bytes),
            diff.delta_leaks
        )?;
        for (change, title) in [
            (Change::New, "new sites"),
            (Change::Grown, "grown"),
            (Change::Shrunk, "shrunk"),
            (Change::Fixed, "fixed"),
        ] {
            let group: Vec<_> = diff.sites.iter().filter(|s| s.change == change).collect();
            if group.is_empty() {
                continue;
            }
            let title = match change {
                Change::New | Change::Grown => style.bad(title),
                _ => style.good(title),
            };
            writeln!(out, "{title}")?;
            let mut t = Table::new(&[true, true, false, false]);
            let shown: Vec<_> = group.iter().take(top).collect();
            for s in &shown {
                let site = one_line(&s.label);
                t.row([
                    delta_bytes(s.delta_bytes),
                    format!(
                        "{:+} {}",
                        s.delta_leaks,
                        if s.delta_leaks.abs() == 1 {
                            "leak"
                        } else {
                            "leaks"
                        }
                    ),
                    site,
                    format!("{} → {}", bytes(s.base_bytes), bytes(s.new_bytes)),
                ]);
            }
            for (line, s) in t.render("  ").lines().zip(&shown) {
                writeln!(out, "{line}")?;
                if !s.stack.is_empty() {
                    writeln!(out, "    {}", one_line(&s.stack.join(" ← ")))?;
                }
            }
            if group.len() > top {
                writeln!(out, "  … {} more (see --top)", group.len() - top)?;
            }
        }
        let unchanged = diff
            .sites
            .iter()
            .filter(|s| s.change == Change::Unchanged)
            .count();
        if unchanged > 0 {
            writeln!(
                out,
                "{} unchanged",
                plural(unchanged as u64, "site", "sites")
            )?;
        }
        let changed: Vec<_> = diff.events.iter().filter(|e| e.base != e.new).collect();
        if !changed.is_empty() {
            writeln!(out, "{}", style.bold("events"))?;
            let mut t = Table::new(&[false, true, false, true]);
            for e in changed {
                t.row([
                    one_line(&e.kind),
                    e.base.to_string(),
                    "→".into(),
                    e.new.to_string(),
                ]);
            }
            out.write_all(t.render("  ").as_bytes())?;
        }
        Ok(())
    }
}
