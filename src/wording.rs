//! How figures and text are worded for people, shared by the readers and the output formats:
//! sizes, durations, plurals, text safe to print on one line.

/// Makes text safe to print on one line (the report format's rule, shared with its reader).
pub use cuguard_format::one_line;

/// Bytes in binary units with one decimal: `512 B`, `1.5 KiB`, `8.0 MiB`, `140.4 GiB`.
pub fn bytes(n: u64) -> String {
    cuguard_format::human_bytes(n)
}

/// A signed byte difference: `+1.5 MiB`, `-512 B`, `0 B`.
pub fn delta_bytes(n: i128) -> String {
    let magnitude = u64::try_from(n.unsigned_abs()).unwrap_or(u64::MAX);
    match n {
        0 => "0 B".into(),
        n if n > 0 => format!("+{}", bytes(magnitude)),
        _ => format!("-{}", bytes(magnitude)),
    }
}

/// Milliseconds for people: `250 ms` below a second, `12.3 s` below an hour, `90.0 min` below
/// a day, then `30.0 h`.
pub fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 3_600_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if ms < 86_400_000 {
        format!("{:.1} min", ms as f64 / 60_000.0)
    } else {
        format!("{:.1} h", ms as f64 / 3_600_000.0)
    }
}

/// A moment of the run for people, exact to the millisecond, in a form `--at` reads back to the
/// same millisecond: `250 ms` below a second, else seconds with the milliseconds that are not
/// zero (`3 s`, `3.5 s`, `12.345 s`). For the moments a report records (a peak's breakdown, a
/// refusal), where [`millis`]'s `12.3 s` would send `--at` up to 50 ms away.
pub fn moment(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms} ms");
    }
    let (s, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        format!("{s} s")
    } else {
        let digits = format!("{frac:03}");
        format!("{s}.{} s", digits.trim_end_matches('0'))
    }
}

/// A moment in microseconds as `--at` reads it back: [`moment`]'s when it is a whole
/// millisecond, else `31.612 ms` (below a second) or `3.012345 s` (trailing zeros left out).
pub fn moment_us(us: u64) -> String {
    if us.is_multiple_of(1000) {
        return moment(us / 1000);
    }
    let (whole, frac, unit, width) = if us < 1_000_000 {
        (us / 1000, us % 1000, "ms", 3)
    } else {
        (us / 1_000_000, us % 1_000_000, "s", 6)
    };
    let digits = format!("{frac:0width$}");
    format!("{whole}.{} {unit}", digits.trim_end_matches('0'))
}

/// `1 leak`, `2 leaks`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn moments_are_exact_to_the_millisecond() {
        use super::moment;
        assert_eq!(moment(0), "0 ms");
        assert_eq!(moment(999), "999 ms");
        assert_eq!(moment(1000), "1 s");
        assert_eq!(moment(3500), "3.5 s");
        assert_eq!(moment(3050), "3.05 s");
        assert_eq!(moment(12_345), "12.345 s");
        assert_eq!(moment(7_200_001), "7200.001 s");
    }

    #[test]
    fn moments_in_microseconds_read_back_to_the_microsecond() {
        use super::moment_us;
        assert_eq!(moment_us(32_000), "32 ms");
        assert_eq!(moment_us(31_612), "31.612 ms");
        assert_eq!(moment_us(31_600), "31.6 ms");
        assert_eq!(moment_us(999_999), "999.999 ms");
        assert_eq!(moment_us(3_012_000), "3.012 s");
        assert_eq!(moment_us(3_012_345), "3.012345 s");
        assert_eq!(moment_us(3_000_050), "3.00005 s");
    }

    #[test]
    fn sizes() {
        assert_eq!(super::bytes(0), "0 B");
        assert_eq!(super::bytes(1023), "1023 B");
        assert_eq!(super::bytes(1536), "1.5 KiB");
        assert_eq!(super::bytes(8 << 20), "8.0 MiB");
        assert_eq!(super::bytes(u64::MAX), "16.0 EiB");
        assert_eq!(super::delta_bytes(-2048), "-2.0 KiB");
        assert_eq!(super::millis(250), "250 ms");
        assert_eq!(super::millis(12_345), "12.3 s");
        assert_eq!(super::millis(5_400_000), "90.0 min");
        assert_eq!(
            super::millis(u64::MAX),
            format!("{:.1} h", u64::MAX as f64 / 3_600_000.0)
        );
    }

    #[test]
    fn one_line_escapes_and_cuts() {
        assert_eq!(super::one_line("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(super::one_line(&"x".repeat(400)).chars().count(), 301);
    }
}
