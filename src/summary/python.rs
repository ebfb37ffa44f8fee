//! The summary's view of a Python program's end (the report's `python` section): what was
//! *held* at the end of its code (by which Python objects, reached from which name), what was
//! *lost* (the program's own, held by nothing), and, inside each framework's cache, its *live*
//! blocks at the lines that allocated them against its *idle* ones. A snapshot taken with the
//! view (`cuguard.snapshot(held=True)`, `cuguard.dask.snapshot`) reads the same way, at the
//! snapshot's moment.
//!
//! [`PythonSummary::new`] condenses one report's section; the text, JSON and Markdown formats
//! render it.

use std::collections::HashMap;

use serde::Serialize;

use crate::owners::OwnerIndex;
use crate::sites::SiteIndex;
use cuguard_format::{HeldClass, PyAllocation, PyBlock, PyFrame, PyHolder, Report};

/// How many held allocations, lost sites and cache block sites are listed.
pub const TOP: usize = 10;

/// One process's Python end.
#[derive(Clone, Debug, Serialize)]
pub struct PythonSummary {
    /// Whether the end of the program's code was recorded.
    pub recorded: bool,
    /// How it ended (`finished`, `raised`, `interrupted`, `kernel_shutdown`, `os_exit`).
    pub how: Option<String>,
    /// The uncaught exception's type, when it raised.
    pub exception: Option<String>,
    /// When (ms since the process started).
    pub time_ms: Option<u64>,
    /// Why the end is not recorded.
    pub why: Option<String>,
    /// `end` or `snapshot`: the moment the classes below describe; `null` when none.
    pub at: Option<String>,
    /// Whether every holder was looked for within the bounds.
    pub complete: bool,
    /// What could not be told, and why.
    pub notes: Vec<String>,
    /// Allocations live at the end that the interpreter's teardown freed afterwards.
    pub freed_after: u64,
    /// Held by Python objects.
    pub held: Class<HeldLine>,
    /// The program's own, held by nothing.
    pub lost: Class<ClassSite>,
    /// Libraries' and the driver's.
    pub library: Class<ClassSite>,
    /// Queued by a framework for a free it makes later (numba's deferred deallocations).
    pub pending_free: Class<ClassSite>,
    /// Not classified.
    pub unclassified: Class<ClassSite>,
    /// The frameworks' caches, most bytes first.
    pub caches: Vec<CacheSummary>,
}

impl PythonSummary {
    /// How the program's code ended, for people: `finished`, `raised ValueError`, `was
    /// interrupted`, `ended with the kernel's shutdown`, `left through os._exit`.
    pub fn how_it_ended(&self) -> String {
        match self.how.as_deref() {
            Some("raised") => match &self.exception {
                Some(e) => format!("raised {}", crate::wording::one_line(e)),
                None => "raised".to_string(),
            },
            Some("interrupted") => "was interrupted".to_string(),
            Some("kernel_shutdown") => "ended with the kernel's shutdown".to_string(),
            Some("os_exit") => "left through os._exit".to_string(),
            _ => "finished".to_string(),
        }
    }
}

/// The allocations of one class.
#[derive(Clone, Debug, Serialize)]
pub struct Class<T> {
    /// Their bytes.
    pub bytes: u64,
    /// How many.
    pub allocations: u64,
    /// The largest (held allocations) or the sites with most bytes (the others), at most [`TOP`].
    pub lines: Vec<T>,
}

impl<T> Default for Class<T> {
    fn default() -> Self {
        Class {
            bytes: 0,
            allocations: 0,
            lines: Vec::new(),
        }
    }
}

/// Held allocations that read alike: made at one site from one stack, held by one type of
/// holder through one path but for its indices (a list of 300 tensors is one line,
/// `KEPT → [0…299]`).
#[derive(Clone, Debug, Serialize)]
pub struct HeldLine {
    /// The bytes of its largest allocation.
    pub size: u64,
    /// The bytes of all of them.
    pub bytes: u64,
    /// How many.
    pub allocations: u64,
    /// Their holder's type.
    pub holder: String,
    /// The steps from a name to the holder, an index that differs between them written as the
    /// range it spans (`[0…19]`); `null` when no name reaches it.
    pub path: Option<Vec<String>>,
    /// Whether the holder is a number inside it (a weak match).
    pub weak: bool,
    /// Where it was allocated (see [`crate::sites::Site::label`]).
    pub label: String,
    /// Its stack's frames for people (the site, then its callers).
    pub stack: Vec<String>,
}

