//! [`Addr`]: a device or host address, written in reports as a lower-case hex string (`"0x7f3a…"`).

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// An address or offset as reports write it: a JSON string `"0x…"` holding at most 64 bits.
///
/// Reading accepts upper- or lower-case hex digits after a `0x` or `0X` prefix; writing always
/// produces lower-case digits without leading zeros (`0x0` for zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr(pub u64);

impl Addr {
    /// Parses `"0x…"`; `None` for anything else (no prefix, no digits, non-hex, more than 64 bits).
    pub fn parse(text: &str) -> Option<Addr> {
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let significant = digits.trim_start_matches('0');
        if significant.is_empty() {
            return Some(Addr(0));
        }
        // More than 16 significant digits overflows; from_str_radix reports that as an error.
        u64::from_str_radix(significant, 16).ok().map(Addr)
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl Serialize for Addr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AddrVisitor;
        impl Visitor<'_> for AddrVisitor {
            type Value = Addr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address string \"0x…\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Addr, E> {
                Addr::parse(v).ok_or_else(|| {
                    let shown: String = v.chars().take(24).collect();
                    E::custom(format_args!(
                        "invalid address {shown:?}, expected \"0x\" and hex digits"
                    ))
                })
            }
        }
        deserializer.deserialize_str(AddrVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::Addr;

    #[test]
    fn parses_and_prints_lower_case() {
        assert_eq!(Addr::parse("0x7F00AB"), Some(Addr(0x7f00ab)));
        assert_eq!(Addr::parse("0x0"), Some(Addr(0)));
        assert_eq!(Addr::parse("0x0000000000000000001"), Some(Addr(1)));
        assert_eq!(Addr::parse("0xffffffffffffffff"), Some(Addr(u64::MAX)));
        assert_eq!(Addr(0x7f00ab).to_string(), "0x7f00ab");
        assert_eq!(Addr(0).to_string(), "0x0");
    }

    #[test]
    fn refuses_non_addresses() {
        for bad in [
            "",
            "0x",
            "7f00",
            "0xg1",
            "0x1ffffffffffffffff",
            " 0x1",
            "0x-1",
            "0x+1",
        ] {
            assert_eq!(Addr::parse(bad), None, "{bad:?}");
        }
    }
}
