//! The handlers: what the shim does when a program calls a driver entry it stands in for, one
//! module per API family (`peers` also serves the `copy` rows), and the steps every handler shares ([`track`]: find the current context, record
//! an allocation, account for a free).
//!
//! A handler is named after the first form of its row in the driver-entry table
//! ([`crate::driver::entry_table`]) and takes the form that was called, the typed real entry and the
//! program's arguments; `doors::exports` calls it from the shim's exported symbols and from the
//! functions the lookup doors hand out. Each is thin: forward to the real driver (or to the pool,
//! through [`crate::serving::serve`], for cuMemAlloc/cuMemFree), then tell the tracker under a
//! [`crate::guard::Guard`] and [`crate::guard::shield`]. The driver's result is always what the
//! program gets.

mod context;
pub mod cxx_throw;
mod host;
mod memory;
pub mod nvml;
pub(crate) mod oom;
mod peers;
mod query;
pub mod shown;
mod stream_ordered;
mod streams;
pub mod submit;
pub mod torch_blocks;
mod track;
mod vmm;

pub use context::*;
pub use host::*;
pub use memory::*;
pub use peers::*;
pub use query::*;
pub use stream_ordered::*;
pub use streams::*;
pub use vmm::*;
