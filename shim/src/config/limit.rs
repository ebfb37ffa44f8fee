//! `CUGUARD_LIMIT`: the process's device-memory limit, as written, before any device is known.
//!
//! The value is a comma-separated list of amounts ([`super::amount`]: bytes with an optional
//! unit, or a percentage of the device's memory), each for one device (`0:8GiB`) or, without a
//! device, for every device not listed (`8GiB`, `50%`): `CUGUARD_LIMIT=0:8GiB,1:50%`. `off`,
//! `none` and the empty string mean no limit. A value that does not parse, names a device twice,
//! gives two defaults, or asks for zero bytes is refused whole: the process then runs without a
//! limit, and the reason is one line on stderr. Whether a limit fits its device is only known
//! once the device is (see [`crate::tracker::limit`]).

use super::amount::{self, Amount};

/// A parsed `CUGUARD_LIMIT`.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitSpec {
    /// The limit of every device not listed in `devices`.
    pub default: Option<Amount>,
    /// `(ordinal, amount)` for each device listed, in the order given.
    pub devices: Vec<(u32, Amount)>,
}

impl LimitSpec {
    /// The amount that applies to device `ordinal`, if any.
    pub fn for_device(&self, ordinal: i32) -> Option<Amount> {
        let ordinal = u32::try_from(ordinal).ok()?;
        self.devices
            .iter()
            .find(|(d, _)| *d == ordinal)
            .map(|(_, a)| *a)
            .or(self.default)
    }

    /// The spec written back in the form it is read (`0:8589934592,1:50%`), for the report.
    pub fn text(&self) -> String {
        let one = |a: Amount| match a {
            Amount::Bytes(b) => b.to_string(),
            Amount::Percent(p) => format!("{p}%"),
        };
        let mut parts: Vec<String> = self.default.map(one).into_iter().collect();
        parts.extend(self.devices.iter().map(|(d, a)| format!("{d}:{}", one(*a))));
        parts.join(",")
    }
}

/// Parses `CUGUARD_LIMIT`: `Ok(None)` for no limit, `Err` with a short reason for a value that
/// is refused.
pub fn parse(s: &str) -> Result<Option<LimitSpec>, String> {
    let t = s.trim();
    if matches!(
        t.to_ascii_lowercase().as_str(),
        "" | "off" | "none" | "unlimited"
    ) {
        return Ok(None);
    }
    let mut spec = LimitSpec {
        default: None,
        devices: Vec::new(),
    };
    for part in t.split(',').map(str::trim) {
        let (device, value) = match part.split_once(':') {
            Some((d, v)) => {
                let d: u32 = d
                    .trim()
                    .parse()
                    .map_err(|_| format!("{part:?} does not start with a device number"))?;
                (Some(d), v)
            }
            None => (None, part),
        };
        let a = amount::parse(value).map_err(|why| format!("in {part:?}: {why}"))?;
        if matches!(a, Amount::Bytes(0)) || a == Amount::Percent(0.0) {
            return Err(format!("{part:?} is zero"));
        }
        match device {
            Some(d) if spec.devices.iter().any(|(o, _)| *o == d) => {
                return Err(format!("device {d} is given twice"));
            }
            Some(d) => spec.devices.push((d, a)),
            None if spec.default.is_some() => {
                return Err("two limits without a device".into());
            }
            None => spec.default = Some(a),
        }
    }
    Ok(Some(spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_shares_and_devices() {
        let s = parse("8GiB").unwrap().unwrap();
        assert_eq!(s.for_device(0), Some(Amount::Bytes(8 << 30)));
        assert_eq!(s.for_device(5), Some(Amount::Bytes(8 << 30)));
        assert_eq!(s.for_device(-1), None);
        let s = parse("50%").unwrap().unwrap();
        assert_eq!(s.for_device(1), Some(Amount::Percent(50.0)));
        let s = parse(" 0:8GiB, 1:50% ").unwrap().unwrap();
        assert_eq!(s.for_device(0), Some(Amount::Bytes(8 << 30)));
        assert_eq!(s.for_device(1), Some(Amount::Percent(50.0)));
        assert_eq!(s.for_device(2), None);
        assert_eq!(s.text(), "0:8589934592,1:50%");
        let s = parse("1:1MiB,2GiB").unwrap().unwrap();
        assert_eq!(s.for_device(1), Some(Amount::Bytes(1 << 20)));
        assert_eq!(s.for_device(0), Some(Amount::Bytes(2 << 30)));
        assert_eq!(s.text(), "2147483648,1:1048576");
    }

    #[test]
    fn off_and_refused() {
        for off in ["", "off", "none", " NONE "] {
            assert_eq!(parse(off), Ok(None), "{off}");
        }
        for bad in [
            "0",
            "0%",
            "0:0",
            "lots",
            "150%",
            "x:1GiB",
            "-1:1GiB",
            "0:1GiB,0:2GiB",
            "1GiB,2GiB",
            "1GiB,",
            "0:",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
