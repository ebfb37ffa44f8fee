//! Fields whose form in JSON differs from their Rust type, so that readers keep plain integers:
//!
//! - device ordinals are `u32`; a device the shim could not tell (an allocation made with no
//!   current context, on the host) is [`UNKNOWN_DEVICE`] in Rust and `-1` in JSON;
//! - the driver's version is an `i64`; a version the shim could not ask for (at the end of the
//!   process, or in the report written at a signal) is [`UNKNOWN_VERSION`] in Rust and `null` in
//!   JSON;
//! - fractions (`fragmentation`) are written as plain decimals, as Rust prints them (`0`, `0.25`,
//!   `0.0000001`), never with an exponent.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A device ordinal the shim could not tell (written `-1`).
pub const UNKNOWN_DEVICE: u32 = u32::MAX;

/// A driver version the shim could not ask for (written `null`).
pub const UNKNOWN_VERSION: i64 = 0;

/// The report's ordinal for the driver's `CUdevice` `d`: negative ones are [`UNKNOWN_DEVICE`].
pub fn device_ordinal(d: i32) -> u32 {
    u32::try_from(d).unwrap_or(UNKNOWN_DEVICE)
}

struct OrdinalVisitor;

impl Visitor<'_> for OrdinalVisitor {
    type Value = u32;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a device ordinal (u32, or -1 for unknown)")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
        u32::try_from(v)
            .ok()
            .filter(|v| *v != UNKNOWN_DEVICE)
            .ok_or_else(|| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
        match v {
            -1 => Ok(UNKNOWN_DEVICE),
            v if v >= 0 => self.visit_u64(v as u64),
            v => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
        }
    }
}

/// `with` for device ordinals.
pub mod device {
    use super::*;

    pub fn serialize<S: Serializer>(v: &u32, s: S) -> Result<S::Ok, S::Error> {
        if *v == UNKNOWN_DEVICE {
            s.serialize_i64(-1)
        } else {
            s.serialize_u32(*v)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        d.deserialize_i64(OrdinalVisitor)
    }
}

/// `with` for optional device ordinals (absent, or an ordinal; never `null` in what the shim
/// writes, but read as absent).
pub(crate) mod device_opt {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => device::serialize(v, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        struct Opt;
        impl<'de> Visitor<'de> for Opt {
            type Value = Option<u32>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a device ordinal or null")
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                device::deserialize(d).map(Some)
            }
        }
        d.deserialize_option(Opt)
    }
}

/// `with` for the driver's version.
pub(crate) mod version {
    use super::*;

    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        if *v == UNKNOWN_VERSION {
            s.serialize_none()
        } else {
            s.serialize_i64(*v)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        Ok(Option::<i64>::deserialize(d)?.unwrap_or(UNKNOWN_VERSION))
    }
}

/// `serialize_with` for an optional fraction: a plain decimal, or `null` (also for a value that
/// is not finite).
pub(crate) fn decimal<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(f) if f.is_finite() => serde_json::value::RawValue::from_string(f.to_string())
            .map_err(serde::ser::Error::custom)?
            .serialize(s),
        _ => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct T {
        #[serde(with = "device")]
        device: u32,
        #[serde(with = "version")]
        version: i64,
    }

    #[test]
    fn unknowns_have_their_json_spelling() {
        let unknown = T {
            device: device_ordinal(-1),
            version: UNKNOWN_VERSION,
        };
        let text = serde_json::to_string(&unknown).unwrap();
        assert_eq!(text, r#"{"device":-1,"version":null}"#);
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), unknown);
        let known = T {
            device: 3,
            version: 13000,
        };
        let text = serde_json::to_string(&known).unwrap();
        assert_eq!(text, r#"{"device":3,"version":13000}"#);
        assert_eq!(serde_json::from_str::<T>(&text).unwrap(), known);
        #[derive(Serialize)]
        struct F(#[serde(serialize_with = "decimal")] Option<f64>);
        let text = |v| serde_json::to_string(&F(v)).unwrap();
        assert_eq!(text(Some(0.0)), "0");
        assert_eq!(text(Some(0.25)), "0.25");
        assert_eq!(text(Some(1e-7)), "0.0000001");
        assert_eq!(text(Some(f64::NAN)), "null");
        assert_eq!(text(None), "null");
        for bad in [
            r#"{"device":-2,"version":1}"#,
            r#"{"device":4294967295,"version":1}"#,
        ] {
            assert!(serde_json::from_str::<T>(bad).is_err(), "{bad}");
        }
    }
}
