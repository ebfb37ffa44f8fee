//! Exports of a history ([`cuguard_history::replay::Replay`]) to other tools' formats, one file
//! per format. Each export is a pure function from the replay to the bytes of the file; the
//! command writes them.
//!
//! - [`memory_viz`](memory_viz::memory_viz): PyTorch's memory snapshot, the pickle that
//!   <https://pytorch.org/memory_viz> and `torch.cuda._memory_viz` read;
//! - [`pickle`]: the minimal pickle writer it is written with.

pub mod memory_viz;
pub mod pickle;

pub use memory_viz::{VizFrame, memory_viz};

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
