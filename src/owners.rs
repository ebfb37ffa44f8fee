//! Owners: who holds each allocation — the program, a framework's cache (PyTorch's caching
//! allocator, CuPy's pool, RMM's pool resources, XLA's BFC allocator), a CUDA library's own
//! memory, or the driver and runtime — and bytes added up by owner.
//!
//! A leak's owner is, in order: the report's `leaks[].owner`; its stack's `stacks[].owner`;
//! for reports that lack both (older shims), what the built-in owner rules
//! (`cuguard_symbolize::rules`) say of its stack and memory kind; and the program's when there
//! is no stack. Owners are described by the report's `owners[]`, else by the built-in table;
//! an id neither knows is shown by its id and counts as the program's (kind `program`).
//!
//! [`OwnerIndex`] answers per report; [`by_owner`] adds up; [`OwnerFilter`] is what
//! `cuguard check --owners` selects.

use std::collections::HashMap;

use serde::Serialize;

use cuguard_symbolize::site::SiteFrame;

use crate::sites::{builtin_rules, python_site_frame, site_frame};
use cuguard_format::{Leak, Report, Stack};

/// What kind of holder an owner is: the report format's own type (`owners[].kind`).
pub use cuguard_format::OwnerKind;

/// Who holds an allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Owner {
    /// Stable id (`program`, `pytorch_caching_allocator`, `cublas`, …).
    pub id: String,
    /// What kind of holder it is.
    pub kind: OwnerKind,
    /// For people: "PyTorch's caching allocator".
    pub label: String,
    /// For a framework's cache: what its memory means and how to see past it.
    pub hint: Option<String>,
}

/// The id of the program's own memory.
pub const PROGRAM: &str = "program";

/// Bytes (and a count) held by one owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OwnerShare {
    /// Owner id.
    pub owner: String,
    /// Its kind.
    pub kind: OwnerKind,
    /// For people.
    pub label: String,
    /// What a framework cache's memory means, when it is one.
    pub hint: Option<String>,
    /// Bytes.
    pub bytes: u64,
    /// Leaks or allocations (as the place that lists them says).
    pub count: u64,
}

/// The owners of one report's allocations (see the module doc).
#[derive(Debug)]
pub struct OwnerIndex<'r> {
    stacks: HashMap<u64, &'r Stack>,
    owners: Vec<Owner>,
    ids: HashMap<String, usize>,
    /// The owner a stack records.
    recorded: HashMap<u64, usize>,
    /// Each stack's owner by memory kind, as found (recorded or ruled).
    resolved: HashMap<(u64, Option<&'r str>), usize>,
    /// The index of the program's owner.
    program: usize,
}

