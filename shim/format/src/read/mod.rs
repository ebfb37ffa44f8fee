//! Reading report files: [`Document`] (one file, single or merged) and [`ReadError`]; a
//! report's leaks folded while it is parsed ([`LeakFold`]), when the caller asks for a fold;
//! [`open_regular`], how a report and every file a report or history names (a module the
//! symbolizer reads) is opened: never blocking, a regular file only, read to its size at open.
//!
//! One report describes one process. A *merged* report, written by `cuguard merge`, holds
//! several of them verbatim in a `processes` array under the same schema name and version;
//! [`Document`] reads both shapes and hands out one [`Report`] per process.
//!
//! Reading is lenient where the contract allows growth: unknown fields are ignored, fields added
//! after the first contract (`config`, `modules`, `faults`, `doors`, `timeline`, `owners`,
//! `peaks`, `stack_samples`, `ooms`, `reconciliation`, …) may be absent, and enumerations keep
//! values this version does not know (`Other`). Anything that is not a schema-version-1 report
//! is refused with a [`ReadError`] whose message is one line.
//!
//! The reader parses `leaks` and `stacks` by hand where it can ([`fast`]), with serde_json's
//! result; serde_json parses the rest, and the whole document wherever the fast path gives up.
//! [`Document::read`] hands out reports with their leaks; [`Document::read_folding`] and
//! [`Document::merged_process_folding`] hand each report out without them, beside the
//! [`LeakFold`] they went into, for the commands that read millions.
//!
//! A single report is parsed in one pass straight into [`Report`]. Only when that fails does
//! the reader look at the document's header (`schema`, `schema_version`, `processes`) to tell a
//! merged report, a foreign document or another version from a malformed report, so that the
//! error names the real problem. A merged report's processes are kept as byte ranges of the file
//! and parsed one at a time, so memory holds the file and one process, never all of them parsed;
//! the header only steps over them, and each is checked as it is parsed (a process that is not
//! JSON gets serde_json's complaint about the whole file then, with its line and column).

mod buffer;
mod error;
mod fast;
#[doc(hidden)]
pub use fast::read_core;
pub mod fold;
mod open;
#[cfg(test)]
mod tests;

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::model::{Report, SCHEMA_NAME, SCHEMA_VERSION};
use crate::units::one_line;
use buffer::Buffer;
pub use error::ReadError;
use fold::Leaks;
pub use fold::{LeakFold, LeakGroup};
pub use open::{NotRegular, OpenError, open_regular};

/// Files larger than this are refused unless the caller asks for another limit (4 GiB).
pub const DEFAULT_MAX_REPORT_BYTES: u64 = 4 << 30;

/// One report file: a single process's report, or a merged report of several.
///
/// ```no_run
/// use cuguard_format::read::Document;
/// let doc = Document::read(std::path::Path::new("cuguard.train.4242.json"))?;
/// for report in doc.into_reports() {
///     let report = report?;
///     println!("{} leaked {} bytes", report.process_name(), report.leaked_bytes());
/// }
/// # Ok::<(), cuguard_format::read::ReadError>(())
/// ```
#[derive(Debug)]
pub struct Document {
    path: PathBuf,
    bytes: Buffer,
    shape: Shape,
}

#[derive(Debug)]
enum Shape {
    /// A single report, already parsed (taken by the first call of `Reports::next`).
    Single(Option<Box<Report>>),
    /// A merged report: the byte ranges of each process in `bytes`.
    Merged(Vec<Range<usize>>),
}

/// What the reader looks at when a document does not parse as a single report (see
/// [`fast::Header`]), as serde_json reads it.
#[derive(Deserialize)]
pub(crate) struct Header<'a> {
    #[serde(default)]
    pub(crate) schema: Option<Value>,
    #[serde(default)]
    pub(crate) schema_version: Option<Value>,
    #[serde(default, borrow)]
    pub(crate) processes: Option<Vec<&'a RawValue>>,
}

impl Document {
    /// Reads and checks a report file, refusing files over [`DEFAULT_MAX_REPORT_BYTES`].
    pub fn read(path: &Path) -> Result<Document, ReadError> {
        Self::read_with_limit(path, DEFAULT_MAX_REPORT_BYTES)
    }

    /// Reads and checks a report file, refusing files over `limit` bytes.
    pub fn read_with_limit(path: &Path, limit: u64) -> Result<Document, ReadError> {
        let bytes = Buffer::read(path, limit)?;
        Self::from_bytes_into(path, bytes, Leaks::Keep)
    }

