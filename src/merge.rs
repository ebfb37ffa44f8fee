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
//! The document is written by `cuguard_report::merged::MergedWriter`.

use std::io::{self, Write};
use std::path::PathBuf;

use cuguard_report::merged::{Merged, MergedWriter};

use crate::input::InputError;
use crate::report::Document;

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
    let created_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let merged = Merged {
        created_unix_ms,
        inputs: files.iter().map(|f| f.display().to_string()).collect(),
    };
    let mut writer = MergedWriter::begin(out, &merged)?;
    for file in files {
        let doc = Document::read_with_limit(file, crate::input::max_report_bytes())
            .map_err(|e| MergeError::Input(e.into()))?;
        doc.check_processes()
            .map_err(|e| MergeError::Input(e.into()))?;
        for raw in doc.raw_processes() {
            writer.process(raw)?;
        }
    }
    Ok(writer.finish()?)
}
