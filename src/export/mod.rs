//! Exports of a run (its reports and histories, [`cuguard_history::replay::Replay`]) to other
//! tools' formats, one file per format. Each export is a pure function from what was read to
//! the bytes of the file; the command writes them.
//!
//! - [`memory_viz`](memory_viz::memory_viz): PyTorch's memory snapshot, the pickle that
//!   <https://pytorch.org/memory_viz> and `torch.cuda._memory_viz` read;
//! - [`pickle`]: the minimal pickle writer it is written with;
//! - [`pprof`](pprof::pprof): pprof's gzipped `profile.proto`, written from a [`profile`] that
//!   [`heap`] makes of reports and histories (Go's heap profile's sample types).

pub mod heap;
pub mod memory_viz;
pub mod pickle;
pub mod pprof;
pub mod profile;

pub use memory_viz::{VizFrame, memory_viz, memory_viz_with_free};

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