impl<'r> OwnerIndex<'r> {
    /// Indexes the owners `report` describes and names.
    pub fn new(report: &'r Report) -> OwnerIndex<'r> {
        let mut index = OwnerIndex {
            stacks: report.stacks.iter().rev().map(|s| (s.id, s)).collect(),
            owners: Vec::new(),
            ids: HashMap::new(),
            recorded: HashMap::new(),
            resolved: HashMap::new(),
            program: 0,
        };
        for o in &report.owners {
            if index.ids.contains_key(&o.id) {
                continue;
            }
            index.push(Owner {
                id: o.id.clone(),
                kind: OwnerKind::parse(&o.kind).unwrap_or(OwnerKind::Program),
                label: o.label.clone(),
                hint: o.hint.clone(),
            });
        }
        for stack in &report.stacks {
            if let Some(id) = &stack.owner
                && !index.recorded.contains_key(&stack.id)
            {
                let i = index.of_id(id);
                index.recorded.insert(stack.id, i);
            }
        }
        index.program = index.of_id(PROGRAM);
        // Where the history recorded PyTorch's tensors, they are read there by line, with no
        // setting to change.
        if report
            .history
            .as_ref()
            .is_some_and(|h| h.cache_blocks_unrecorded.is_none())
            && let Some(&i) = index.ids.get(PYTORCH_CACHE)
        {
            index.owners[i].hint = Some(TENSORS_IN_HISTORY.to_string());
        }
        index
    }

    fn push(&mut self, owner: Owner) -> usize {
        self.ids.insert(owner.id.clone(), self.owners.len());
        self.owners.push(owner);
        self.owners.len() - 1
    }

    /// The index of the owner with this id: described by the report's `owners[]`, else by the
    /// built-in table, else by its id alone (kind `program`).
    pub fn of_id(&mut self, id: &str) -> usize {
        if let Some(&i) = self.ids.get(id) {
            return i;
        }
        let owner = match builtin_rules().owner_by_id(id) {
            Some(o) => Owner {
                id: o.id.clone(),
                kind: OwnerKind::parse(o.kind.as_str()).unwrap_or(OwnerKind::Program),
                label: o.label.clone(),
                hint: o.hint.clone(),
            },
            None => Owner {
                id: id.to_string(),
                kind: OwnerKind::Program,
                label: if id == PROGRAM {
                    "the program".to_string()
                } else {
                    id.to_string()
                },
                hint: None,
            },
        };
        self.push(owner)
    }

    /// The owner at an index [`OwnerIndex::of_leak`] or [`OwnerIndex::of_stack`] gave.
    pub fn owner(&self, i: usize) -> &Owner {
        &self.owners[i]
    }

    /// The index of the program's owner.
    pub fn program(&self) -> usize {
        self.program
    }

    /// Who holds a leak.
    pub fn of_leak(&mut self, leak: &'r Leak) -> usize {
        if let Some(id) = &leak.owner {
            return self.of_id(id);
        }
        self.of_stack(leak.stack, Some(leak.memory.as_str()))
    }

    /// Who holds what `stack` allocated, of memory kind `memory` (`None`: not known; device
    /// memory is `Some("device")`).
    pub fn of_stack(&mut self, stack: Option<u64>, memory: Option<&'r str>) -> usize {
        let Some(id) = stack else {
            return self.program;
        };
        if let Some(&i) = self.resolved.get(&(id, memory)) {
            return i;
        }
        let recorded = self.recorded.get(&id).copied();
        let i = match (recorded, self.stacks.get(&id).copied()) {
            (Some(i), _) => i,
            (None, None) => self.program,
            (None, Some(stack)) => {
                let frames: Vec<_> = match crate::sites::mixed_order(stack) {
                    Some(order) => order
                        .into_iter()
                        .map(|slot| match slot {
                            cuguard_symbolize::mixed::Slot::Native(i) => {
                                site_frame(&stack.frames[i])
                            }
                            cuguard_symbolize::mixed::Slot::Python(j) => {
                                python_site_frame(&stack.python[j])
                            }
                        })
                        .collect(),
                    None => stack
                        .frames
                        .iter()
                        .map(site_frame)
                        .chain(stack.python.iter().map(python_site_frame))
                        .collect(),
                };
                let id = ruled_owner(&frames, memory);
                self.of_id(&id)
            }
        };
        self.resolved.insert((id, memory), i);
        i
    }
}

/// One frame as the owner rules read it: module, function, file.
type FrameKey = (Box<str>, Option<Box<str>>, Option<Box<str>>);

/// A stack's frames, the memory kind, and the owner id the rules gave them.
type RuledEntry = (Vec<FrameKey>, Option<Box<str>>, String);

/// What the rules said of stacks, by their frames and memory kind, for every report this
/// process reads: the reports of one program (its ranks, its test cases) share their stacks, and
/// reading a stack against every rule costs more than reading a report. At most
/// [`MAX_RULED`] entries.
#[derive(Default)]
struct Ruled {
    by_hash: HashMap<u64, Vec<RuledEntry>>,
    entries: usize,
}

/// The most stacks [`Ruled`] keeps.
const MAX_RULED: usize = 1 << 16;

static RULED: std::sync::Mutex<Option<Ruled>> = std::sync::Mutex::new(None);

fn content_hash(frames: &[SiteFrame<'_>], memory: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    memory.hash(&mut h);
    for f in frames {
        (f.module, f.function, f.file).hash(&mut h);
    }
    h.finish()
}

fn same_frames(key: &[FrameKey], frames: &[SiteFrame<'_>]) -> bool {
    key.len() == frames.len()
        && key.iter().zip(frames).all(|((m, func, file), f)| {
            **m == *f.module && func.as_deref() == f.function && file.as_deref() == f.file
        })
}

/// The id of the owner the built-in rules give `frames` (in call order) and `memory`,
/// remembered across reports (see [`Ruled`]).
fn ruled_owner(frames: &[SiteFrame<'_>], memory: Option<&str>) -> String {
    let hash = content_hash(frames, memory);
    let lock = || {
        RULED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    if let Some(ruled) = lock().as_ref()
        && let Some(bucket) = ruled.by_hash.get(&hash)
        && let Some((_, _, id)) = bucket
            .iter()
            .find(|(key, m, _)| m.as_deref() == memory && same_frames(key, frames))
    {
        return id.clone();
    }
    let id = builtin_rules().owner(frames, memory).id.clone();
    let mut guard = lock();
    let ruled = guard.get_or_insert_with(Ruled::default);
    if ruled.entries < MAX_RULED {
        let key = frames
            .iter()
            .map(|f| {
                (
                    f.module.into(),
                    f.function.map(Into::into),
                    f.file.map(Into::into),
                )
            })
            .collect();
        ruled
            .by_hash
            .entry(hash)
            .or_default()
            .push((key, memory.map(Into::into), id.clone()));
        ruled.entries += 1;
    }
    id
}

/// Adds up `(owner, bytes, count)` by owner: most bytes first, then by id.
pub fn by_owner(
    index: &OwnerIndex<'_>,
    items: impl IntoIterator<Item = (usize, u64, u64)>,
) -> Vec<OwnerShare> {
    let mut sums: HashMap<usize, (u64, u64)> = HashMap::new();
    for (owner, bytes, count) in items {
        let e = sums.entry(owner).or_default();
        e.0 = e.0.saturating_add(bytes);
        e.1 = e.1.saturating_add(count);
    }
    let mut out: Vec<OwnerShare> = sums
        .into_iter()
        .map(|(i, (bytes, count))| share(index.owner(i), bytes, count))
        .collect();
    sort_shares(&mut out);
    out
}

/// PyTorch's caching allocator's owner id.
const PYTORCH_CACHE: &str = "pytorch_caching_allocator";

/// Its hint where the history recorded its tensors.
pub const TENSORS_IN_HISTORY: &str = "its cache, not necessarily your tensors; the history recorded its tensors: cuguard summary REPORT --at end lists them by line";

/// An owner's share.
pub fn share(owner: &Owner, bytes: u64, count: u64) -> OwnerShare {
    OwnerShare {
        owner: owner.id.clone(),
        kind: owner.kind,
        label: owner.label.clone(),
        hint: owner.hint.clone(),
        bytes,
        count,
    }
}

/// Most bytes first, then by id.
pub fn sort_shares(shares: &mut [OwnerShare]) {
    shares.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.owner.cmp(&b.owner)));
}

/// Adds up shares of several processes by owner id (the first description of an id wins).
pub fn combine(shares: impl IntoIterator<Item = OwnerShare>) -> Vec<OwnerShare> {
    let mut by_id: HashMap<String, OwnerShare> = HashMap::new();
    for s in shares {
        match by_id.get_mut(&s.owner) {
            Some(t) => {
                t.bytes = t.bytes.saturating_add(s.bytes);
                t.count = t.count.saturating_add(s.count);
            }
            None => {
                by_id.insert(s.owner.clone(), s);
            }
        }
    }
    let mut out: Vec<OwnerShare> = by_id.into_values().collect();
    sort_shares(&mut out);
    out
}

/// Which owners' leaks `cuguard check` counts: always the program's (every owner of kind
/// `program`, and leaks whose owner is not known), and those named by `--owners`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerFilter {
    /// Every owner.
    All,
    /// Owners of kind `program`, and these owner ids or kinds.
    Program(Vec<String>),
}

impl Default for OwnerFilter {
    /// The program's own leaks only.
    fn default() -> OwnerFilter {
        OwnerFilter::Program(Vec::new())
    }
}

impl OwnerFilter {
    /// Parses `--owners`: a comma-separated list of owner ids (`pytorch_caching_allocator`) and
    /// kinds (`framework_cache`, `library`, `driver`, `program`), or `all`.
    pub fn parse(list: &str) -> Result<OwnerFilter, String> {
        let mut names = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name == "all" {
                return Ok(OwnerFilter::All);
            }
            if !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                return Err(format!(
                    "{name:?} is not an owner id or kind (ids are lowercase letters, digits and _; kinds: program, framework_cache, library, driver; or all)"
                ));
            }
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        Ok(OwnerFilter::Program(names))
    }

    /// Whether leaks held by `owner` count.
    pub fn includes(&self, owner: &Owner) -> bool {
        match self {
            OwnerFilter::All => true,
            OwnerFilter::Program(more) => {
                owner.kind == OwnerKind::Program
                    || more
                        .iter()
                        .any(|n| *n == owner.id || *n == owner.kind.as_str())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuguard_format::{Addr, Frame, LeakState, Memory};

    fn frame(module: &str, function: &str) -> Frame {
        Frame {
            ip: Addr(1),
            module: module.into(),
            offset: Addr(1),
            function: Some(function.into()),
            file: None,
            line: None,
            inlined: None,
        }
    }

    fn leak(stack: Option<u64>, memory: Memory, owner: Option<&str>) -> Leak {
        Leak {
            allocation: cuguard_format::Allocation {
                address: Addr(0x1000),
                size: 100,
                requested: 100,
                api: "cuMemAlloc_v2".into(),
                memory,
                device: 0,
                context: None,
                thread: 1,
                seq: 1,
                time_ms: 0,
                stack,
                tag: None,
            },
            state: LeakState::LiveAtExit,
            handle: None,
            owner: owner.map(Into::into),
        }
    }

    fn report(stacks: Vec<Stack>) -> Report {
        let process = cuguard_format::Process {
            pid: 1,
            ppid: 0,
            exe: "/x".into(),
            argv: vec![],
            hostname: "h".into(),
            rank: None,
            start_unix_ms: 0,
            end_unix_ms: 0,
            labels: None,
        };
        let mut r = Report::new(true, cuguard_format::Reason::Exit, process);
        r.stacks = stacks;
        r
    }

    fn stack(id: u64, frames: Vec<Frame>, owner: Option<&str>) -> Stack {
        Stack {
            id,
            frames,
            python: vec![],
            site: None,
            owner: owner.map(Into::into),
            mixed: vec![],
            origin: None,
        }
    }

    #[test]
    fn recorded_owners_win_then_the_rules_decide() {
        let cache = vec![
            frame("/venv/torch/lib/libcudart.so.13", "cudaMalloc"),
            frame(
                "/venv/torch/lib/libc10_cuda.so",
                "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block(AllocParams&, bool)",
            ),
            frame("/opt/app/train", "main"),
        ];
        let r = report(vec![
            stack(1, cache.clone(), None),
            stack(2, cache, Some("program")),
            stack(
                3,
                vec![frame("/usr/lib/libcuda.so.1", "cuMemAlloc_v2")],
                None,
            ),
        ]);
        let leaks = [
            leak(Some(1), Memory::Device, None),
            leak(Some(2), Memory::Device, None),
            leak(Some(1), Memory::Device, Some("cublas")),
            leak(Some(3), Memory::Device, None),
            leak(None, Memory::Device, None),
            leak(Some(99), Memory::Device, None),
        ];
        let mut index = OwnerIndex::new(&r);
        let ids: Vec<String> = leaks
            .iter()
            .map(|l| {
                let i = index.of_leak(l);
                index.owner(i).id.clone()
            })
            .collect();
        assert_eq!(
            ids,
            [
                "pytorch_caching_allocator",
                "program",
                "cublas",
                "driver",
                "program",
                "program"
            ]
        );
        let i = index.of_stack(Some(1), Some("device"));
        let o = index.owner(i);
        assert_eq!(o.kind, OwnerKind::FrameworkCache);
        assert_eq!(o.label, "PyTorch's caching allocator");
        assert!(
            o.hint
                .as_deref()
                .unwrap()
                .contains("PYTORCH_NO_CUDA_MEMORY_CACHING=1")
        );
    }

    #[test]
    fn the_reports_descriptions_win_and_unknown_ids_are_the_programs() {
        let mut r = report(vec![stack(1, vec![], Some("my_arena"))]);
        r.owners.push(cuguard_format::OwnerInfo {
            id: "my_arena".into(),
            kind: "framework_cache".into(),
            label: "my arena".into(),
            hint: Some("its cache".into()),
        });
        let l = leak(Some(1), Memory::Device, None);
        let odd = leak(None, Memory::Device, Some("from_the_future"));
        let mut index = OwnerIndex::new(&r);
        let i = index.of_leak(&l);
        assert_eq!(index.owner(i).label, "my arena");
        assert_eq!(index.owner(i).kind, OwnerKind::FrameworkCache);
        let j = index.of_leak(&odd);
        assert_eq!(
            (index.owner(j).label.as_str(), index.owner(j).kind),
            ("from_the_future", OwnerKind::Program)
        );
        let shares = by_owner(&index, [(i, 10, 1), (j, 30, 2), (i, 5, 1)]);
        let got: Vec<(&str, u64, u64)> = shares
            .iter()
            .map(|s| (s.owner.as_str(), s.bytes, s.count))
            .collect();
        assert_eq!(got, [("from_the_future", 30, 2), ("my_arena", 15, 2)]);
    }

    #[test]
    fn filter() {
        let owner = |id: &str, kind| Owner {
            id: id.into(),
            kind,
            label: id.into(),
            hint: None,
        };
        let torch = owner("pytorch_caching_allocator", OwnerKind::FrameworkCache);
        let blas = owner("cublas", OwnerKind::Library);
        let prog = owner("program", OwnerKind::Program);
        let d = OwnerFilter::default();
        assert!(d.includes(&prog) && !d.includes(&torch) && !d.includes(&blas));
        let f = OwnerFilter::parse("framework_cache").unwrap();
        assert!(f.includes(&prog) && f.includes(&torch) && !f.includes(&blas));
        let f = OwnerFilter::parse(" cublas , ").unwrap();
        assert!(f.includes(&blas) && !f.includes(&torch));
        assert_eq!(OwnerFilter::parse("cublas,all").unwrap(), OwnerFilter::All);
        assert!(OwnerFilter::parse("PyTorch").is_err());
        assert_eq!(OwnerFilter::parse("").unwrap(), OwnerFilter::default());
    }
}
