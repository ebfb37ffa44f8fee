//! The report format's `config` ([`Config`]): the shim's effective settings (`config`).
//!
//! The object is informational and was free-form in the first reports, so reading is lenient: a
//! field of another type than the shim writes reads as absent, and unknown fields are ignored.
//! Amounts (`pool_initial`, `pool_limit`, `pool_keep`, `warn_at`, and those in `limit`) are strings, bytes in decimal or
//! a percentage of the device's memory (`"25%"`); an integer is read as its decimal text.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `config`: the settings the shim ran with (from its `CUGUARD_*` variables, defaults filled in).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "Map<String, Value>")]
pub struct Config {
    /// `CUGUARD_REPORT`: the report path template, as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
    /// `CUGUARD_STACK_DEPTH`: frames captured per allocation; 0 = off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_depth: Option<u64>,
    /// `CUGUARD_POOL`: whether cuMemAlloc/cuMemFree were served from the pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<bool>,
    /// `CUGUARD_POOL_INITIAL` (an amount); `null` for none.
    pub pool_initial: Option<String>,
    /// `CUGUARD_POOL_LIMIT` (an amount); `null` for no limit.
    pub pool_limit: Option<String>,
    /// `CUGUARD_POOL_KEEP` (an amount); `null` for keeping everything.
    pub pool_keep: Option<String>,
    /// `CUGUARD_TIMELINE_MS`: the timeline's sampling interval; 0 = off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline_ms: Option<u64>,
    /// `CUGUARD_DISABLE`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// `CUGUARD_CHECKPOINT_SECS`: seconds between checkpoints; 0 = off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_secs: Option<u64>,
    /// `CUGUARD_WARN_AT` (an amount); `null` when off.
    pub warn_at: Option<String>,
    /// `CUGUARD_SNAPSHOT_SIGNAL`: the signal number; `null` when off.
    pub snapshot_signal: Option<i32>,
    /// `CUGUARD_SIGNALS`: whether the report is written when a signal ends the process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signals: Option<bool>,
    /// `CUGUARD_LIMIT`: the process's device-memory limit as given, amounts in the form above,
    /// each for one device (`"0:8589934592"`) or for every other device (`"50%"`), separated by
    /// commas; absent when there was none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// `CUGUARD_LIMIT_VIRTUAL`: whether cuMemGetInfo reported the limit as the device's memory;
    /// absent when there was no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_virtual: Option<bool>,
}

impl From<Map<String, Value>> for Config {
    fn from(mut map: Map<String, Value>) -> Config {
        fn typed<T: serde::de::DeserializeOwned>(
            map: &mut Map<String, Value>,
            key: &str,
        ) -> Option<T> {
            map.remove(key).and_then(|v| T::deserialize(v).ok())
        }
        fn amount(map: &mut Map<String, Value>, key: &str) -> Option<String> {
            match map.remove(key)? {
                Value::String(s) => Some(s),
                Value::Number(n) if n.is_u64() => Some(n.to_string()),
                _ => None,
            }
        }
        // The names are the fields' own: a test writes every field and reads it back.
        Config {
            report: typed(&mut map, "report"),
            stack_depth: typed(&mut map, "stack_depth"),
            pool: typed(&mut map, "pool"),
            pool_initial: amount(&mut map, "pool_initial"),
            pool_limit: amount(&mut map, "pool_limit"),
            pool_keep: amount(&mut map, "pool_keep"),
            timeline_ms: typed(&mut map, "timeline_ms"),
            disabled: typed(&mut map, "disabled"),
            checkpoint_secs: typed(&mut map, "checkpoint_secs"),
            warn_at: amount(&mut map, "warn_at"),
            snapshot_signal: typed(&mut map, "snapshot_signal"),
            signals: typed(&mut map, "signals"),
            limit: typed(&mut map, "limit"),
            limit_virtual: typed(&mut map, "limit_virtual"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_reads_back_and_other_types_read_as_absent() {
        let full = Config {
            report: Some("./cuguard.%e.%p.json".into()),
            stack_depth: Some(32),
            pool: Some(true),
            pool_initial: Some("0".into()),
            pool_limit: Some("25%".into()),
            pool_keep: Some("1073741824".into()),
            timeline_ms: Some(100),
            disabled: Some(false),
            checkpoint_secs: Some(0),
            warn_at: Some("90%".into()),
            snapshot_signal: Some(41),
            signals: Some(true),
            limit: Some("0:8589934592,1:50%".into()),
            limit_virtual: Some(false),
        };
        let text = serde_json::to_string(&full).unwrap();
        assert_eq!(serde_json::from_str::<Config>(&text).unwrap(), full);

        let odd: Config = serde_json::from_str(
            r#"{"report": 7, "stack_depth": "32", "pool_initial": 0, "pool_keep": -1, "future": [1]}"#,
        )
        .unwrap();
        assert_eq!(
            odd,
            Config {
                pool_initial: Some("0".into()),
                ..Config::default()
            }
        );
        // Only the fields the shim always writes are written when absent: as null.
        assert_eq!(
            serde_json::to_string(&Config::default()).unwrap(),
            r#"{"pool_initial":null,"pool_limit":null,"pool_keep":null,"warn_at":null,"snapshot_signal":null}"#
        );
    }
}
