//! The three doors by which programs reach the driver, and how the shim stands in each. This is
//! the top of the shim: the doors join the driver-entry table ([`crate::driver::entry_table`]) to the
//! handlers in [`crate::hooks`], and nothing below imports them.
//!
//! - [`exports`]: the shim's exported symbols, which `-lcuda` programs bind to, and the functions
//!   the other two doors hand out; both generated from the table;
//! - [`dlsym`]: lookups of driver names on the driver's handle (cudarc, numba, XLA, and the CUDA
//!   runtime's first lookup of `cuGetProcAddress_v2`);
//! - [`procaddr`]: `cuGetProcAddress`/`_v2`, the runtime's path to everything else, including the
//!   driver's own `cuGetProcAddress` looked up through itself.
//!
//! Beside the driver, [`nvml`] stands in for NVML's memory-info entries under a limit, through
//! an export and the same `dlsym` door (names starting `nvml`).
//!
//! The two lookup doors ask the real driver first and then route by the pointer it returned
//! ([`exports::substitute`], beside the functions it hands out): if that is the real address of
//! an entry the shim stands in for, the program gets the handed-out function instead. Versioned
//! and `_ptsz` entries are therefore told apart by what the driver chose, never by guessing from
//! the name.
//!
//! The files import one way: [`dlsym`] → [`exports`] → [`procaddr`]. The `cuGetProcAddress`
//! functions that [`exports`] hands out call [`procaddr`]'s handlers with `substitute` as an
//! argument, since `substitute` can hand out those very functions.

pub mod dlsym;
pub mod exports;
pub mod nvml;
pub mod procaddr;
