//! The report path template (`CUGUARD_REPORT`): placeholders expanded per process. The shim
//! expands it to know where to write; `cuguard snapshot` expands it to know where to look.

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
