//! Terminal colour: on only when writing to a terminal and `NO_COLOR` is unset or empty.

use std::io::IsTerminal;

/// Which colours to use when writing text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Whether to emit ANSI escapes at all.
    pub color: bool,
}

impl Style {
    /// Colour for standard output, following <https://no-color.org>.
    pub fn for_stdout() -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            color: !no_color && std::io::stdout().is_terminal(),
        }
    }

    /// No colour.
    pub fn plain() -> Style {
        Style { color: false }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Headings.
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    /// Leaks, failures.
    pub fn bad(&self, text: &str) -> String {
        self.paint("31", text)
    }

    /// Incomplete reports, warnings.
    pub fn warn(&self, text: &str) -> String {
        self.paint("33", text)
    }

    /// Passes, nothing leaked.
    pub fn good(&self, text: &str) -> String {
        self.paint("32", text)
    }

    /// Secondary detail.
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }
}

/// Plain-text columns: each cell padded to its column's width, numbers right-aligned.
///
/// Widths are counted in characters of the cells' text *before* colouring: colour a cell with
/// [`Table::row_styled`].
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<(String, String)>>,
    right: Vec<bool>,
}

impl Table {
    /// A table whose columns are right-aligned where `right` says so.
    pub fn new(right: &[bool]) -> Table {
        Table {
            rows: Vec::new(),
            right: right.to_vec(),
        }
    }

    /// Adds a row of plain cells.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|c| {
                    let c = c.into();
                    (c.clone(), c)
                })
                .collect(),
        );
    }

    /// Adds a row of `(plain, shown)` cells: `plain` sets the width, `shown` is written.
    pub fn row_styled(&mut self, cells: Vec<(String, String)>) {
        self.rows.push(cells);
    }

    /// Writes the rows, each prefixed by `indent` and ended by a newline, trailing spaces trimmed.
    pub fn render(&self, indent: &str) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &self.rows {
            for (i, (plain, _)) in row.iter().enumerate() {
                widths[i] = widths[i].max(plain.chars().count());
            }
        }
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::from(indent);
            for (i, (plain, shown)) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = " ".repeat(widths[i] - plain.chars().count());
                if self.right.get(i).copied().unwrap_or(false) {
                    line.push_str(&pad);
                    line.push_str(shown);
                } else {
                    line.push_str(shown);
                    if i + 1 < row.len() {
                        line.push_str(&pad);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}
