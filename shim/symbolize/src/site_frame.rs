//! The site rule's view of one frame, beneath the rules that read it: [`SiteFrame`] (what the
//! rule looks at), [`Site`] (what it finds), the frame's [`fingerprint`] and a function's
//! [`qualified_path`]. The rule itself is [`crate::site`], over [`crate::rules`].

/// What the rule looks at in one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteFrame<'a> {
    /// Path of the module holding the frame (`""` for a Python frame or an unknown module).
    pub module: &'a str,
    /// Demangled function name.
    pub function: Option<&'a str>,
    /// Source file.
    pub file: Option<&'a str>,
    pub line: Option<u32>,
    /// Offset of the ip in its module (used when nothing better names the frame).
    pub offset: u64,
}

/// The site of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// Index of the site frame in the frames given.
    pub index: usize,
    /// See [`fingerprint`].
    pub fingerprint: String,
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A stable 16-hex-digit fingerprint of a frame (see the module doc).
pub fn fingerprint(f: &SiteFrame<'_>) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(PRIME);
        }
        // A separator no name contains, so ("ab", "c") and ("a", "bc") differ.
        h = (h ^ 0xff).wrapping_mul(PRIME);
    };
    feed(base_name(f.module).as_bytes());
    if f.function.is_none() && f.file.is_none() {
        feed(format!("+{:#x}", f.offset).as_bytes());
    } else {
        feed(f.function.unwrap_or("").as_bytes());
        feed(base_name(f.file.unwrap_or("")).as_bytes());
        feed(f.line.map(|l| l.to_string()).unwrap_or_default().as_bytes());
    }
    format!("{h:016x}")
}

/// `void* ns::Foo<int>::bar(long) const` → `ns::Foo::bar`: template arguments and parameter
/// lists removed, then anything before the last top-level space (a return type).
pub fn qualified_path(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let (mut angle, mut paren) = (0i32, 0i32);
    let bytes = name.as_bytes();
    for (i, c) in name.char_indices() {
        match c {
            // `operator<`, `operator<<`, `operator()`… are names, not brackets.
            '<' | '(' if paren == 0 && angle == 0 && is_operator_name(&out) => out.push(c),
            '<' if paren == 0 => angle += 1,
            '>' if paren == 0 && angle > 0 && !(i > 0 && bytes[i - 1] == b'-') => angle -= 1,
            '(' if angle == 0 => paren += 1,
            ')' if angle == 0 && paren > 0 => paren -= 1,
            _ if angle == 0 && paren == 0 => out.push(c),
            _ => {}
        }
    }
    let out = out.trim();
    let out = out.strip_suffix(" const").unwrap_or(out).trim_end();
    // The last space outside braces (`{unnamed type#1}` is one segment).
    let mut depth = 0i32;
    let space = out.char_indices().rev().find_map(|(i, c)| {
        match c {
            '}' => depth += 1,
            '{' => depth -= 1,
            ' ' if depth == 0 => return Some(i),
            _ => {}
        }
        None
    });
    match space {
        Some(i) if !out[..i].ends_with("operator") => out[i + 1..].to_owned(),
        _ => out.to_owned(),
    }
}

/// Whether `s` ends in `operator`, `operator<` or `operator(` (so a following bracket is part
/// of the name).
fn is_operator_name(s: &str) -> bool {
    ["operator", "operator<", "operator("]
        .iter()
        .any(|o| s.ends_with(o))
}
