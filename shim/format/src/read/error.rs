//! Why a file could not be read as a report ([`ReadError`]), in one line.

use std::fmt;
use std::path::{Path, PathBuf};

use super::open::NotRegular;
use crate::model::SCHEMA_VERSION;
use crate::units::one_line;

/// Why a file could not be read as a report. `Display` gives one line: `PATH: reason`.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be opened or read.
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The name is not a regular file (a FIFO, a device, a directory…): it is not read.
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is.
        what: NotRegular,
    },
    /// The file is larger than the limit.
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The file ends in the middle of the document.
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where.
        reason: String,
    },
    /// The file is not JSON.
    Malformed {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        reason: String,
    },
    /// The file is JSON but not a cuguard report.
    NotAReport {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// A cuguard report of a schema version this program does not read.
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version found, as written.
        found: String,
    },
    /// A cuguard report whose content breaks the contract (a missing field, a wrong type).
    Invalid {
        /// The file.
        path: PathBuf,
        /// In a merged report, the index of the offending process.
        process: Option<usize>,
        /// The parser's complaint.
        reason: String,
    },
}

impl ReadError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ReadError::Io { path, .. }
            | ReadError::NotRegular { path, .. }
            | ReadError::TooLarge { path, .. }
            | ReadError::Truncated { path, .. }
            | ReadError::Malformed { path, .. }
            | ReadError::NotAReport { path, .. }
            | ReadError::UnsupportedVersion { path, .. }
            | ReadError::Invalid { path, .. } => path,
        }
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = one_line(&self.path().display().to_string());
        match self {
            ReadError::Io { source, .. } => write!(f, "{path}: {}", one_line(&source.to_string())),
            ReadError::NotRegular { what, .. } => write!(f, "{path}: not a regular file ({what})"),
            ReadError::TooLarge { size, limit, .. } => write!(
                f,
                "{path}: file is {size} bytes, more than the limit of {limit} bytes"
            ),
            ReadError::Truncated { reason, .. } => write!(f, "{path}: truncated: {reason}"),
            ReadError::Malformed { reason, .. } => write!(f, "{path}: not valid JSON: {reason}"),
            ReadError::NotAReport { reason, .. } => {
                write!(f, "{path}: not a cuguard report: {reason}")
            }
            ReadError::UnsupportedVersion { found, .. } => write!(
                f,
                "{path}: unsupported schema_version {found} (this cuguard reads version {SCHEMA_VERSION})"
            ),
            ReadError::Invalid {
                process: Some(i),
                reason,
                ..
            } => write!(f, "{path}: invalid report (process {i}): {reason}"),
            ReadError::Invalid { reason, .. } => write!(f, "{path}: invalid report: {reason}"),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
