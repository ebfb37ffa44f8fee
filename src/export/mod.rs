//! Exports of a history ([`cuguard_history::replay::Replay`]) to other tools' formats, one file
//! per format. Each export is a pure function from the replay to the bytes of the file; the
//! command writes them.
//!
//! - [`pickle`]: a minimal pickle writer, for PyTorch's formats.

pub mod pickle;

#[cfg(test)]
pub(crate) mod testing;
