//! What the text format's sections share: the leaked phrase, who holds a site, a table with
//! its stacks under its rows, and the line on what a list left out.

use std::io::{self, Write};

use crate::owners::OwnerKind;
use crate::style::{Style, Table};
use crate::wording::{bytes, one_line, plural};

/// `3.0 MiB in 2 leaks` (in red), or `nothing` (in green).
pub(super) fn leaked_phrase(leaked_bytes: u64, leaks: u64, style: Style) -> String {
    if leaks == 0 {
        style.good("nothing")
    } else {
        style.bad(&format!(
            "{} in {}",
            bytes(leaked_bytes),
            plural(leaks, "leak", "leaks")
        ))
    }
}

/// `held by LABEL` for an owner that is not the program, else nothing.
pub(in crate::summary) fn held_by(kind: OwnerKind, label: &str) -> String {
    if kind == OwnerKind::Program {
        String::new()
    } else {
        format!("held by {}", one_line(label))
    }
}

/// [`held_by`] for a site whose owner holds `owner_bytes` of its `bytes`: `mostly held by …`
/// when other owners hold the rest.
pub(super) fn site_held_by(kind: OwnerKind, label: &str, owner_bytes: u64, bytes: u64) -> String {
    let held = held_by(kind, label);
    if owner_bytes < bytes && !held.is_empty() {
        format!("mostly {held}")
    } else {
        held
    }
}

/// Writes a table, each row followed by its chain (the mixed stack), when it has one, on a line
/// of its own indented under the row: `    a ← b ← c`.
pub(in crate::summary) fn write_with_chains(
    out: &mut dyn Write,
    t: &Table,
    chains: &[&[String]],
) -> io::Result<()> {
    let rendered = t.render("  ");
    for (i, line) in rendered.lines().enumerate() {
        writeln!(out, "{line}")?;
        if let Some(chain) = chains.get(i)
            && !chain.is_empty()
        {
            writeln!(out, "    {}", one_line(&chain.join(" ← ")))?;
        }
    }
    Ok(())
}

/// `  … N more WHAT (see --top)` when a list was cut.
pub(super) fn more(out: &mut dyn Write, total: usize, shown: usize, what: &str) -> io::Result<()> {
    if total > shown {
        writeln!(out, "  … {} more {what} (see --top)", total - shown)?;
    }
    Ok(())
}
