//! `cuguard replay`: what would have fit. A process's history (its allocations and frees, in
//! order, with their sizes and streams, and the refusals it met) replayed against models of the
//! allocators a program could run on, each on a device of a capacity asked: does it fit, and if
//! not, which request fails, when, at which site, with how much live and how much idle.
//!
//! ```text
//! history ──walk──▶ requests (Op) ──▶ run: each allocator × capacity ──▶ answer ──▶ text | json
//!                        └──▶ tape ──▶ find: the smallest capacity, by bisection ──┘
//! ```
//!
//! - [`walk`]: the replay from end to end ([`replay`]);
//! - [`requests`]: which steps of the history are requests, and what a refusal is;
//! - [`run`]: models fed side by side, each stopped at its first failure; [`pipeline`]: on
//!   worker threads, while the history is read;
//! - [`tape`], [`find`]: the requests written down once and replayed at capacities searched;
//! - [`ask`]: what is asked (capacities, allocators, settings) and why it cannot be answered;
//! - [`answer`]: the answer, its sites named; [`text`] and [`json`] its formats ([`FORMATS`]);
//! - the models, one allocator each, behind [`model::Model`] over a [`model::Device`] of the
//!   capacity asked ([`allocators`] names them): [`driver`], [`async_pool`] (`async`),
//!   [`cuguard`], [`rmm`] (`rmm-pool`), [`torch`], [`torch_expandable`]; [`free_list`] is the
//!   coalescing best-fit list RMM's and PyTorch's models carve blocks with.
//!
//! Memory: the walk keeps what is live (by address), each model its own blocks (free lists
//! in B-trees); `--find-capacity` keeps its requests in a temporary file, not in memory.

pub mod allocators;
pub mod answer;
pub mod ask;
pub mod async_pool;
pub mod cuguard;
pub mod driver;
pub mod find;
pub mod free_list;
pub mod json;
pub mod model;
pub mod pipeline;
pub mod requests;
pub mod rmm;
pub mod run;
pub mod tape;
pub mod text;
pub mod torch;
pub mod torch_expandable;
pub mod walk;

pub use allocators::{Allocator, Settings};
pub use answer::Replayed;
pub use ask::{Ask, Capacity, Plan, ReplayError};
pub use walk::replay;

use crate::output::{Registry, Row};

/// The formats of `cuguard replay --format`, the default first.
pub const FORMATS: Registry<Replayed> =
    Registry::new(&[Row::of::<text::Text>(), Row::of::<json::Json>()]);
