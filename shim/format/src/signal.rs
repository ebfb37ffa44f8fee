//! The report of last resort, written from a signal handler: [`SignalTemplate`].
//!
//! It is the smallest document the schema accepts, marked `complete: false` with `cut_short`
//! saying why: the process's identity, the signal, and empty lists. [`SignalTemplate::new`]
//! renders it in advance (it allocates: call it when tracking starts, never in a handler), with
//! holes where the values known only at the signal go: `cut_short`, `signal.number`,
//! `signal.name` and `process.end_unix_ms`. [`SignalTemplate::write`] fills the holes and hands
//! the bytes, in pieces, to a sink; it formats integers and escapes strings on the stack, takes no
//! lock and does not allocate, so it may run in a signal handler.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::enums::Reason;
use crate::model::{Context, Device, Driver, Event, Leak, Process, Signal, Stack, Stats, Tool};
use crate::model::{SCHEMA_NAME, SCHEMA_VERSION};

/// What the signal-time report says beyond the process: the fields of [`crate::Report`] it
/// has, in the same order (a test reads it back as a `Report`).
#[derive(Serialize)]
struct Minimal<'a> {
    schema: &'a str,
    schema_version: u64,
    tool: Tool,
    complete: bool,
    reason: Reason,
    cut_short: &'a str,
    signal: Signal,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<&'a str>,
    process: &'a Process,
    driver: &'a Driver,
    devices: [Device; 0],
    contexts: [Context; 0],
    leaks: [Leak; 0],
    events: [Event; 0],
    stacks: [Stack; 0],
    stats: Stats,
    faults: &'a [String],
}

/// Where the holes are: found by parsing the rendered document, so that no offset is guessed.
#[derive(Deserialize)]
struct Holes<'a> {
    #[serde(borrow)]
    cut_short: &'a RawValue,
    #[serde(borrow)]
    signal: SignalHoles<'a>,
    #[serde(borrow)]
    process: ProcessHoles<'a>,
}

#[derive(Deserialize)]
struct SignalHoles<'a> {
    #[serde(borrow)]
    number: &'a RawValue,
    #[serde(borrow)]
    name: &'a RawValue,
}

#[derive(Deserialize)]
struct ProcessHoles<'a> {
    #[serde(borrow)]
    end_unix_ms: &'a RawValue,
}

/// The signal-time report, rendered in advance with four holes.
#[derive(Clone, Debug)]
pub struct SignalTemplate {
    text: Vec<u8>,
    /// `cut_short`, `signal.number`, `signal.name`, `process.end_unix_ms`, in document order.
    holes: [Range<usize>; 4],
}

/// A value for a hole.
enum Fill<'a> {
    Text(&'a str),
    Int(i64),
}

impl SignalTemplate {
    /// Renders the report of `process` (its `end_unix_ms` is replaced at the signal) of the run
    /// `run_id` with `driver` and `faults`. Allocates. `None` only if the rendering could not be taken apart
    /// again, which the tests rule out.
    pub fn new(
        process: &Process,
        run_id: Option<&str>,
        driver: &Driver,
        faults: &[String],
    ) -> Option<SignalTemplate> {
        let doc = Minimal {
            schema: SCHEMA_NAME,
            schema_version: SCHEMA_VERSION,
            tool: Tool::current(),
            complete: false,
            reason: Reason::Signal,
            cut_short: "",
            signal: Signal {
                number: 0,
                name: String::new(),
            },
            run_id,
            process,
            driver,
            devices: [],
            contexts: [],
            leaks: [],
            events: [],
            stacks: [],
            stats: Stats {
                devices: Vec::new(),
                vmm_reserved_ranges: None,
                vmm_reserved_bytes: None,
            },
            faults,
        };
        let mut text = serde_json::to_vec(&doc).ok()?;
        text.push(b'\n');
        let holes: Holes<'_> = serde_json::from_slice(&text).ok()?;
        let base = text.as_ptr() as usize;
        let at = |raw: &RawValue| {
            let start = (raw.get().as_ptr() as usize).checked_sub(base)?;
            Some(start..start + raw.get().len())
        };
        let holes = [
            at(holes.cut_short)?,
            at(holes.signal.number)?,
            at(holes.signal.name)?,
            at(holes.process.end_unix_ms)?,
        ];
        let ordered = holes.windows(2).all(|w| w[0].end <= w[1].start);
        (ordered && holes[3].end <= text.len()).then_some(SignalTemplate { text, holes })
    }

