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
//! The document is written by `cuguard_format::merged::MergedWriter`.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use cuguard_format::merged::{Merged, MergedWriter};

use crate::identity::{GroupBy, GroupKey, Identity};
use crate::input::InputError;
use cuguard_format::{Document, ReadError};

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

/// Writes the merged report of `files` to `out`, its processes grouped `by` when given (see
/// [`order`]); returns how many processes it holds.
pub fn merge(
    files: &[PathBuf],
    by: Option<GroupBy>,
    out: &mut dyn Write,
) -> Result<usize, MergeError> {
    let created_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let merged = Merged {
        created_unix_ms,
        inputs: files.iter().map(|f| f.display().to_string()).collect(),
        by: by.map(|b| b.as_str().to_string()),
    };
    let mut writer = MergedWriter::begin(out, &merged)?;
    if let Some(by) = by {
        let read = |file: &PathBuf| {
            let doc = Document::read_with_limit(file, crate::input::max_report_bytes())
                .map_err(|e| MergeError::Input(e.into()))?;
            doc.check_processes()
                .map_err(|e| MergeError::Input(e.into()))?;
            Ok::<Document, MergeError>(doc)
        };
        let mut who = Vec::new();
        for (f, file) in files.iter().enumerate() {
            for (p, raw) in read(file)?.raw_processes().enumerate() {
                who.push(((f, p), identity(raw)));
            }
        }
        // Written in group order; a file is read again only when the order leaves it.
        let mut held: Option<(usize, Document)> = None;
        for (f, p) in order(who, by) {
            if held.as_ref().is_none_or(|(g, _)| *g != f) {
                held = Some((f, read(&files[f])?));
            }
            let (_, doc) = held.as_ref().expect("just read");
            let raw = doc.raw_processes().nth(p).ok_or_else(|| {
                MergeError::Input(InputError::Read(ReadError::Invalid {
                    path: files[f].clone(),
                    process: Some(p),
                    reason: "the file changed while it was merged".into(),
                }))
            })?;
            writer.process(raw)?;
        }
        return Ok(writer.finish()?);
    }
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

/// The fields of a process's report that say who it was.
#[derive(serde::Deserialize)]
struct WhoReport {
    process: WhoProcess,
}

#[derive(serde::Deserialize)]
struct WhoProcess {
    #[serde(default)]
    pid: u32,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    rank: Option<u32>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// Who the process of a (checked) report was; a report whose process cannot be read this way
/// counts as one without labels.
fn identity(raw: &[u8]) -> Identity {
    match serde_json::from_slice::<WhoReport>(raw) {
        Ok(r) => Identity::new(
            r.process.pid,
            &r.process.hostname,
            r.process.rank,
            Some(&r.process.labels),
        ),
        Err(_) => Identity::new(0, "", None, None),
    }
}

/// The order in which a merge grouped `by` writes processes (each named by its place: file,
/// then process within the file): keyed groups in key order (ranks as numbers), then the
/// processes without the label; input order within a group.
pub fn order<P>(who: Vec<(P, Identity)>, by: GroupBy) -> Vec<P> {
    let mut keyed: Vec<(Option<GroupKey>, usize, P)> = who
        .into_iter()
        .enumerate()
        .map(|(i, (p, id))| (by.key(&id, i), i, p))
        .collect();
    keyed.sort_by(|a, b| match (&a.0, &b.0) {
        (Some(x), Some(y)) => x.cmp(y).then(a.1.cmp(&b.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.1.cmp(&b.1),
    });
    keyed.into_iter().map(|(_, _, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(rank: Option<u32>, worker: Option<&str>, host: &str) -> Identity {
        let mut labels = BTreeMap::new();
        if let Some(w) = worker {
            labels.insert("worker".to_string(), w.to_string());
        }
        Identity::new(1, host, rank, Some(&labels))
    }

    #[test]
    fn ranks_sort_as_numbers_and_the_unlabelled_come_last_in_input_order() {
        let who = vec![
            ("a", id(Some(10), None, "h")),
            ("b", id(None, None, "h")),
            ("c", id(Some(2), None, "h")),
            ("d", id(None, None, "h")),
            ("e", id(Some(2), None, "h")),
        ];
        assert_eq!(order(who, GroupBy::Rank), vec!["c", "e", "a", "b", "d"]);
    }

    #[test]
    fn workers_and_hosts_sort_as_text_and_processes_keep_input_order() {
        let who = || {
            vec![
                ("a", id(None, Some("tcp://b:1"), "n2")),
                ("b", id(None, Some("tcp://a:1"), "n1")),
                ("c", id(None, None, "n2")),
            ]
        };
        assert_eq!(order(who(), GroupBy::Worker), vec!["b", "a", "c"]);
        assert_eq!(order(who(), GroupBy::Host), vec!["b", "a", "c"]);
        assert_eq!(order(who(), GroupBy::Process), vec!["a", "b", "c"]);
    }
}