/// Allocations of one class at one site.
#[derive(Clone, Debug, Serialize)]
pub struct ClassSite {
    /// The site's key.
    pub site: String,
    /// The site for people.
    pub label: String,
    /// Bytes.
    pub bytes: u64,
    /// Allocations (or blocks).
    pub allocations: u64,
    /// The site's stack for people, when known.
    pub stack: Vec<String>,
}

/// One framework's cache at the moment.
#[derive(Clone, Debug, Serialize)]
pub struct CacheSummary {
    /// Owner id of its segments (`null` when none is known).
    pub owner: Option<String>,
    /// The owner for people.
    pub label: String,
    /// `pytorch`, `cupy`, `rmm`, …
    pub framework: String,
    /// How live was told from idle (`history`, `states`, `hook`, `holders`).
    pub source: String,
    /// Its segments.
    pub segments: u64,
    /// Their bytes.
    pub segment_bytes: u64,
    /// Live blocks' bytes.
    pub live_bytes: u64,
    /// Live blocks.
    pub live_blocks: u64,
    /// Of the live bytes, those a Python object holds.
    pub held_bytes: u64,
    /// Of the live blocks, those a Python object holds.
    pub held_blocks: u64,
    /// Idle blocks' bytes.
    pub idle_bytes: u64,
    /// Live blocks by the line that allocated them, most bytes first, at most [`TOP`].
    pub sites: Vec<BlockSite>,
    /// What could not be told.
    pub note: Option<String>,
}

/// Live cache blocks allocated at one line.
#[derive(Clone, Debug, Serialize)]
pub struct BlockSite {
    /// The line's key (`function (file:line)`), or `<no Python line recorded>` (allocated on a thread without Python, such as PyTorch's autograd thread, or before the history was on).
    pub site: String,
    /// For people.
    pub label: String,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub blocks: u64,
    /// Of those bytes, held by a Python object.
    pub held_bytes: u64,
    /// The first held block's shortest holder path, when one is held. An index that differs
    /// between the blocks held through the same path is written as the range it spans, and the
    /// last step then loses what it said of one block's size (`CLONES → [0…299] →
    /// torch.Tensor`).
    pub holder: Option<Vec<String>>,
    /// The line and its callers.
    pub stack: Vec<String>,
    /// The holder shown, and per step of its path the smallest and largest index there.
    #[serde(skip)]
    holder_spans: Option<(PyHolder, Spans)>,
}

impl BlockSite {
    /// Counts `h`, a held block's shortest holder, into the holder shown.
    fn add_holder(&mut self, h: &PyHolder) {
        let Some(path) = &h.path else {
            return;
        };
        let spans = spans_of(path);
        match &mut self.holder_spans {
            None => self.holder_spans = Some((h.clone(), spans)),
            Some((first, seen)) => {
                if path_pattern(first) == path_pattern(h) {
                    widen(seen, spans);
                }
            }
        }
    }

    /// Writes [`BlockSite::holder`] from the holders counted.
    fn finish_holder(&mut self) {
        if let Some((mut h, spans)) = self.holder_spans.take() {
            if let Some(steps) = &mut h.path {
                write_spans(steps, &spans, h.weak);
            }
            self.holder = Some(vec![holder_text(&h)]);
        }
    }
}

/// A holder's path but for its indices (each written `[]`) and what its last step says of the
/// one allocation (a weak match's number, `torch.Tensor (1.0 MiB of a 2.0 MiB allocation)`'s
/// sizes): holders with the same pattern read alike.
fn path_pattern(h: &PyHolder) -> Option<Vec<String>> {
    let steps = h.path.as_ref()?;
    let kept = if h.weak && steps.len() > 1 {
        &steps[..steps.len() - 1]
    } else {
        &steps[..]
    };
    let n = kept.len();
    Some(
        kept.iter()
            .enumerate()
            .map(|(i, s)| match index_of(s) {
                Some(_) => "[]".to_string(),
                None if i + 1 == n => s.split(" (").next().unwrap_or(s).to_string(),
                None => s.clone(),
            })
            .collect(),
    )
}

/// Per step of a path: the smallest and largest index seen there, for an index step.
type Spans = Vec<Option<(i64, i64)>>;

/// A path's spans: each index step's number as its smallest and largest.
fn spans_of(path: &[String]) -> Spans {
    path.iter().map(|s| index_of(s).map(|i| (i, i))).collect()
}

