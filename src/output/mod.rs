//! Output formats: the [`Format`] trait every format implements, and the [`Registry`] that lists
//! the formats of one output and gives `--format` its values, help and default.
//!
//! Each output keeps its formats next to its model, one file per format, and lists them in one
//! registry: [`crate::summary::FORMATS`] (`text`, `json`, `markdown`),
//! [`crate::check::FORMATS`] (`text`, `json`, `junit`, `sarif`, `github`),
//! [`crate::diff::FORMATS`] (`text`, `json`, `markdown`, `sarif`, `github`), and `cuguard
//! export`'s (`memory-viz`, `pprof`).
//! The command reads a registry and nothing else: it parses `--format` with the registry as its
//! value parser and writes with the row it got back.
//!
//! A new format is one file holding a unit type that implements [`Format`] for the output's
//! model, plus one [`Row`] in that output's registry:
//!
//! ```
//! use std::io::{self, Write};
//!
//! use cuguard::output::{Format, Options, Registry, Row};
//!
//! /// What is rendered (in cuguard: `Summary`, `Verdict`, `Diff`).
//! struct Total(u64);
//!
//! /// `--format plain`: the total and a newline.
//! struct Plain;
//!
//! impl Format<Total> for Plain {
//!     const NAME: &'static str = "plain";
//!     const HELP: &'static str = "The total alone";
//!     fn write(total: &Total, out: &mut dyn Write, _: &Options) -> io::Result<()> {
//!         writeln!(out, "{}", total.0)
//!     }
//! }
//!
//! /// The formats of `Total`, the first the default.
//! const FORMATS: Registry<Total> = Registry::new(&[Row::of::<Plain>()]);
//!
//! let mut out = Vec::new();
//! let row = FORMATS.get("plain").unwrap();
//! row.write(&Total(3), &mut out, &Options::default())?;
//! assert_eq!(out, b"3\n");
//! # Ok::<(), io::Error>(())
//! ```
//!
//! A format that produces JSON documents it in the doc comment of its type: that comment is the
//! contract for the programs that read it.
//!
//! An output whose formats write more than the whole value gives each row its *parts*, what
//! the command needs of the format besides [`Row::write`]: [`Row::with`] makes such a row, and
//! [`Row::parts`] reads them back, so the command takes everything from the row `--format`
//! parsed to and never matches a format's name. `summary` registers each format's sections and
//! its rendering of a moment ([`crate::summary::Parts`]); `check` what a format needs condensed
//! ([`crate::check::Needs`]); `export` how a format makes its file from the arguments. Each output
//! has one registry, with its parts: the command's value parser, and what every format is
//! rendered through where only whole values are written (the fuzz entry, the tests), whatever
//! the parts.

use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Write};

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

use crate::style::Style;

/// One output format of `T`, the model it renders (a summary, a verdict, a diff).
///
/// Implemented by a unit type per format, registered with [`Row::of`].
pub trait Format<T: ?Sized> {
    /// The `--format` value that selects it: lower case, unique in its registry.
    const NAME: &'static str;
    /// One line for `--help`: what the format is for, without a final period.
    const HELP: &'static str;

    /// Writes `value` to `out`. Everything to say comes from `value` and `options`; errors are
    /// only `out`'s.
    fn write(value: &T, out: &mut dyn Write, options: &Options) -> io::Result<()>;
}

/// What the command tells every format besides the value; each format takes what applies to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Colours, for formats meant for a terminal.
    pub style: Style,
    /// The most entries a format that shortens its lists shows in each (`usize::MAX`: all;
    /// `--top`). Formats for programs list everything their model holds.
    pub top: usize,
    /// cuguard's own cost whole rather than in one short line (`--cost`).
    pub cost: bool,
}

impl Default for Options {
    /// No colour, every entry.
    fn default() -> Options {
        Options {
            style: Style::plain(),
            top: usize::MAX,
            cost: false,
        }
    }
}

/// A format's writer, as a registry holds it.
type WriteFn<T> = fn(&T, &mut dyn Write, &Options) -> io::Result<()>;

