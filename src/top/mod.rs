//! `cuguard top`: the processes under the shim on this machine (this user's), live, from their
//! stats pages ([`crate::live`]).
//!
//! - [`once`]: `--once`, one frame as plain text (its format is documented there);
//! - [`app`]: the interactive view's state and keys; [`draw`]: its screens (ratatui);
//!   [`terminal`]: the loop that reads, draws and answers keys;
//! - [`spark`]: a history as a text sparkline.

pub mod app;
pub mod draw;
pub mod once;
pub mod spark;
pub mod terminal;