    /// As [`Document::read_with_limit`], but a single report's leaks are folded while it is
    /// parsed (keeping the `keep` largest) into the fold returned beside the document, never
    /// held: the report the document hands out has empty `leaks`. A merged report's processes
    /// are not parsed yet, so its fold is empty: fold each with
    /// [`Document::merged_process_folding`].
    pub fn read_folding(
        path: &Path,
        limit: u64,
        keep: usize,
    ) -> Result<(Document, LeakFold), ReadError> {
        let bytes = Buffer::read(path, limit)?;
        let mut fold = LeakFold::new(keep);
        let doc = Self::from_bytes_into(path, bytes, Leaks::Fold(&mut fold))?;
        Ok((doc, fold))
    }

    /// Checks a document held in memory; `path` names it in errors.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Document, ReadError> {
        Self::from_bytes_into(path, Buffer::from_vec(bytes), Leaks::Keep)
    }

    /// Checks a document; a single report's leaks go where `leaks` says.
    fn from_bytes_into(
        path: &Path,
        bytes: Buffer,
        mut leaks: Leaks<'_>,
    ) -> Result<Document, ReadError> {
        let path = path.to_path_buf();
        match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => {}
            Some(_) => {
                return Err(ReadError::NotAReport {
                    path,
                    reason: "the document is not a JSON object".into(),
                });
            }
            None => {
                return Err(ReadError::Truncated {
                    path,
                    reason: "the file is empty".into(),
                });
            }
        }
        // `cuguard merge` writes `"merged"` near the start: such a document is probed as merged
        // first, sparing a parse as a single report that would fail. The hint only orders the
        // attempts; both shapes are still recognized whatever it says.
        let mut first_try = None;
        if !looks_merged(&bytes) {
            crate::intern::reset();
            match parse_single(&bytes, leaks.reborrow()) {
                Ok(report) => return single(path, bytes, report),
                Err(e) => first_try = e,
            }
        }
        let fast = std::str::from_utf8(&bytes).ok().and_then(fast::header);
        let (schema, schema_version, processes) = match fast {
            Some(header) => header,
            None => match parse::<Header>(&bytes) {
                Ok(h) => (
                    h.schema,
                    h.schema_version,
                    h.processes
                        .map(|list| list.into_iter().map(RawValue::get).collect()),
                ),
                Err(e) => return Err(classify(&path, &e, None)),
            },
        };
        check_header(&path, schema.as_ref(), schema_version.as_ref())?;
        let Some(processes) = processes else {
            let e = match first_try {
                Some(e) => e,
                None => {
                    crate::intern::reset();
                    match parse_report(&bytes, leaks.reborrow()) {
                        Err(e) => e,
                        Ok(report) => return single(path, bytes, report),
                    }
                }
            };
            return Err(classify(&path, &e, None));
        };
        let base = bytes.as_ptr() as usize;
        let mut ranges = Vec::with_capacity(processes.len());
        for (i, text) in processes.iter().enumerate() {
            let start = (text.as_ptr() as usize).wrapping_sub(base);
            let range = start..start.wrapping_add(text.len());
            if bytes.get(range.clone()) != Some(text.as_bytes()) {
                return Err(ReadError::Invalid {
                    path,
                    process: Some(i),
                    reason: "could not locate the process in the document".into(),
                });
            }
            ranges.push(range);
        }
        Ok(Document {
            path,
            bytes,
            shape: Shape::Merged(ranges),
        })
    }

    /// The file this document came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this is a merged report (written by `cuguard merge`).
    pub fn is_merged(&self) -> bool {
        matches!(self.shape, Shape::Merged(_))
    }

    /// How many processes it describes.
    pub fn len(&self) -> usize {
        match &self.shape {
            Shape::Single(_) => 1,
            Shape::Merged(ranges) => ranges.len(),
        }
    }

    /// Whether it describes no process (an empty merged report).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The JSON text of each process's report, as written in the file.
    pub fn raw_processes(&self) -> impl Iterator<Item = &[u8]> {
        let ranges: &[Range<usize>] = match &self.shape {
            Shape::Single(_) => &[],
            Shape::Merged(ranges) => ranges,
        };
        let whole = matches!(self.shape, Shape::Single(_)).then_some(&self.bytes[..]);
        whole
            .into_iter()
            .chain(ranges.iter().map(|r| &self.bytes[r.clone()]))
    }

    /// Parses the `i`-th process of a merged report (`None` past the end, or for a single
    /// report, whose one report [`Document::into_reports`] hands out). Safe to call from
    /// several threads at once.
    pub fn merged_process(&self, i: usize) -> Option<Result<Report, ReadError>> {
        match &self.shape {
            Shape::Merged(ranges) => ranges
                .get(i)
                .map(|r| parse_process(&self.path, &self.bytes, r.clone(), i, Leaks::Keep)),
            Shape::Single(_) => None,
        }
    }

    /// As [`Document::merged_process`], but the process's leaks are folded while it is parsed
    /// (keeping the `keep` largest) into the fold returned beside the report, whose own
    /// `leaks` is empty.
    pub fn merged_process_folding(
        &self,
        i: usize,
        keep: usize,
    ) -> Option<Result<(Report, LeakFold), ReadError>> {
        let Shape::Merged(ranges) = &self.shape else {
            return None;
        };
        let range = ranges.get(i)?.clone();
        let mut fold = LeakFold::new(keep);
        let report = parse_process(&self.path, &self.bytes, range, i, Leaks::Fold(&mut fold));
        Some(report.map(|r| (r, fold)))
    }

    /// Parses every process of a merged report (a single report was parsed when read), so that
    /// [`Document::raw_processes`] hands out only valid reports.
    pub fn check_processes(&self) -> Result<(), ReadError> {
        if let Shape::Merged(ranges) = &self.shape {
            for (i, range) in ranges.iter().enumerate() {
                parse_process(&self.path, &self.bytes, range.clone(), i, Leaks::Keep)?;
            }
        }
        Ok(())
    }

    /// The reports, one per process, each parsed when it is reached.
    pub fn into_reports(self) -> Reports {
        Reports { doc: self, next: 0 }
    }
}

