//! The real driver, at the bottom of the shim: the table of every entry the shim knows and the
//! real addresses of those entries.
//!
//! - [`entry_table`]: one row per entry: its forms, its C signature and its role (see there).
//!   [`Entry`] names an entry.
//! - [`submit_rows`]: the table's generated rows (entries that submit device work).
//! - [`loader`]: the real `dlsym`, the driver library, and the resolved addresses.
//! - [`real`]: the real driver's entries, typed, from those addresses.
//! - [`device_uuid`]: a device's UUID, as `nvidia-smi` prints it, and the ordinal of a UUID.
//! - [`nvml`]: NVML, for device memory in use without a context and this process's usage.
//! - [`nvml_entries`]: the real NVML entries behind the shim's NVML stand-ins.
//! - [`mem_pools`]: the driver's stream-ordered memory pools and what each holds idle.
//!
//! The shim never calls its own exports: every call it makes to the driver goes through
//! [`real`], whose pointers come from the real `dlsym` on the driver's own handle. Nothing here
//! knows the hooks; `doors` joins the two.

#[macro_use]
mod submit_rows;
pub mod device_uuid;
pub mod entry_table;
pub mod loader;
pub mod mem_pools;
pub mod nvml;
pub mod nvml_entries;
pub mod real;

pub(crate) use entry_table::for_each_entry;
pub(crate) use submit_rows::submit_rows;

pub use entry_table::{Entry, sig};
pub use loader::{
    REAL_DLSYM, driver, driver_if_loaded, entry_at, is_driver_name, real_dlsym, resolve_real_dlsym,
};
pub use real::current_context;