    /// Writes the report for signal `number` (named `name`), cut short for the reason
    /// `cut_short`, at `end_unix_ms`, through `sink` (which returns whether it took the bytes).
    /// Async-signal-safe as far as `sink` is: no lock, no allocation. Returns whether every
    /// piece was taken.
    pub fn write(
        &self,
        sink: &mut impl FnMut(&[u8]) -> bool,
        cut_short: &str,
        number: i32,
        name: &str,
        end_unix_ms: u64,
    ) -> bool {
        let fills = [
            Fill::Text(cut_short),
            Fill::Int(number.into()),
            Fill::Text(name),
            Fill::Int(i64::try_from(end_unix_ms).unwrap_or(i64::MAX)),
        ];
        let mut from = 0;
        for (hole, fill) in self.holes.iter().zip(&fills) {
            if !sink(&self.text[from..hole.start]) {
                return false;
            }
            let ok = match fill {
                Fill::Text(s) => put_str(sink, s),
                Fill::Int(v) => sink(format_int(*v, &mut [0u8; 20])),
            };
            if !ok {
                return false;
            }
            from = hole.end;
        }
        sink(&self.text[from..])
    }
}

/// Writes `s` as a JSON string (escaped as serde_json escapes), without allocating.
fn put_str(sink: &mut impl FnMut(&[u8]) -> bool, s: &str) -> bool {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if !sink(b"\"") {
        return false;
    }
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let mut unicode = [
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xf)],
        ];
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => &mut unicode[..],
            _ => continue,
        };
        if !sink(&bytes[from..i]) || !sink(escape) {
            return false;
        }
        from = i + 1;
    }
    sink(&bytes[from..]) && sink(b"\"")
}

/// Formats `v` in decimal into `buf`, without allocating.
fn format_int(v: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut n = v.unsigned_abs();
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Report;

    fn process() -> Process {
        Process {
            pid: 4242,
            ppid: 1,
            exe: "/opt/app/\"quoted\"\\train".into(),
            argv: vec!["train".into(), "--tab\there".into()],
            hostname: "node7".into(),
            rank: Some(3),
            start_unix_ms: 1_764_461_000_000,
            end_unix_ms: 0,
            labels: None,
        }
    }

    fn written(t: &SignalTemplate, cut_short: &str, number: i32, name: &str, end: u64) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(t.write(
            &mut |b: &[u8]| {
                out.extend_from_slice(b);
                true
            },
            cut_short,
            number,
            name,
            end
        ));
        out
    }

    #[test]
    fn fills_the_holes_and_reads_back_as_a_report() {
        let driver = Driver {
            version: crate::wire::UNKNOWN_VERSION,
            path: "/usr/lib/libcuda.so.1".into(),
        };
        let faults = vec!["only the process and the signal".to_string()];
        let t = SignalTemplate::new(&process(), Some("4d2-1"), &driver, &faults).unwrap();
        let why = "signal: the \"full\" report\ndid not finish \u{1}";
        let out = written(&t, why, 11, "SIGSEGV", 1_764_461_003_000);
        assert_eq!(out.last(), Some(&b'\n'));
        let r: Report = serde_json::from_slice(&out).unwrap();
        let mut want = Report::new(false, Reason::Signal, process());
        want.process.end_unix_ms = 1_764_461_003_000;
        want.cut_short = Some(why.into());
        want.signal = Some(Signal {
            number: 11,
            name: "SIGSEGV".into(),
        });
        want.run_id = Some("4d2-1".into());
        want.driver = driver;
        want.faults = faults;
        assert_eq!(r, want);
        // Byte for byte what serde_json makes of the same document.
        let doc = Minimal {
            schema: SCHEMA_NAME,
            schema_version: SCHEMA_VERSION,
            tool: Tool::current(),
            complete: false,
            reason: Reason::Signal,
            cut_short: why,
            signal: want.signal.clone().unwrap(),
            run_id: want.run_id.as_deref(),
            process: &want.process,
            driver: &want.driver,
            devices: [],
            contexts: [],
            leaks: [],
            events: [],
            stacks: [],
            stats: want.stats.clone(),
            faults: &want.faults,
        };
        let mut direct = serde_json::to_vec(&doc).unwrap();
        direct.push(b'\n');
        assert_eq!(
            String::from_utf8(out).unwrap(),
            String::from_utf8(direct).unwrap()
        );
    }

    #[test]
    fn a_refusing_sink_stops_the_write() {
        let driver = Driver {
            version: 13000,
            path: String::new(),
        };
        let t = SignalTemplate::new(&process(), None, &driver, &[]).unwrap();
        let mut calls = 0;
        assert!(!t.write(
            &mut |_: &[u8]| {
                calls += 1;
                false
            },
            "x",
            15,
            "SIGTERM",
            1
        ));
        assert_eq!(calls, 1);
    }

    #[test]
    fn integers_format_without_allocating() {
        let mut b = [0u8; 20];
        assert_eq!(format_int(0, &mut b), b"0");
        assert_eq!(format_int(1234567890, &mut b), b"1234567890");
        assert_eq!(format_int(i64::MAX, &mut b), b"9223372036854775807");
        assert_eq!(format_int(-15, &mut b), b"-15");
    }
}
