//! The pool's amounts: `CUGUARD_POOL_INITIAL`, `CUGUARD_POOL_LIMIT` and `CUGUARD_POOL_KEEP`, each
//! bytes with an optional unit (`512MiB`, `2GiB`, `1.5GB`, `4096`) or a percentage of the
//! device's memory (`25%`).

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
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("{s:?} has an unknown unit {other:?}")),
    };
    let bytes = v * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Amount::Bytes(bytes as u64))
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
    fn refuses_nonsense() {
        assert!(parse("lots").is_err());
        assert!(parse("12 parsecs").is_err());
        assert!(parse("150%").is_err());
        assert!(parse("-3").is_err());
        assert!(parse("").is_err());
    }
}
