//! The alert line: what the shim sends to the logs (`CUGUARD_ALERT=json|syslog|file:PATH`) when
//! a device's live memory crosses `CUGUARD_WARN_AT`, and when it falls back below it. One JSON
//! object, on one line, for log collectors to parse:
//!
//! ```text
//! {"source": "cuguard",
//!  "kind": "warn_at" | "cleared",
//!  "time": "2026-12-01T10:00:00.123Z",     RFC 3339, UTC, milliseconds
//!  "unix_ms": 1764583200123,
//!  "pid": 4242, "exe": "/usr/bin/python3.12", "host": "gpu-node-7", "rank": 3 | null,
//!  "device": 0, "device_uuid": "GPU-…" | null,
//!  "live_bytes": 5242880,                   the device's live bytes when the check saw it
//!  "threshold_bytes": 4194304,              CUGUARD_WARN_AT, in bytes for this device
//!  "rearm_bytes": 3774874,                  below this, the alert clears and may fire again
//!  "setting": "4MiB" | "80%",               CUGUARD_WARN_AT as given
//!  "alerts_total": 2,                       `warn_at` alerts of this process so far
//!  "top_sites": [{"label": "step (train.py:42)", "owner": "program",
//!                 "live_bytes": 3145728, "allocations": 1}, …],   at most 3, most bytes first
//!  "report": "/work/cuguard.python3.4242.json",   where the process's report goes
//!  "message": "device 0: live device memory 5.0 MiB crossed CUGUARD_WARN_AT (4.0 MiB); …"}
//! ```
//!
//! A `cleared` line has the same fields (its `top_sites` is empty). Readers should accept fields
//! they do not know: later versions may add some.

use serde::{Deserialize, Serialize};

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// Live bytes reached the threshold (the report's `warn_threshold_crossed` event).
    WarnAt,
    /// Live bytes fell below the re-arm level after a `warn_at`: the next crossing fires again.
    Cleared,
}

/// One site in an alert.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertSite {
    /// The site, as `summary` prints it (`step (train.py:42)`), or `module+0xoffset`.
    pub label: String,
    /// Who holds its memory (an owner id), empty when unknown.
    pub owner: String,
    pub live_bytes: u64,
    pub allocations: u64,
}

/// One alert line (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// Always `"cuguard"`.
    pub source: String,
    pub kind: AlertKind,
    /// When, as RFC 3339 in UTC with milliseconds.
    pub time: String,
    /// When, in milliseconds since the Unix epoch.
    pub unix_ms: u64,
    pub pid: u32,
    pub exe: String,
    pub host: String,
    pub rank: Option<u32>,
    pub device: i32,
    pub device_uuid: Option<String>,
    pub live_bytes: u64,
    pub threshold_bytes: u64,
    pub rearm_bytes: u64,
    pub setting: String,
    pub alerts_total: u64,
    pub top_sites: Vec<AlertSite>,
    pub report: String,
    pub message: String,
}

impl Alert {
    /// The alert as one line of JSON, with its newline.
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("an alert always serializes");
        s.push('\n');
        s
    }
}

/// `unix_ms` as RFC 3339 in UTC with milliseconds (`2026-12-01T10:00:00.123Z`).
pub fn rfc3339_utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_utc(1_764_583_200_123), "2025-12-01T10:00:00.123Z");
        assert_eq!(rfc3339_utc(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_line_reads_back() {
        let a = Alert {
            source: "cuguard".into(),
            kind: AlertKind::Cleared,
            time: rfc3339_utc(5),
            unix_ms: 5,
            pid: 1,
            exe: "/bin/x \"quoted\"\n".into(),
            host: "h".into(),
            rank: None,
            device: 0,
            device_uuid: None,
            live_bytes: 1,
            threshold_bytes: 2,
            rearm_bytes: 1,
            setting: "2".into(),
            alerts_total: 1,
            top_sites: vec![],
            report: "r.json".into(),
            message: "m".into(),
        };
        let line = a.to_line();
        assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
        assert!(line.contains(r#""kind":"cleared""#), "{line}");
        assert_eq!(serde_json::from_str::<Alert>(&line).unwrap(), a);
    }
}
