//! The model layer: each family's types and rules, one file per family, in plain Rust.
//!
//! A model knows nothing of the driver's global state (`state/`) nor of C entry points
//! (`entries/`): no `extern "C"`, no out-pointers, no lock of the state. A model may use another
//! family's model types (an allocation names its context, a context holds its streams), never the
//! layers above. `tests/layers.rs` keeps it so. To change how a family behaves, start here.

pub mod capture;
pub mod context;
pub mod copy;
pub mod device;
pub mod event;
pub mod ipc;
pub mod memory;
pub mod peer;
pub mod pointer;
pub mod pool;
pub mod stream;
pub mod vmm;