impl Drop for Document {
    fn drop(&mut self) {
        self.bytes.recycle();
    }
}

/// The reports of a [`Document`], parsed one at a time. See [`Document::into_reports`].
#[derive(Debug)]
pub struct Reports {
    doc: Document,
    next: usize,
}

impl Iterator for Reports {
    type Item = Result<Report, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let i = self.next;
        self.next += 1;
        match &mut self.doc.shape {
            Shape::Single(slot) => {
                // Free the file's bytes: the parsed report is all that is needed now.
                self.doc.bytes.recycle();
                slot.take().map(|r| Ok(*r))
            }
            Shape::Merged(ranges) => {
                let range = ranges.get(i)?.clone();
                let parsed = parse_process(&self.doc.path, &self.doc.bytes, range, i, Leaks::Keep);
                if i + 1 == ranges.len() {
                    self.doc.bytes.recycle();
                    *ranges = Vec::new();
                }
                Some(parsed)
            }
        }
    }
}

/// The report in `text` as the reader's fast path reads it, its leaks kept; `None` where the
/// fast path gives up (the reader then parses the document with serde_json, whose result is the
/// same). For the tests and benchmarks that check the fast path covers what the shim writes.
pub fn fast_path(text: &str) -> Option<Report> {
    crate::intern::reset();
    fast::report(text, Leaks::Keep).ok()
}

/// Parses JSON text: as `str` when it is valid UTF-8 (checked once for the whole text, not
/// string by string), else as bytes, so that the error is the parser's own.
fn parse<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(bytes),
    }
}

/// Parses one process's report: through the fast path where it handles the document exactly,
/// else through serde_json ([`slow`]).
fn parse_report(bytes: &[u8], mut leaks: Leaks<'_>) -> serde_json::Result<Report> {
    parse_single(bytes, leaks.reborrow()).or_else(|e| match e {
        Some(e) => Err(e),
        None => slow(bytes, leaks),
    })
}

/// As [`parse_report`], but when the fast path finds that the document cannot be a report (an
/// object without `leaks`: a merged report, say), the error is left to be made if it is
/// needed (`Err(None)`), sparing a pass of serde_json that would fail.
fn parse_single(bytes: &[u8], mut leaks: Leaks<'_>) -> Result<Report, Option<serde_json::Error>> {
    use fast::GaveUp;
    match std::str::from_utf8(bytes) {
        Ok(text) => match fast::report(text, leaks.reborrow()) {
            Ok(report) => Ok(report),
            Err(GaveUp::NoLeaks) => Err(None),
            Err(GaveUp::Other) => slow(bytes, leaks).map_err(Some),
        },
        Err(_) => slow(bytes, leaks).map_err(Some),
    }
}

/// serde_json's parse of a report, its result and error standing. Folding, the `leaks` array
/// is parsed element by element into the fold and the rest of the document beside it, so that
/// memory never holds the leaks; where that split cannot be made, the whole document is parsed
/// (for serde_json's own error, or its leaks then folded).
fn slow(bytes: &[u8], leaks: Leaks<'_>) -> serde_json::Result<Report> {
    let fold = match leaks {
        Leaks::Keep => return parse(bytes),
        Leaks::Fold(fold) => fold,
    };
    fold.clear();
    if let Some((text, range)) = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| Some((text, fast::leaks_range(text)?)))
    {
        let mut de = serde_json::Deserializer::from_str(&text[range.clone()]);
        let folded = serde::Deserializer::deserialize_seq(&mut de, IntoFold(&mut *fold))
            .and_then(|()| de.end());
        if folded.is_ok() {
            let rest = [&text[..range.start], "[]", &text[range.end..]].concat();
            if let Ok(report) = serde_json::from_str::<Report>(&rest) {
                return Ok(report);
            }
        }
        fold.clear();
    }
    let mut report: Report = parse(bytes)?;
    for leak in report.leaks.drain(..) {
        fold.push(leak);
    }
    Ok(report)
}

