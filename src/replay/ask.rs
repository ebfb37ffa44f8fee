//! What `cuguard replay` is asked ([`Ask`]): the allocators, the capacities or the search for
//! the smallest, the device; and why it cannot answer ([`ReplayError`]).

use std::fmt;

use super::allocators::{Allocator, Settings};
use crate::input::InputError;

/// A capacity as given: bytes, or a share of the recorded device's memory.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Capacity {
    Bytes(u64),
    /// Percent of the device's total memory, as its report records it.
    Percent(f64),
}

impl Capacity {
    /// The bytes it is on a device of `total` bytes.
    pub fn of(self, total: u64) -> u64 {
        match self {
            Capacity::Bytes(b) => b,
            Capacity::Percent(p) => (total as f64 * p / 100.0).round() as u64,
        }
    }

    /// A list of capacities (`80GiB`, `512MiB`, bytes, `95%`, comma-separated), each read by
    /// `bytes` unless a percentage.
    pub fn parse_list(
        text: &str,
        bytes: impl Fn(&str) -> Result<u64, String>,
    ) -> Result<Vec<Capacity>, String> {
        let mut out = Vec::new();
        for word in text.split(',').map(str::trim) {
            if word.is_empty() {
                return Err(format!("{text:?} has an empty capacity"));
            }
            let capacity = match word.strip_suffix('%') {
                Some(p) => {
                    let p: f64 = p
                        .trim()
                        .parse()
                        .map_err(|_| format!("{word:?} is not a percentage"))?;
                    if !(p.is_finite() && p > 0.0) {
                        return Err(format!("{word:?} is not a share of the device above 0"));
                    }
                    Capacity::Percent(p)
                }
                None => Capacity::Bytes(bytes(word)?),
            };
            out.push(capacity);
        }
        Ok(out)
    }
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Capacity::Bytes(b) => f.write_str(&crate::wording::bytes(*b)),
            Capacity::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// What is replayed at which capacities.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Each allocator at each capacity.
    At(Vec<Capacity>),
    /// Each allocator's smallest capacity that fits.
    Find,
}

/// What `cuguard replay` is asked.
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    pub allocators: Vec<Allocator>,
    pub plan: Plan,
    pub settings: Settings,
    /// The device whose allocations are replayed; `None`: the first the history allocates on.
    pub device: Option<u32>,
}

impl Ask {
    /// Whether a capacity is a share of the device.
    pub fn needs_total(&self) -> bool {
        matches!(&self.plan, Plan::At(c) if c.iter().any(|c| matches!(c, Capacity::Percent(_))))
    }
}

/// Why a replay has no answer: the input could not be read, or cannot answer what was asked.
#[derive(Debug)]
pub enum ReplayError {
    Input(InputError),
    /// In words, for one line.
    Usage(String),
}

impl From<InputError> for ReplayError {
    fn from(e: InputError) -> Self {
        ReplayError::Input(e)
    }
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Input(e) => e.fmt(f),
            ReplayError::Usage(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ReplayError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(t: &str) -> Result<u64, String> {
        match t {
            "1GiB" => Ok(1 << 30),
            "512" => Ok(512),
            _ => Err(format!("{t:?} is not a byte count")),
        }
    }

    #[test]
    fn capacities_are_bytes_or_shares_of_the_device() {
        assert_eq!(
            Capacity::parse_list("1GiB, 95%,512", bytes),
            Ok(vec![
                Capacity::Bytes(1 << 30),
                Capacity::Percent(95.0),
                Capacity::Bytes(512)
            ])
        );
        assert_eq!(Capacity::Percent(50.0).of(1 << 30), 1 << 29);
        assert!(Capacity::parse_list("0%", bytes).is_err());
        assert!(Capacity::parse_list("x%", bytes).is_err());
        assert!(Capacity::parse_list("1GiB,", bytes).is_err());
        assert_eq!(
            Capacity::parse_list("lots", bytes).unwrap_err(),
            "\"lots\" is not a byte count"
        );
    }
}
