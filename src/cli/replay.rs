//! `cuguard replay`: a process's history replayed against models of the allocators it could
//! have run on ([`crate::replay`]): what would have fit.

use std::path::PathBuf;

use clap::Args;

use super::check::parse_bytes;
use super::common::write_stdout;
use super::error::CliError;
use super::exit;
use crate::output::{Options, Row};
use crate::replay::{Allocator, Ask, Capacity, FORMATS, Plan, ReplayError, Replayed, Settings};

/// Arguments of `cuguard replay`.
#[derive(Debug, Args)]
#[command(after_help = "\
The requests are the blocks the program was handed on the device (cuMemAlloc, cuMemAllocAsync,
managed, VMM, cuguard's pool blocks; not segments, not pinned host memory) and the refusals the
run met, in time order, numbered from 1: a failure names its request's number as its event.
Under PyTorch the history records the cache's segments, not its tensors: under torch the
requests are those segments. Allocators: driver (each request its own cudaMalloc, rounded to
2 MiB), async (the driver's stream-ordered pool), cuguard (cuguard's pool), rmm-pool (RMM's
pool_memory_resource), torch (PyTorch's caching allocator), torch-expandable (the same with
expandable_segments:True). docs/cli.md says each model's rules.

Examples:
  cuguard replay r.json --capacity 100%                  # the run's own device, every allocator
  cuguard replay r.json --capacity 40GiB,80GiB --allocator torch,torch-expandable
  cuguard replay r.history --capacity 16GiB --allocator async --release-threshold max
  cuguard replay r.json --find-capacity --allocator driver,cuguard
  cuguard replay r.json --capacity 95% --format json")]
pub struct ReplayArgs {
    /// The device's memory to replay against: 80GiB, 512MiB, bytes, a share of the recorded
    /// device (95%: needs the report), or a comma list, each replayed.
    #[arg(long, value_name = "SIZE", value_parser = capacities, required_unless_present = "find_capacity", conflicts_with = "find_capacity")]
    pub capacity: Option<Capacities>,
    /// For each allocator, the smallest capacity at which it fits, to 2 MiB (found by replaying
    /// at capacities bisected).
    #[arg(long)]
    pub find_capacity: bool,
    /// The allocators: driver, async, cuguard, rmm-pool, torch, torch-expandable, or all,
    /// comma-separated.
    #[arg(long, value_name = "NAME[,NAME…]", value_parser = allocators, default_value = "all")]
    pub allocator: Allocators,
    /// async: what the pool keeps reserved at a synchronization (taken after every free):
    /// bytes, or max (keep everything).
    #[arg(long, value_name = "SIZE", value_parser = threshold, default_value = "0")]
    pub release_threshold: u64,
    /// rmm-pool: the pool made at the start [default: half the capacity].
    #[arg(long, value_name = "SIZE", value_parser = bytes)]
    pub initial_pool: Option<u64>,
    /// rmm-pool: the most the pool grows to [default: none, as RMM's: the pool doubles as it
    /// grows].
    #[arg(long, value_name = "SIZE", value_parser = bytes)]
    pub maximum_pool: Option<u64>,
    /// The device whose allocations are replayed [default: the first the history allocates on].
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// Output format.
    #[arg(long, value_parser = FORMATS, default_value = FORMATS.default_format().name())]
    pub format: &'static Row<Replayed>,
    /// One process's report (its history beside it) or its history file.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

/// The capacities `--capacity` lists.
#[derive(Clone, Debug)]
pub struct Capacities(pub Vec<Capacity>);

/// The allocators `--allocator` lists.
#[derive(Clone, Debug)]
pub struct Allocators(pub Vec<Allocator>);

/// `--capacity`: a comma list of sizes or shares.
fn capacities(text: &str) -> Result<Capacities, String> {
    Capacity::parse_list(text, parse_bytes).map(Capacities)
}

/// `--allocator`: a comma list of names.
fn allocators(text: &str) -> Result<Allocators, String> {
    Allocator::parse_list(text).map(Allocators)
}

/// A size in bytes (`512MiB`, `2GiB`, a plain count).
fn bytes(text: &str) -> Result<u64, String> {
    parse_bytes(text)
}

/// `--release-threshold`: a size, or `max`.
fn threshold(text: &str) -> Result<u64, String> {
    match text.trim() {
        "max" => Ok(u64::MAX),
        t => parse_bytes(t),
    }
}

/// Runs `cuguard replay`.
pub fn run(args: ReplayArgs) -> Result<u8, CliError> {
    let plan = match args.capacity {
        Some(c) => Plan::At(c.0),
        None => Plan::Find,
    };
    let ask = Ask {
        allocators: args.allocator.0,
        plan,
        settings: Settings {
            release_threshold: args.release_threshold,
            initial_pool: args.initial_pool,
            maximum_pool: args.maximum_pool,
        },
        device: args.device,
    };
    let replayed = crate::replay::replay(&args.path, &ask).map_err(|e| match e {
        ReplayError::Input(e) => CliError::Input(e),
        ReplayError::Usage(why) => CliError::Usage(why),
    })?;
    write_stdout(|out| args.format.write(&replayed, out, &Options::default()))?;
    Ok(exit::OK)
}