/// Widens `seen` by another path's spans (one of the same pattern, so the same steps).
fn widen(seen: &mut Spans, other: Spans) {
    for (span, new) in seen.iter_mut().zip(other) {
        if let (Some((lo, hi)), Some((i, _))) = (span.as_mut(), new) {
            *lo = (*lo).min(i);
            *hi = (*hi).max(i);
        }
    }
}

/// Writes each index step whose smallest and largest differ as the range: `[0…19]`. Over a
/// range, what the last step says of one allocation (`torch.Tensor (1.0 MiB)`) is not said of
/// all, and goes (a weak match's last step, its number, is not shown anyway).
fn write_spans(steps: &mut [String], spans: &Spans, weak: bool) {
    let ranged = spans.iter().flatten().any(|(lo, hi)| lo != hi);
    if ranged
        && !weak
        && let Some(last) = steps.last_mut()
    {
        *last = last.split(" (").next().unwrap_or(last).to_string();
    }
    for (step, span) in steps.iter_mut().zip(spans) {
        if let Some((lo, hi)) = span
            && lo != hi
        {
            *step = format!("[{lo}…{hi}]");
        }
    }
}

/// The sites of a cache's live blocks, by address: each block's line, or its caller's past the
/// program's allocation helper ([`crate::block_sites::frames_sites`]), with the frames from the
/// helper on.
struct BlockSites(HashMap<u64, (crate::sites::Site, Vec<crate::sites::Site>)>);

impl BlockSites {
    fn of<'a>(blocks: impl Iterator<Item = &'a PyBlock>) -> BlockSites {
        let live: Vec<&PyBlock> = blocks
            .filter(|b| b.state == "live" && !b.frames.is_empty())
            .collect();
        let frames: Vec<&[PyFrame]> = live.iter().map(|b| b.frames.as_slice()).collect();
        let sites = crate::block_sites::frames_sites(&frames, crate::call_path::helpers());
        BlockSites(
            live.iter()
                .zip(sites)
                .filter_map(|(b, s)| Some((b.address.0, s?)))
                .collect(),
        )
    }
}

/// Where a block was allocated, for people (see [`BlockSites`]): its key, its label, and the
/// frames from its line (or its helper) on, at most 3.
fn block_site(b: &PyBlock, sites: &BlockSites) -> (String, String, Vec<String>) {
    let Some((site, path)) = sites.0.get(&b.address.0) else {
        let none = "<no Python line recorded>".to_string();
        return (none.clone(), none, Vec::new());
    };
    let stack: Vec<String> = path.iter().take(3).map(|s| s.label()).collect();
    (
        site.key.clone(),
        site.label(),
        if stack.len() > 1 { stack } else { Vec::new() },
    )
}

/// The steps of a holder's path as one line: `BUFFERS → [0] → .ptr`, a weak match's number
/// said as such.
pub fn holder_text(h: &PyHolder) -> String {
    match &h.path {
        Some(steps) => {
            let mut steps = steps.clone();
            if h.weak && steps.len() > 1 {
                steps.pop();
                let last = steps.pop().unwrap_or_default();
                steps.push(format!("{last} (a number inside it: a weak match)"));
            }
            steps.join(" → ")
        }
        None => format!("a {} no name reaches", h.holder),
    }
}

