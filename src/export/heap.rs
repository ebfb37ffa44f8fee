//! A run's device memory as a heap profile (Go's, as pprof reads it): what was in use at the end
//! (the report's live allocations) or at a moment (from the history), and what was allocated
//! over the run up to then (from the history), by stack, device, owner, process and rank, and
//! by the program's tag (`cuguard.tag`, `cuguard_tag_push`, `cuguard.annotate`): a sample of
//! tagged allocations has the label `tag` (`go tool pprof -tags` lists them, `-tagfocus`
//! keeps one). A tag given after the fact counts for the allocation whole, in `alloc_*` too.
//!
//! Inside a framework's cache (PyTorch's, with its blocks recorded), `inuse_*` at a moment
//! counts the cache's blocks (tensors) at the lines that asked for them, and each segment's
//! bytes no block held as their own entry: [`IDLE_FRAME`] above the segment's stack, labelled
//! `cache=idle`, with no object count. `alloc_*` counts the driver's allocations (segments).

use std::collections::HashMap;
use std::path::PathBuf;

use cuguard_history::bounded::Step;
use cuguard_history::replay::Block;

use super::profile::{ALLOC, Builder, INUSE, Profile};
use crate::history::moment::Piece;
use crate::history::{Opened, stack_key, stacks_by_id};
use crate::input::InputError;
use crate::owners::OwnerIndex;
use cuguard_format::{Memory, Report};

/// The innermost frame of a framework cache's idle bytes at a moment (freed blocks it keeps
/// for reuse), above the stack of the segment they are in: its own entry in `top`.
pub const IDLE_FRAME: &str = "(idle in the cache: freed, kept for reuse)";

/// One process of the run: its report (when there is one) and where its history is (when it
/// has one). Histories are opened one at a time, as the profile reaches them: a run of
/// thousands of ranks holds one open.
pub struct Process {
    pub report: Option<Report>,
    pub history: Option<HistoryAt>,
}

/// Where a process's history is read from.
pub enum HistoryAt {
    /// A history file given alone.
    File(PathBuf),
    /// The history the process's report names, the report read from this path.
    OfReport(PathBuf),
}

/// Why a profile could not be made.
pub enum HeapError {
    /// A history could not be read.
    Input(InputError),
    /// A process's moment (`--at`) is not one of its history: what to say.
    Moment(String),
}

