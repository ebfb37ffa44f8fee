//! `--format github`: GitHub Actions workflow commands, one `::warning` per new or grown site
//! (the same findings as the results of [`super::sarif`]), so the runner annotates the code;
//! nothing when NEW does no worse than BASE.
//!
//! ```text
//! ::warning file=src/train.c,line=42,title=cuguard leak_increase::new leak: 4.0 MiB in 1 allocation (none in the base run); site: make_buffers (train.c:42)
//! ::warning file=phase_steps.c,line=50,title=cuguard peak_increase::new at the run's peak (144.0 MiB → 384.0 MiB, +240.0 MiB): 256.0 MiB, none in the base run; also at step #4's peak; site: heavy_site (phase_steps.c:50)
//! ```
//!
//! For merged reports compared rank by rank, a peak's message begins with the rank (`rank 1:
//! new at the run's peak …`).
//!
//! `file` and `line` are as in `cuguard check --format github` (relative to `--source-root`,
//! left out without a frame under it), and so is the escaping: both are
//! [`crate::check::github::command`]'s.

use std::io::{self, Write};

use super::model::Diff;
use crate::check::github::command;
use crate::check::places::source_root;
use crate::output::{Format, Options};

/// `--format github`.
pub struct Github;

impl Format<Diff> for Github {
    const NAME: &'static str = "github";
    const HELP: &'static str =
        "GitHub Actions workflow commands (::warning, one per new or grown site)";

    /// Writes one `::warning` line per finding (`options` do not apply).
    fn write(diff: &Diff, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        let root = match &diff.source_root {
            Some(r) => r.clone(),
            None => source_root(None),
        };
        for f in super::sarif::findings(diff) {
            let located = f.place.and_then(|p| p.locate(&root));
            command(out, f.level, &f.rule, &f.message, located.as_ref())?;
        }
        Ok(())
    }
}
