//! Merged reports (`cuguard merge`): several processes' reports in one document.
//!
//! ```text
//! {"schema": "cuguard-report", "schema_version": 1, "tool": {"name": "cuguard", "version": …},
//!  "merged": {"created_unix_ms": …, "inputs": ["FILE", …]},
//!  "processes": [REPORT, REPORT, …]}
//! ```
//!
//! [`MergedWriter`] streams one: each `REPORT` is handed over as the JSON text of a process's
//! report, copied as it is, so that nothing another version of the shim wrote is lost.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Tool;
use crate::model::{SCHEMA_NAME, SCHEMA_VERSION};

/// `merged`: how a merged report was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Merged {
    /// When the merge was written, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The files merged, as named on the command line.
    pub inputs: Vec<String>,
    /// What the processes are grouped by (`worker`, `rank`, `host`, `process`), when the merge
    /// was asked to (`cuguard merge --by`): its processes are then in group order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// The fields of a merged report before `processes`.
#[derive(Serialize)]
struct Head<'a> {
    schema: &'a str,
    schema_version: u64,
    tool: Tool,
    merged: &'a Merged,
}

/// Writes a merged report, one process at a time.
pub struct MergedWriter<W: Write> {
    out: W,
    count: usize,
}

impl<W: Write> MergedWriter<W> {
    /// Starts the document: everything up to the first process.
    pub fn begin(mut out: W, merged: &Merged) -> io::Result<MergedWriter<W>> {
        let head = Head {
            schema: SCHEMA_NAME,
            schema_version: SCHEMA_VERSION,
            tool: Tool::current(),
            merged,
        };
        let mut text = serde_json::to_vec(&head)?;
        text.pop(); // the closing brace: `processes` follows
        out.write_all(&text)?;
        out.write_all(b",\"processes\":[")?;
        Ok(MergedWriter { out, count: 0 })
    }

    /// Adds one process's report, given as its JSON text (surrounding whitespace is dropped).
    pub fn process(&mut self, report: &[u8]) -> io::Result<()> {
        self.out
            .write_all(if self.count == 0 { b"\n" } else { b",\n" })?;
        self.out.write_all(report.trim_ascii())?;
        self.count += 1;
        Ok(())
    }

    /// Ends the document; returns how many processes it holds.
    pub fn finish(mut self) -> io::Result<usize> {
        self.out.write_all(b"\n]}\n")?;
        Ok(self.count)
    }
}

/// The processes of a merged report held as a JSON value, for editing in place; `None` for a
/// single process's report.
pub fn processes_mut(document: &mut Value) -> Option<&mut Vec<Value>> {
    document.get_mut("processes").and_then(Value::as_array_mut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_processes_verbatim() {
        let merged = Merged {
            created_unix_ms: 5,
            inputs: vec!["a.json".into(), "b \"quoted\".json".into()],
            by: None,
        };
        let mut out = Vec::new();
        let mut w = MergedWriter::begin(&mut out, &merged).unwrap();
        w.process(b"  {\"x\": 1}\n").unwrap();
        w.process(b"{\"y\":2}").unwrap();
        assert_eq!(w.finish().unwrap(), 2);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\"schema\":\"cuguard-report\",\"schema_version\":1,\"tool\":{{\"name\":\"cuguard\",\"version\":\"{}\"}},\
                 \"merged\":{{\"created_unix_ms\":5,\"inputs\":[\"a.json\",\"b \\\"quoted\\\".json\"]}},\
                 \"processes\":[\n{{\"x\": 1}},\n{{\"y\":2}}\n]}}\n",
                env!("CARGO_PKG_VERSION")
            )
        );
        let mut v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(processes_mut(&mut v).map(|p| p.len()), Some(2));
    }

    #[test]
    fn an_empty_merge_is_valid_json() {
        let merged = Merged {
            created_unix_ms: 0,
            inputs: vec![],
            by: None,
        };
        let mut out = Vec::new();
        let w = MergedWriter::begin(&mut out, &merged).unwrap();
        assert_eq!(w.finish().unwrap(), 0);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["processes"], Value::Array(vec![]));
    }
}