impl PythonSummary {
    /// The section of `report`, when it has one.
    pub fn new(
        report: &Report,
        index: &SiteIndex<'_>,
        owners: &mut OwnerIndex<'_>,
    ) -> Option<PythonSummary> {
        let python = report.python.as_ref()?;
        let end = &python.end;
        let mut s = PythonSummary {
            recorded: end.recorded,
            how: end.how.clone(),
            exception: end.exception.clone(),
            time_ms: end.time_ms,
            why: end.why.clone(),
            at: None,
            complete: true,
            notes: Vec::new(),
            freed_after: 0,
            held: Class::default(),
            lost: Class::default(),
            library: Class::default(),
            pending_free: Class::default(),
            unclassified: Class::default(),
            caches: Vec::new(),
        };
        let Some(view) = &python.view else {
            return Some(s);
        };
        s.at = Some(view.at.clone());
        s.time_ms = Some(view.time_ms);
        s.complete = view.complete;
        s.notes = view.notes.clone();
        let mut lost: HashMap<String, ClassSite> = HashMap::new();
        let mut library: HashMap<String, ClassSite> = HashMap::new();
        let mut pending_free: HashMap<String, ClassSite> = HashMap::new();
        let mut unclassified: HashMap<String, ClassSite> = HashMap::new();
        let mut held = HeldLines::default();
        let mut caches: HashMap<Option<String>, CacheSummary> = HashMap::new();
        let helpers = BlockSites::of(
            view.allocations
                .iter()
                .filter(|a| a.class == HeldClass::Cache)
                .flat_map(|a| &a.blocks),
        );
        for a in &view.allocations {
            s.freed_after += u64::from(a.freed_after);
            match &a.class {
                HeldClass::Held => {
                    s.held.bytes = s.held.bytes.saturating_add(a.size);
                    s.held.allocations += 1;
                    held.add(a, index);
                }
                HeldClass::Cache => add_cache(&mut caches, a, owners, &helpers),
                HeldClass::Lost => add_site(&mut s.lost, &mut lost, a, index),
                HeldClass::Library => add_site(&mut s.library, &mut library, a, index),
                HeldClass::PendingFree => {
                    add_site(&mut s.pending_free, &mut pending_free, a, index)
                }
                _ => add_site(&mut s.unclassified, &mut unclassified, a, index),
            }
        }
        s.held.lines = held.top(TOP);
        for (class, sites) in [
            (&mut s.lost, lost),
            (&mut s.library, library),
            (&mut s.pending_free, pending_free),
            (&mut s.unclassified, unclassified),
        ] {
            let mut v: Vec<ClassSite> = sites.into_values().collect();
            v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
            v.truncate(TOP);
            class.lines = v;
        }
        // What the Python side said of each cache (its source and note) completes the totals.
        for c in &view.caches {
            if let Some(sum) = caches.get_mut(&c.owner) {
                sum.framework = c.framework.clone();
                sum.source = c.source.clone();
                sum.note = c.note.clone();
            } else if c.note.is_some() {
                s.notes.extend(c.note.clone());
            }
        }
        let mut caches: Vec<CacheSummary> = caches.into_values().collect();
        for c in &mut caches {
            c.sites.iter_mut().for_each(BlockSite::finish_holder);
            c.sites
                .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
            c.sites.truncate(TOP);
        }
        caches.sort_by(|a, b| {
            b.segment_bytes
                .cmp(&a.segment_bytes)
                .then(a.label.cmp(&b.label))
        });
        s.caches = caches;
        Some(s)
    }

    /// Bytes held by Python objects: held allocations and held live cache blocks.
    pub fn held_bytes(&self) -> u64 {
        self.held
            .bytes
            .saturating_add(self.caches.iter().map(|c| c.held_bytes).sum::<u64>())
    }

    /// How many allocations and live cache blocks Python objects hold.
    pub fn held_count(&self) -> u64 {
        self.held.allocations + self.caches.iter().map(|c| c.held_blocks).sum::<u64>()
    }
}

/// What a held line says but for its path's indices: site label, stack, holder, weak, and the
/// path's [`path_pattern`].
type HeldKey = (String, Vec<String>, String, bool, Option<Vec<String>>);

/// The held allocations, grouped into [`HeldLine`]s as they come.
#[derive(Default)]
struct HeldLines {
    by_key: HashMap<HeldKey, Group>,
}

struct Group {
    line: HeldLine,
    /// Per step of the path: the smallest and largest index there, for an index step.
    spans: Spans,
}

/// A path step that is an index (`[12]`, as the walk writes a list's or tuple's item, or a
/// dict's integer key): its number.
fn index_of(step: &str) -> Option<i64> {
    step.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

impl HeldLines {
    fn add(&mut self, a: &PyAllocation, index: &SiteIndex<'_>) {
        let site = index.site(a.stack);
        let first = a.holders.first();
        let holder = first.map_or_else(String::new, |h| h.holder.clone());
        let weak = first.is_some_and(|h| h.weak);
        let path = first.and_then(|h| h.path.clone());
        let label = site.label();
        let stack = from_site(index, a.stack, &site);
        let pattern = first.and_then(path_pattern);
        let key = (label.clone(), stack.clone(), holder.clone(), weak, pattern);
        let spans = path.as_deref().map(spans_of).unwrap_or_default();
        match self.by_key.get_mut(&key) {
            Some(g) => {
                g.line.size = g.line.size.max(a.size);
                g.line.bytes = g.line.bytes.saturating_add(a.size);
                g.line.allocations += 1;
                widen(&mut g.spans, spans);
            }
            None => {
                let line = HeldLine {
                    size: a.size,
                    bytes: a.size,
                    allocations: 1,
                    holder,
                    path,
                    weak,
                    label,
                    stack,
                };
                self.by_key.insert(key, Group { line, spans });
            }
        }
    }

    /// The `top` lines with the most bytes, each path's differing indices written as ranges.
    fn top(self, top: usize) -> Vec<HeldLine> {
        let mut lines: Vec<HeldLine> = self
            .by_key
            .into_values()
            .map(|mut g| {
                if let Some(steps) = &mut g.line.path {
                    write_spans(steps, &g.spans, g.line.weak);
                }
                g.line
            })
            .collect();
        lines.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.label.cmp(&b.label))
                .then(a.path.cmp(&b.path))
        });
        lines.truncate(top);
        lines
    }
}

