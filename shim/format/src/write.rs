//! Writing a report: compact JSON, one document, a newline at the end.

use std::io;

use crate::model::Report;

/// Writes `report` as one line of compact JSON and a newline.
pub fn write(report: &Report, mut out: impl io::Write) -> io::Result<()> {
    serde_json::to_writer(&mut out, report)?;
    out.write_all(b"\n")
}

/// `report` as one line of compact JSON and a newline.
pub fn to_vec(report: &Report) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    // Writing to a Vec cannot fail, nor can serializing these types (string keys, no
    // non-finite float: serde_json writes those as null).
    let _ = write(report, &mut out);
    out
}
