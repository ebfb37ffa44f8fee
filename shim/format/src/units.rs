//! Text for people, written the same way by the shim and the command: sizes (`3.0 MiB`), and
//! names from the program (its executable, script, frames) made safe to print on a terminal.

/// Bytes in the largest binary unit that keeps the number at or above 1, one decimal: `512 B`,
/// `1.5 KiB`, `3.0 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Whether `c` must be escaped before it reaches a terminal, a log or a line-based file: control
/// characters (escape sequences start with one; C1's NEL, U+0085, ends a line for some readers),
/// the line and paragraph separators (U+2028, U+2029, line breaks to others), and the characters
/// that reorder text (the bidirectional marks, overrides, embeddings and isolates, as in "Trojan
/// Source"), which can make a name read as another.
///
/// The one rule for text that comes from a report or a program: the shim's lines, the command's
/// text, `check`'s formats, generated suppressions; the pytest plugin mirrors it
/// (`cuguard/_units.py`, `needs_escape`).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// Appends `text` to `out` with every character [`needs_escape`] says must be escaped written as
/// `\u{…}` (`\n`, `\t`, `\r` for those three).
pub fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
}

/// `text` with every character [`needs_escape`] says must be escaped written as `\u{…}` (`\n`,
/// `\t`, `\r` for those three), whole: for formats that keep a text entire (a rule, a message
/// a program reads).
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_escaped(&mut out, text);
    out
}

/// Makes text safe to print on one line: every character [`needs_escape`] says must be
/// escaped, escaped; at most 300 characters (the reader's errors, the command's messages).
pub fn one_line(text: &str) -> String {
    const MAX: usize = 300;
    let mut out = String::with_capacity(text.len().min(MAX + 3));
    for (n, c) in text.chars().enumerate() {
        if n == MAX {
            out.push('…');
            break;
        }
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{escaped, human_bytes, push_escaped};

    #[test]
    fn names_from_the_program_cannot_drive_the_terminal() {
        let mut out = String::new();
        push_escaped(&mut out, "ev\u{1b}[2Jil\u{202e}txt.exe\n");
        assert_eq!(out, "ev\\u{1b}[2Jil\\u{202e}txt.exe\\n");
    }

    /// The same text and the same answer as the Python mirror's test
    /// (`tests/python/test_pytest_plugin.py`, `test_escaped_is_the_commands_rule`).
    #[test]
    fn every_character_of_the_rule() {
        assert_eq!(
            escaped(
                "\0\t\r\n\u{1b}\u{7f}\u{85}\u{9f}\u{a0}\u{61c}\u{200d}\u{200e}\u{200f}\u{2028}\u{2029}\u{202a}\u{202e}\u{202f}\u{2066}\u{2069}\u{206a} é"
            ),
            "\\u{0}\\t\\r\\n\\u{1b}\\u{7f}\\u{85}\\u{9f}\u{a0}\\u{61c}\u{200d}\\u{200e}\\u{200f}\\u{2028}\\u{2029}\\u{202a}\\u{202e}\u{202f}\\u{2066}\\u{2069}\u{206a} é"
        );
    }

    #[test]
    fn units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }
}