/// One registered format of `T`: its name, its help line, its writer, and its `parts`: what else
/// the format writes for its output (`()` for most outputs; see the module doc).
pub struct Row<T: ?Sized, P: 'static = ()> {
    name: &'static str,
    help: &'static str,
    write: WriteFn<T>,
    parts: P,
}

impl<T: ?Sized> Row<T> {
    /// The row of format `F`.
    pub const fn of<F: Format<T>>() -> Row<T> {
        Row::with::<F>(())
    }
}

impl<T: ?Sized, P> Row<T, P> {
    /// The row of format `F`, with its `parts`.
    pub const fn with<F: Format<T>>(parts: P) -> Row<T, P> {
        Row {
            name: F::NAME,
            help: F::HELP,
            write: F::write,
            parts,
        }
    }

    /// The `--format` value.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The line `--help` shows for it.
    pub fn help(&self) -> &'static str {
        self.help
    }

    /// What else the format writes for its output.
    pub fn parts(&self) -> &P {
        &self.parts
    }

    /// Writes `value` in this format.
    pub fn write(&self, value: &T, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        (self.write)(value, out, options)
    }

    fn possible_value(&self) -> PossibleValue {
        PossibleValue::new(self.name).help(self.help)
    }
}

impl<T: ?Sized, P: Copy> Clone for Row<T, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized, P: Copy> Copy for Row<T, P> {}

impl<T: ?Sized, P> fmt::Debug for Row<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Row").field(&self.name).finish()
    }
}

/// The formats of one output, in the order `--help` lists them; the first is the default.
///
/// It is also the clap value parser of `--format`: it offers the rows' names with their help,
/// and parses a name to its [`Row`] (refusing others with clap's usual message).
pub struct Registry<T: ?Sized + 'static, P: 'static = ()> {
    rows: &'static [Row<T, P>],
}

impl<T: ?Sized, P> Registry<T, P> {
    /// A registry of `rows`, the first the default.
    ///
    /// # Panics
    ///
    /// When `rows` is empty or two rows share a name; in a `const`, that fails the build.
    pub const fn new(rows: &'static [Row<T, P>]) -> Registry<T, P> {
        assert!(!rows.is_empty(), "a registry needs a format");
        let mut i = 0;
        while i < rows.len() {
            let mut j = i + 1;
            while j < rows.len() {
                assert!(
                    !same_str(rows[i].name, rows[j].name),
                    "two formats of one registry share a name"
                );
                j += 1;
            }
            i += 1;
        }
        Registry { rows }
    }

    /// Every format, the default first.
    pub fn rows(&self) -> &'static [Row<T, P>] {
        self.rows
    }

    /// The format used when `--format` is not given.
    pub fn default_format(&self) -> &'static Row<T, P> {
        &self.rows[0]
    }

    /// The format named `name`.
    pub fn get(&self, name: &str) -> Option<&'static Row<T, P>> {
        self.rows.iter().find(|r| r.name == name)
    }
}

/// `a == b`, usable in a `const fn`.
const fn same_str(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl<T: ?Sized, P> Clone for Registry<T, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized, P> Copy for Registry<T, P> {}

impl<T: ?Sized, P> fmt::Debug for Registry<T, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.rows).finish()
    }
}

impl<T: ?Sized + 'static, P: Sync + 'static> TypedValueParser for Registry<T, P> {
    type Value = &'static Row<T, P>;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let ignore_case = arg.is_some_and(|a| a.is_ignore_case_set());
        // Text that is not UTF-8 matches no name and is shown lossily, as clap does for enums.
        let name = value.to_string_lossy();
        if let Some(row) = self
            .rows
            .iter()
            .find(|r| r.possible_value().matches(&name, ignore_case))
        {
            return Ok(row);
        }
        // Not a name: clap's own parser of these values writes the refusal.
        let names = PossibleValuesParser::new(self.rows.iter().map(Row::possible_value));
        match names.parse_ref(cmd, arg, OsStr::new(name.as_ref())) {
            Err(e) => Err(e),
            Ok(_) => Err(clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd)),
        }
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.rows.iter().map(Row::possible_value)))
    }
}

#[cfg(test)]
mod tests;