impl Process {
    fn open(&self) -> Result<Option<Opened>, InputError> {
        match (&self.history, &self.report) {
            (Some(HistoryAt::File(path)), _) => crate::history::load(path).map(Some),
            (Some(HistoryAt::OfReport(path)), Some(r)) => {
                crate::history::of_report(r, path).map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// When the in-use part is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// At the end: the report's live allocations, or for a Python program those live when its
    /// code ended (the report's end view); a history file alone: what was live when it ended.
    End,
    /// At each process's moment, nanoseconds since its start (from its history).
    At,
}

/// The profile of `processes`. `alloc`: with `alloc_*` over the run (every process has a
/// history). `at`: each process's moment for [`When::At`] (and the end of its `alloc_*`), as
/// `summary --at` reads it. Each history is walked once for `alloc_*` and read at its moment
/// for `inuse_*`, in memory that does not grow with it.
pub fn heap(
    processes: &[Process],
    when: When,
    at: Option<&str>,
    alloc: bool,
) -> Result<Profile, HeapError> {
    let types = if alloc {
        ALLOC.iter().chain(INUSE.iter()).cloned().collect()
    } else {
        INUSE.to_vec()
    };
    let mut b = Builder::new(types, "inuse_space");
    let mut start = u64::MAX;
    let mut end = 0;
    let mut main: Option<String> = None;
    for (pi, p) in processes.iter().enumerate() {
        let history = p.open().map_err(HeapError::Input)?;
        let names = history.as_ref().map(Opened::names);
        let Some(base) = p.report.as_ref().or(names.as_ref()) else {
            continue;
        };
        if main.is_none() {
            main = Some(base.process.exe.clone());
        }
        start = start.min(base.process.start_unix_ms.saturating_mul(1_000_000));
        end = end.max(base.process.end_unix_ms.saturating_mul(1_000_000));
        let mut common = vec![("process", base.process_name())];
        if let Some(rank) = base.process.rank {
            common.push(("rank", rank.to_string()));
        }
        let mut samples = Samples {
            builder: &mut b,
            process: pi,
            common,
            alloc,
        };
        let use_report = when == When::End && p.report.is_some();
        if use_report {
            samples.report_inuse(p.report.as_ref().expect("checked"));
        }
        let (Some(h), Some(names)) = (&history, &names) else {
            continue;
        };
        let t = match (when, at) {
            (When::At, Some(text)) => crate::history::when::parse_time(text, h).map_err(|why| {
                HeapError::Moment(format!("--at {why} ({})", names.process_name()))
            })?,
            _ => h.meta().ends_ns,
        };
        samples.history(h, names, t, !use_report)?;
    }
    if start == u64::MAX {
        start = 0;
    }
    let comments = vec![format!(
        "cuguard {}: device memory {}",
        env!("CARGO_PKG_VERSION"),
        match (when, alloc) {
            (When::End, true) => "in use at the end, and allocated over the run",
            (When::End, false) => "in use at the end",
            (When::At, _) => "in use at a moment, and allocated until then",
        }
    )];
    Ok(b.finish(main.as_deref(), start, end.saturating_sub(start), comments))
}

/// One process's samples as they are added to the profile: what each is labelled with, and
/// where its values go.
struct Samples<'b> {
    builder: &'b mut Builder,
    /// The process's number.
    process: usize,
    /// The labels of all its samples: the process and its rank.
    common: Vec<(&'static str, String)>,
    /// Whether the profile has `alloc_*` (before `inuse_*`).
    alloc: bool,
}

impl Samples<'_> {
    /// A sample's labels: its device, its owner, its tag (when it has one), then the
    /// process's.
    fn labels(
        &self,
        device: Option<u32>,
        owner: &str,
        tag: Option<&str>,
    ) -> Vec<(&'static str, String)> {
        let mut l = vec![
            (
                "device",
                device.map_or_else(|| "unknown".into(), |d| d.to_string()),
            ),
            ("owner", owner.to_string()),
        ];
        if let Some(tag) = tag {
            l.push(("tag", tag.to_string()));
        }
        l.extend(self.common.iter().cloned());
        l
    }

    /// The values of an in-use sample (0 for `alloc_*`).
    fn inuse(&self, objects: i64, bytes: i64) -> Vec<i64> {
        if self.alloc {
            vec![0, 0, objects, bytes]
        } else {
            vec![objects, bytes]
        }
    }

    /// What was in use at the end, from the report `r`.
    fn report_inuse(&mut self, r: &Report) {
        let stacks = stacks_by_id(r);
        let mut owners = OwnerIndex::new(r);
        // A Python program's end is the end of its code (the report's end view), before the
        // interpreter's teardown freed its globals (JAX's arrays, a list of tensors), as
        // `summary` reads it; elsewhere what was live at exit.
        let end_of_code = r
            .python
            .as_ref()
            .and_then(|py| py.view.as_ref())
            .filter(|v| v.at == "end");
        // (owner, device, stack id, bytes, tag) of each live allocation, from one source or the
        // other.
        let live: Vec<LiveAllocation> = match end_of_code {
            Some(view) => view
                .allocations
                .iter()
                .filter(|a| a.memory != Memory::HostPinned)
                .map(|a| {
                    let o = match &a.owner {
                        Some(id) => owners.of_id(id),
                        None => owners.of_stack(a.stack, Some(a.memory.as_str())),
                    };
                    (o, a.device, a.stack, a.size, a.tag.as_deref())
                })
                .collect(),
            None => r
                .leaks
                .iter()
                .filter(|l| l.memory != Memory::HostPinned)
                .map(|l| {
                    let o = owners.of_leak(l);
                    (o, l.device, l.stack, l.size, l.tag.as_deref())
                })
                .collect(),
        };
        for (o, device, id, size, tag) in live {
            let device = (device != cuguard_format::wire::UNKNOWN_DEVICE).then_some(device);
            let stack = id.and_then(|id| stacks.get(&id).copied());
            let labels = self.labels(device, &owners.owner(o).id, tag);
            let values = self.inuse(1, signed(size));
            self.builder.add(self.process, id, stack, labels, &values);
        }
    }

    /// From the history `h` (its stacks named in `names`): with `alloc_*`, what was allocated
    /// until `t`, walked once; with `inuse`, what was live at `t`.
    fn history(
        &mut self,
        h: &Opened,
        names: &Report,
        t: u64,
        inuse: bool,
    ) -> Result<(), HeapError> {
        let stacks = stacks_by_id(names);
        let mut owners = OwnerIndex::new(names);
        let alloc = self.alloc;
        let device_memory = |b: &Block| b.memory != cuguard_format::MemoryKind::HostPinned;
        let meta = h.meta();
        let mut add = |blk: &Block, idle: bool, values: &[i64]| {
            let id = stack_key(blk.stack);
            let o = owners.of_stack(id, Some("device"));
            let stack = id.and_then(|id| stacks.get(&id).copied());
            let tag = if idle { None } else { meta.tag_of(blk) };
            let mut l = self.labels(blk.device(), &owners.owner(o).id, tag);
            if blk.stream != 0 {
                l.push(("stream", format!("{:#x}", blk.stream)));
            }
            if idle {
                l.push(("cache", "idle".into()));
                self.builder
                    .add_under(IDLE_FRAME, self.process, id, stack, l, values);
            } else {
                self.builder.add(self.process, id, stack, l, values);
            }
        };
        if alloc {
            // The tags of the allocations tagged as they were made, while live: one tagged
            // after the fact moves from the sample it was added to.
            let mut tagged: HashMap<(u64, u64), u32> = HashMap::new();
            h.history
                .walk(&mut |step| match step {
                    Step::Made(blk) | Step::Restated(blk)
                        if device_memory(&blk) && blk.start_ns <= t =>
                    {
                        if blk.tag != cuguard_history::NONE {
                            tagged.insert((blk.addr, blk.start_ns), blk.tag);
                        }
                        add(&blk, false, &[1, signed(blk.size), 0, 0])
                    }
                    Step::Tagged(blk) if device_memory(&blk) && blk.start_ns <= t => {
                        let key = (blk.addr, blk.start_ns);
                        let was = tagged.insert(key, blk.tag).unwrap_or(cuguard_history::NONE);
                        add(
                            &Block { tag: was, ..blk },
                            false,
                            &[-1, -signed(blk.size), 0, 0],
                        );
                        add(&blk, false, &[1, signed(blk.size), 0, 0]);
                    }
                    Step::Ended(blk) => {
                        tagged.remove(&(blk.addr, blk.start_ns));
                    }
                    _ => {}
                })
                .map_err(|e| HeapError::Input(h.invalid(e)))?;
        }
        if inuse {
            // Inside a framework's cache, its blocks (PyTorch's tensors) at the lines that
            // asked for them, and each segment's bytes no block held then as its own entry.
            let w = h.read(t, t).map_err(HeapError::Input)?;
            let r = &w.replay;
            let pieces = crate::history::moment::pieces(r, r.live_at(t), r.cache_live_at(t), t);
            for Piece { block, idle } in pieces.iter().filter(|p| device_memory(&p.block)) {
                let (objects, size) = (i64::from(!idle), signed(block.size));
                let values = if alloc {
                    vec![0, 0, objects, size]
                } else {
                    vec![objects, size]
                };
                add(block, *idle, &values);
            }
        }
        Ok(())
    }
}

/// A live allocation as the profile takes it: (owner, device, stack id, bytes, tag).
type LiveAllocation<'r> = (usize, u32, Option<u64>, u64, Option<&'r str>);

/// A size as profile.proto's `int64`.
fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