/// Folds a sequence of leaks as serde_json parses them, one at a time.
struct IntoFold<'f>(&'f mut LeakFold);

impl<'de> serde::de::Visitor<'de> for IntoFold<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(leak) = seq.next_element::<crate::leak::LeakView<'de>>()? {
            self.0.leak(&leak);
        }
        Ok(())
    }
}

/// A single report's document, once its identity is checked.
fn single(path: PathBuf, bytes: Buffer, report: Report) -> Result<Document, ReadError> {
    check_identity(&path, &report)?;
    Ok(Document {
        path,
        bytes,
        shape: Shape::Single(Some(Box::new(report))),
    })
}

/// Whether `"merged"` appears in the document's first 4 KiB, where `cuguard merge` writes it.
fn looks_merged(bytes: &[u8]) -> bool {
    const KEY: &[u8] = b"\"merged\"";
    let head = &bytes[..bytes.len().min(4096)];
    head.windows(KEY.len()).any(|w| w == KEY)
}

/// Parses the `i`-th process of a merged report, at `range` in the document `whole`.
///
/// The document's header stepped over each process without checking it (see [`fast::header`]),
/// so a process that is not JSON is found here: the complaint is then serde_json's about the
/// whole document, as it would have been had the document been checked whole when read (where
/// it is, in the file's lines and columns).
fn parse_process(
    path: &Path,
    whole: &[u8],
    range: Range<usize>,
    i: usize,
    leaks: Leaks<'_>,
) -> Result<Report, ReadError> {
    use serde_json::error::Category;
    crate::intern::reset();
    let report = parse_report(&whole[range], leaks).map_err(|e| {
        if let Category::Syntax | Category::Eof = e.classify()
            && let Err(e) = parse::<serde::de::IgnoredAny>(whole)
        {
            return classify(path, &e, None);
        }
        classify(path, &e, Some(i))
    })?;
    check_identity(path, &report).map_err(|e| match e {
        ReadError::NotAReport { path, reason } => ReadError::Invalid {
            path,
            process: Some(i),
            reason,
        },
        other => other,
    })?;
    Ok(report)
}

/// Refuses a parsed report whose `schema` or `schema_version` is not ours.
fn check_identity(path: &Path, report: &Report) -> Result<(), ReadError> {
    if report.schema != SCHEMA_NAME {
        return Err(ReadError::NotAReport {
            path: path.to_path_buf(),
            reason: format!(
                "schema is {:?}, expected {SCHEMA_NAME:?}",
                one_line(&report.schema)
            ),
        });
    }
    if report.schema_version != SCHEMA_VERSION {
        return Err(ReadError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: report.schema_version.to_string(),
        });
    }
    Ok(())
}

/// Refuses a document whose header is not a version-1 cuguard report's.
fn check_header(
    path: &Path,
    schema: Option<&Value>,
    schema_version: Option<&Value>,
) -> Result<(), ReadError> {
    let not = |reason: String| ReadError::NotAReport {
        path: path.to_path_buf(),
        reason,
    };
    match schema {
        None => return Err(not("no \"schema\" field".into())),
        Some(Value::String(s)) if s == SCHEMA_NAME => {}
        Some(other) => {
            return Err(not(format!(
                "schema is {}, expected {SCHEMA_NAME:?}",
                one_line(&other.to_string())
            )));
        }
    }
    match schema_version {
        Some(Value::Number(n)) if n.as_u64() == Some(SCHEMA_VERSION) => Ok(()),
        Some(other) => Err(ReadError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: one_line(&other.to_string()),
        }),
        None => Err(ReadError::Invalid {
            path: path.to_path_buf(),
            process: None,
            reason: "missing field `schema_version`".into(),
        }),
    }
}

/// Turns a parser error into the matching [`ReadError`].
fn classify(path: &Path, e: &serde_json::Error, process: Option<usize>) -> ReadError {
    use serde_json::error::Category;
    let path = path.to_path_buf();
    let reason = one_line(&e.to_string());
    match e.classify() {
        Category::Eof => ReadError::Truncated { path, reason },
        Category::Syntax => ReadError::Malformed { path, reason },
        Category::Io => ReadError::Malformed { path, reason },
        Category::Data => ReadError::Invalid {
            path,
            process,
            reason,
        },
    }
}
