//! The report path template (`CUGUARD_REPORT`): placeholders expanded per process. The shim
//! expands it to know where to write; `cuguard snapshot` expands it to know where to look.
//!
//! It also names the report when its path is taken ([`numbered`], [`tagged`]): the shim writes
//! under those names, and `cuguard snapshot` looks for them, from this one definition.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The template used when none is given.
pub const DEFAULT_TEMPLATE: &str = "./cuguard.%e.%p.json";

/// Values for the template's placeholders.
#[derive(Clone, Debug)]
pub struct Placeholders<'a> {
    /// `%p`.
    pub pid: u32,
    /// `%e`: the executable's file name.
    pub exe_name: &'a str,
    /// `%h`.
    pub host: &'a str,
    /// `%r`: the rank in a parallel job (`norank` when there is none).
    pub rank: Option<i64>,
    /// `%t`: the process's start, Unix seconds.
    pub start_unix_s: u64,
}

/// Expands `%p` (pid), `%e` (executable name), `%h` (host), `%r` (rank, or `norank`), `%t`
/// (start time, Unix seconds) and `%%`. Other `%` sequences stay as they are. A `/` or NUL in
/// the executable or host name becomes `_`.
pub fn expand(template: &str, p: &Placeholders<'_>) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&p.pid.to_string()),
            Some('e') => out.push_str(&sanitize(p.exe_name)),
            Some('h') => out.push_str(&sanitize(p.host)),
            Some('r') => match p.rank {
                Some(r) => out.push_str(&r.to_string()),
                None => out.push_str("norank"),
            },
            Some('t') => out.push_str(&p.start_unix_s.to_string()),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Where the report goes when the template names a directory (`CUGUARD_REPORT=out/`, or `.`, or
/// any path that is one): into it, by the default name ([`DEFAULT_TEMPLATE`]'s). `path` is the
/// template expanded (and made absolute as the caller does); anything else is returned as it is.
pub fn into_directory(
    template: &str,
    path: std::path::PathBuf,
    p: &Placeholders<'_>,
) -> std::path::PathBuf {
    if !(template.ends_with('/') || path.is_dir()) {
        return path;
    }
    // (Components drop a `.` inside the path: `out/.` is `out`.)
    let dir: std::path::PathBuf = path.components().collect();
    dir.join(expand(DEFAULT_TEMPLATE.trim_start_matches("./"), p))
}

/// The `n`th name tried for a report whose name `name` is taken: `NAME.json` as `NAME.N.json`,
/// so that it still reads as a report (`*.json`); another name gets `.N` at its end. As
/// [`tagged`] with the number as the tag.
pub fn numbered(name: &OsStr, n: u32) -> OsString {
    tagged(name, &n.to_string())
}

/// `NAME.json` as `NAME.TAG.json`; another name gets `.TAG` at its end. NAME is shortened (at a
/// character boundary where it is UTF-8) where the whole would pass the file system's 255 bytes
/// ([`cuguard_files::NAME_MAX`]).
pub fn tagged(name: &OsStr, tag: &str) -> OsString {
    let bytes = name.as_bytes();
    let (stem, end) = match bytes.strip_suffix(b".json") {
        Some(stem) if !stem.is_empty() => (stem, format!(".{tag}.json")),
        _ => (bytes, format!(".{tag}")),
    };
    let stem = cuguard_files::shorten(stem, cuguard_files::NAME_MAX.saturating_sub(end.len()));
    let mut out = OsString::from(OsStr::from_bytes(stem));
    out.push(end);
    out
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ph() -> Placeholders<'static> {
        Placeholders {
            pid: 42,
            exe_name: "a/b",
            host: "h",
            rank: None,
            start_unix_s: 7,
        }
    }

    #[test]
    fn expands_every_placeholder() {
        assert_eq!(
            expand("x.%e.%p.%h.%r.%t.%%.%z%", &ph()),
            "x.a_b.42.h.norank.7.%.%z%"
        );
    }

    #[test]
    fn taken_names_are_numbered_before_json_and_fit() {
        let n = |name: &str, k| numbered(OsStr::new(name), k).into_string().unwrap();
        assert_eq!(n("r.json", 1), "r.1.json");
        assert_eq!(n("r.json", 999), "r.999.json");
        assert_eq!(n("report", 2), "report.2");
        assert_eq!(n(".json", 3), ".json.3");
        let long = format!("{}.json", "é".repeat(125));
        let got = n(&long, 12);
        assert!(got.len() <= cuguard_files::NAME_MAX, "{}", got.len());
        assert!(got.ends_with("é.12.json"), "{got}");
        assert_eq!(
            tagged(OsStr::new("r.json"), "00ff"),
            OsString::from("r.00ff.json")
        );
    }

    /// From `cuguard snapshot`, which had its own copy of the expander.
    #[test]
    fn expands_like_the_shim() {
        let p = Placeholders {
            pid: 7,
            exe_name: "a/b",
            host: "h",
            rank: None,
            start_unix_s: 9,
        };
        assert_eq!(expand("r.%e.%p.%r.%t.%%.%h", &p), "r.a_b.7.norank.9.%.h");
    }
}
