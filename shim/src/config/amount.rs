//! The pool's amounts: `CUGUARD_POOL_INITIAL`, `CUGUARD_POOL_LIMIT` and `CUGUARD_POOL_KEEP`, each
//! bytes with an optional unit (`512MiB`, `2GiB`, `1.5GB`, `4096`) or a percentage of the
//! device's memory (`25%`). Bytes are counted exactly, up to 2^64 - 1; more is an error, never
//! taken as unbounded. The other amounts (`CUGUARD_HISTORY`, `CUGUARD_WARN_AT`, `CUGUARD_LIMIT`,
//! `CUGUARD_POOL_REDZONE`) are read the same way.

/// An amount of device memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    Bytes(u64),
    /// Percent of the device's total memory.
    Percent(f64),
}

impl Amount {
    /// Bytes on a device with `total` bytes.
    pub fn resolve(self, total: u64) -> u64 {
        match self {
            Amount::Bytes(b) => b,
            Amount::Percent(p) => ((total as f64) * p / 100.0) as u64,
        }
    }
}

/// Parses an amount; `Err` carries a short reason.
pub fn parse(s: &str) -> Result<Amount, String> {
    let s = s.trim();
    if let Some(p) = s.strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not a percentage"))?;
        if !(0.0..=100.0).contains(&v) {
            return Err(format!("{s:?} is not between 0% and 100%"));
        }
        return Ok(Amount::Percent(v));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let not_a_number = || format!("{s:?} is not a number of bytes");
    let out_of_range = || format!("{s:?} is out of range (16EiB or more)");
    let (whole, fraction) = num.split_once('.').unwrap_or((num, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(not_a_number());
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => return Err(format!("{s:?} has an unknown unit {other:?}")),
    };
    // The whole part is exact (a float rounds 2^64 - 1 up to 2^64, and turned anything past
    // 2^64 into u64::MAX: unbounded); only a fraction of one unit goes through a float. The
    // whole part is digits alone, so it fails to parse only by overflowing.
    let whole: u64 = match whole {
        "" => 0,
        digits => digits.parse().map_err(|_| out_of_range())?,
    };
    let part = if fraction.is_empty() {
        0
    } else {
        let f: f64 = format!("0.{fraction}")
            .parse()
            .map_err(|_| not_a_number())?;
        // Less than one unit, so within u64.
        (f * mult as f64) as u64
    };
    whole
        .checked_mul(mult)
        .and_then(|b| b.checked_add(part))
        .map(Amount::Bytes)
        .ok_or_else(out_of_range)
}

/// The pool settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolSettings {
    /// Reserved when the pool is created (default 0: grow on demand).
    pub initial: Amount,
    /// Most bytes reserved per device (default: none).
    pub limit: Option<Amount>,
    /// Idle bytes kept before chunks go back to the driver (default 10% of the device).
    pub keep: Amount,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            initial: Amount::Bytes(0),
            limit: None,
            keep: Amount::Percent(10.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_percentages() {
        assert_eq!(parse("4096"), Ok(Amount::Bytes(4096)));
        assert_eq!(parse("512MiB"), Ok(Amount::Bytes(512 << 20)));
        assert_eq!(parse("2 GiB"), Ok(Amount::Bytes(2 << 30)));
        assert_eq!(parse("1.5GB"), Ok(Amount::Bytes(1_500_000_000)));
        assert_eq!(parse("25%"), Ok(Amount::Percent(25.0)));
        assert_eq!(Amount::Percent(25.0).resolve(1000), 250);
    }

    #[test]
    fn bytes_past_u64_are_out_of_range_never_saturated() {
        // Whole numbers are exact, up to the last byte.
        assert_eq!(parse("18446744073709551615"), Ok(Amount::Bytes(u64::MAX)));
        assert_eq!(
            parse("18446744073709551614"),
            Ok(Amount::Bytes(u64::MAX - 1))
        );
        assert_eq!(parse("16777215TiB"), Ok(Amount::Bytes(16777215 << 40)));
        assert_eq!(parse("00"), Ok(Amount::Bytes(0)));
        assert_eq!(parse("18446744073709551615.0"), Ok(Amount::Bytes(u64::MAX)));
        assert_eq!(parse("0.5KiB"), Ok(Amount::Bytes(512)));
        assert_eq!(parse(".5KiB"), Ok(Amount::Bytes(512)));
        for huge in [
            "18446744073709551616",
            "18446744073709551617",
            "99999999999999999999999999",
            "16777216TiB",
            "18446744073709551616.0",
            "20000000TB",
        ] {
            assert_eq!(
                parse(huge),
                Err(format!("{huge:?} is out of range (16EiB or more)")),
                "{huge}"
            );
        }
    }

    #[test]
    fn refuses_nonsense() {
        assert!(parse("lots").is_err());
        assert!(parse("12 parsecs").is_err());
        assert!(parse("150%").is_err());
        assert!(parse("-3").is_err());
        assert!(parse("").is_err());
    }
}
