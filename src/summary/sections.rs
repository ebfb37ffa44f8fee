//! How a summary format is written in three parts ([`Sections`]), so that processes can be
//! written as they are read.

use std::io::{self, Write};

use super::model::Summary;
use super::report::ReportSummary;
use crate::output::Options;

/// A format written in three parts, so that processes can be written as they are read, before
/// the totals across them are known, and the totals put in front afterwards: everything before
/// the processes ([`Sections::head`], which does not read `processes`), each process, and the
/// end. Every summary format is one; its [`crate::output::Format::write`] is
/// [`write_in_sections`].
pub trait Sections {
    /// Everything before the processes.
    fn head(summary: &Summary, out: &mut dyn Write, options: &Options) -> io::Result<()>;
    /// The `i`-th process (from 0, in input order).
    fn process(
        i: usize,
        p: &ReportSummary,
        out: &mut dyn Write,
        options: &Options,
    ) -> io::Result<()>;
    /// Everything after the `count` processes.
    fn tail(count: usize, out: &mut dyn Write, options: &Options) -> io::Result<()>;
}

/// Writes a whole summary in a [`Sections`] format.
pub fn write_in_sections<S: Sections>(
    summary: &Summary,
    out: &mut dyn Write,
    options: &Options,
) -> io::Result<()> {
    S::head(summary, out, options)?;
    for (i, p) in summary.processes.iter().enumerate() {
        S::process(i, p, out, options)?;
    }
    S::tail(summary.processes.len(), out, options)
}

/// The [`Sections`] of a summary format, by its `--format` name.
pub type SectionWriters = (
    fn(&Summary, &mut dyn Write, &Options) -> io::Result<()>,
    fn(usize, &ReportSummary, &mut dyn Write, &Options) -> io::Result<()>,
    fn(usize, &mut dyn Write, &Options) -> io::Result<()>,
);