/// The stack's frames for people from the site on (its callers after it), at most 3: the line
/// and who called it, not the plumbing inside; for a site charged to a helper's caller, from
/// the helper on.
fn from_site(index: &SiteIndex<'_>, stack: Option<u64>, site: &crate::sites::Site) -> Vec<String> {
    let chain = index.chain(stack);
    let key = site.via.as_deref().map_or(&site.key, |helper| &helper.key);
    let at = chain.iter().position(|f| f == key).unwrap_or(0);
    let out: Vec<String> = chain.into_iter().skip(at).take(3).collect();
    if out.len() > 1 { out } else { Vec::new() }
}

fn add_site(
    class: &mut Class<ClassSite>,
    sites: &mut HashMap<String, ClassSite>,
    a: &PyAllocation,
    index: &SiteIndex<'_>,
) {
    class.bytes = class.bytes.saturating_add(a.size);
    class.allocations += 1;
    let site = index.site(a.stack);
    let e = sites.entry(site.key.clone()).or_insert_with(|| ClassSite {
        site: site.key.clone(),
        label: site.label(),
        bytes: 0,
        allocations: 0,
        stack: from_site(index, a.stack, &site),
    });
    e.bytes = e.bytes.saturating_add(a.size);
    e.allocations += 1;
}

fn add_cache(
    caches: &mut HashMap<Option<String>, CacheSummary>,
    a: &PyAllocation,
    owners: &mut OwnerIndex<'_>,
    helpers: &BlockSites,
) {
    let label = match &a.owner {
        Some(id) => {
            let i = owners.of_id(id);
            owners.owner(i).label.clone()
        }
        None => "a framework's cache".to_string(),
    };
    let c = caches
        .entry(a.owner.clone())
        .or_insert_with(|| CacheSummary {
            owner: a.owner.clone(),
            label,
            framework: String::new(),
            source: "holders".into(),
            segments: 0,
            segment_bytes: 0,
            live_bytes: 0,
            live_blocks: 0,
            held_bytes: 0,
            held_blocks: 0,
            idle_bytes: 0,
            sites: Vec::new(),
            note: None,
        });
    c.segments += 1;
    c.segment_bytes = c.segment_bytes.saturating_add(a.size);
    for b in &a.blocks {
        if b.state == "live" {
            add_block(c, b, helpers);
        } else {
            c.idle_bytes = c.idle_bytes.saturating_add(b.size);
        }
    }
}

fn add_block(c: &mut CacheSummary, b: &PyBlock, helpers: &BlockSites) {
    c.live_bytes = c.live_bytes.saturating_add(b.size);
    c.live_blocks += 1;
    let held = !b.holders.is_empty();
    if held {
        c.held_bytes = c.held_bytes.saturating_add(b.size);
        c.held_blocks += 1;
    }
    let (key, label, stack) = block_site(b, helpers);
    let holder = b
        .holders
        .iter()
        .filter(|h| h.path.is_some())
        .min_by_key(|h| h.path.as_ref().map_or(usize::MAX, Vec::len));
    let at = match c.sites.iter().position(|s| s.site == key) {
        Some(at) => {
            let s = &mut c.sites[at];
            s.bytes = s.bytes.saturating_add(b.size);
            s.blocks += 1;
            if held {
                s.held_bytes = s.held_bytes.saturating_add(b.size);
            }
            at
        }
        None => {
            c.sites.push(BlockSite {
                site: key,
                label,
                bytes: b.size,
                blocks: 1,
                held_bytes: if held { b.size } else { 0 },
                holder: None,
                stack,
                holder_spans: None,
            });
            c.sites.len() - 1
        }
    };
    if let Some(h) = holder {
        c.sites[at].add_holder(h);
    }
}
