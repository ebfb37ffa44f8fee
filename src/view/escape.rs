//! Text made safe for the page's HTML ([`esc`]), for every part of the page that writes it.

/// The most characters of one text the page shows: a name, a path, a command line (a report
/// may carry a string of hundreds of MiB; the page stays small).
const MAX_TEXT: usize = 4096;

/// Escapes text for HTML content and attributes, cut at [`MAX_TEXT`] characters (`…` then).
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_TEXT + 8));
    for (n, c) in text.chars().enumerate() {
        if n == MAX_TEXT {
            out.push('…');
            break;
        }
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if cuguard_format::needs_escape(c) && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}
