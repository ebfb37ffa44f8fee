//! `cuguard merge`: many processes' reports in one document, which every subcommand reads.
//!
//! A merged report keeps the schema name and version and replaces the single-process fields by
//! `merged` and `processes`:
//!
//! ```text
//! {"schema": "cuguard-report", "schema_version": 1, "tool": {"name": "cuguard", "version": …},
//!  "merged": {"created_unix_ms": …, "inputs": ["FILE", …]},
//!  "processes": [REPORT, REPORT, …]}
//! ```
//!
//! Each `REPORT` is a process's report copied byte for byte from its input, so nothing the shim
//! wrote is lost, and each keeps its own pid, rank and host. Merged inputs are flattened: their
//! processes are copied one by one. Inputs are read one at a time, so memory holds one input.

use std::io::{self, Write};
use std::path::PathBuf;

use crate::input::InputError;
use crate::report::{Document, SCHEMA_NAME, SCHEMA_VERSION};

/// Why a merge failed.
#[derive(Debug)]
pub enum MergeError {
    /// An input could not be read.
    Input(InputError),
    /// The output could not be written.
    Write(io::Error),
}

impl From<io::Error> for MergeError {
    fn from(e: io::Error) -> Self {
        MergeError::Write(e)
    }
}

/// Writes the merged report of `files` to `out`; returns how many processes it holds.
pub fn merge(files: &[PathBuf], out: &mut dyn Write) -> Result<usize, MergeError> {
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let inputs: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let inputs = serde_json::to_string(&inputs).map_err(io::Error::from)?;
    write!(
        out,
        "{{\"schema\":\"{SCHEMA_NAME}\",\"schema_version\":{SCHEMA_VERSION},\
         \"tool\":{{\"name\":\"cuguard\",\"version\":\"{}\"}},\
         \"merged\":{{\"created_unix_ms\":{created},\"inputs\":{inputs}}}",
        env!("CARGO_PKG_VERSION")
    )?;
    out.write_all(b",\"processes\":[")?;
    let mut count = 0;
    for file in files {
        let doc = Document::read_with_limit(file, crate::input::max_report_bytes())
            .map_err(|e| MergeError::Input(e.into()))?;
        doc.check_processes()
            .map_err(|e| MergeError::Input(e.into()))?;
        for raw in doc.raw_processes() {
            out.write_all(if count == 0 { b"\n" } else { b",\n" })?;
            out.write_all(trim(raw))?;
            count += 1;
        }
    }
    out.write_all(b"\n]}\n")?;
    Ok(count)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &bytes[start..end]
}
