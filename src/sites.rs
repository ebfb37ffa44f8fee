//! The site rule: which place in the program a leak is charged to, and how it is named.
//!
//! A leak's *site* is the frame the shim chose when it wrote the report (`stacks[].site`: the
//! user's own frame, Python frames included; failing that, the framework operation that asked,
//! such as an autograd node on PyTorch's engine thread; failing that, a framework frame), keyed
//! `function (file:line)` — two allocations on two lines of one function are two sites, as they
//! are two places to fix. For reports without it (older shims, or names that were not resolved),
//! the site is the first frame (innermost first) outside cuguard's shim, the CUDA driver and the
//! CUDA runtime, keyed by its function when known, else by `module+0xoffset`. Everything that
//! groups leaks (summary, check, suppressions, diff, view) asks this module.
//!
//! A site is *printed* by [`Site::label`]: its name and its location once
//! (`cudarc_leaks::main (cudarc_leaks.rs:25)`), after a word saying what it is when it is not
//! the user's own frame: `on the autograd thread: AddmmBackward0::apply (…)` or
//! `operation: cudf::merge (…)` for an operation, `framework: at::native::empty_cuda (…)` for a
//! fallback. A site that is not the user's own frame, on a stack made under an origin
//! (`stacks[].origin`: the thread that started the work, such as the one that called PyTorch's
//! `backward()`), also names where the work was started (`…, backward from train.py:42`), in its
//! label and its key. A Python frame in a file the program named (`python[].display`, a notebook
//! cell) is located as `Cell In[2], line 5`.
//!
//! [`SiteIndex::chain`] gives a stack's frames in the mixed native and Python order, the way
//! `py-spy --native` reads (`at::native::empty_cuda ← step (train.py:7) ← <module>
//! (train.py:12)`), for the stacks that have Python frames, with each run of framework frames
//! folded into one entry (`… 16 frames in libtorch_cpu.so, libtorch_cuda.so,
//! libtorch_python.so ← case_torch (clients.py:54)`), so that the user's frames show within its
//! budget; [`mixed_names`] gives them all, unfolded, for the flame graph.
//!
//! The [`Site`] type and the frames a site is read from (a frame as a site of the user's own, as
//! the rules see it, its location, a stack's mixed order) are [`crate::site_frames`]'s,
//! re-exported here: [`crate::call_path`] builds on them, and this module on it.

use std::collections::HashMap;

use cuguard_symbolize::mixed::Slot;
use cuguard_symbolize::rules::Tier;
use cuguard_symbolize::site::qualified_path;
use serde::Serialize;

use crate::site_frames::{AUTOGRAD_THREAD, location};
use cuguard_format::{Frame, Report, Stack};

pub use crate::site_frames::{
    Site, SiteKind, builtin_rules, file_name, mixed_order, python_frame_site, python_location,
    python_site_frame, site_frame, user_frame_site,
};

/// A site as outputs carry it: its key, its label, its location and its kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteRef {
    /// The site's key (what groups leaks; see [`Site::key`]).
    pub site: String,
    /// The site for people, its location once (see [`Site::label`]).
    pub label: String,
    /// `file:line`, when known.
    pub location: Option<String>,
    /// What kind of frame it is, when the report says.
    pub kind: Option<SiteKind>,
}

impl From<&Site> for SiteRef {
    fn from(site: &Site) -> SiteRef {
        SiteRef {
            site: site.key.clone(),
            label: site.label(),
            location: site.location.clone(),
            kind: site.kind,
        }
    }
}

/// Whether a module belongs to cuguard or CUDA itself, so frames in it are not sites.
pub fn is_runtime_module(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("libcuguard")
        || name.starts_with("libcuda.so")
        || name.starts_with("libcudart")
}

/// The site of a stack (see the module doc for the rule).
pub fn site_of_stack(stack: &Stack) -> Site {
    if let Some(site) = shim_site(stack) {
        return site;
    }
    let frame = stack
        .frames
        .iter()
        .find(|f| !is_runtime_module(&f.module))
        .or_else(|| stack.frames.first());
    match frame {
        Some(f) => site_of_frame(f),
        None => Site::placeholder("<empty stack>".into()),
    }
}

/// The name an operation or a fallback site is shown by: the qualified path without
/// parameters, and an autograd node without its namespaces (`AddmmBackward0::apply`).
fn short_name(function: &str) -> String {
    let q = qualified_path(function);
    for prefix in ["torch::autograd::generated::", "torch::autograd::"] {
        if let Some(rest) = q.strip_prefix(prefix)
            && !rest.is_empty()
        {
            return rest.to_string();
        }
    }
    if q.is_empty() {
        function.to_string()
    } else {
        q
    }
}

/// Where an operation ran, when its stack tells: PyTorch's autograd engine's own threads.
fn operation_context(stack: &Stack) -> Option<String> {
    stack
        .frames
        .iter()
        .filter_map(|f| f.function.as_deref())
        .any(|f| qualified_path(f).starts_with("torch::autograd::Engine::thread_"))
        .then(|| AUTOGRAD_THREAD.to_string())
}

/// The site the shim chose, when the report has one and its frame is named.
fn shim_site(stack: &Stack) -> Option<Site> {
    let chosen = stack.site.as_ref()?;
    let (function, location, module) = match chosen.in_.as_str() {
        "python" => {
            let f = stack.python.get(chosen.index)?;
            (Some(f.function.clone()), python_location(f), None)
        }
        "frames" => {
            let f = stack.frames.get(chosen.index)?;
            (
                f.function
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
                location(f.file.as_deref(), f.line),
                Some(f.module.to_string()),
            )
        }
        _ => return None,
    };
    let function = function?;
    let key = match &location {
        Some(loc) => format!("{function} ({loc})"),
        None => function.clone(),
    };
    // Reports older than kinds only ever chose the user's frame.
    let kind = match chosen.kind.as_deref() {
        None => Some(SiteKind::User),
        Some(k) => SiteKind::parse(k),
    };
    let (name, context) = match kind {
        Some(SiteKind::Operation) => (short_name(&function), operation_context(stack)),
        Some(SiteKind::Fallback) => (short_name(&function), None),
        _ => (function.clone(), None),
    };
    Some(Site {
        key,
        name,
        location,
        function: Some(function),
        module,
        kind,
        context,
        origin: None,
        via: None,
    })
}

/// A frame's name: its function when known, else `module+0xoffset` (module file name only).
pub fn frame_name(f: &Frame) -> String {
    match &f.function {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => format!("{}+{}", file_name(&f.module), f.offset),
    }
}

fn site_of_frame(f: &Frame) -> Site {
    let key = frame_name(f);
    Site {
        name: key.clone(),
        key,
        location: location(f.file.as_deref(), f.line),
        function: f
            .function
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(str::to_string),
        module: Some(f.module.to_string()),
        kind: None,
        context: None,
        origin: None,
        via: None,
    }
}

/// The most entries [`SiteIndex::chain`] shows (a folded run counts as one).
pub const MAX_CHAIN: usize = 8;

/// Runs of at least this many framework frames are folded into one chain entry.
pub const FOLD_MIN: usize = 3;

/// The most module names a folded entry lists.
const FOLD_NAMES: usize = 3;

/// A stack's frames for people, in the mixed order (see [`mixed_order`]), innermost first:
/// without the driver's, allocators' and interpreter's frames (the built-in rules' never-site
/// tier), each `name (file:line)` (C++ names without parameters), with each run of
/// [`FOLD_MIN`] or more framework frames (the rules' framework tier: PyTorch's dispatcher and
/// kernels, RMM, CuPy, XLA…; the never-site frames among them do not break a run) folded into
/// one entry, `… 18 frames in libtorch_cpu.so, libtorch_cuda.so, libtorch_python.so` (the
/// modules, or a Python frame's file, in order of first appearance; at most three, then `and N
/// more`). Operation frames (an autograd node) and the user's frames are never in such a run.
///
/// At most [`MAX_CHAIN`] entries (a folded run counts as one). A longer chain keeps its ends and
/// folds what is between ([`fit`]): the innermost entries up to the first of the user's own
/// frames (the site), the user's code that called it (a Python frame outside the frameworks, or
/// a native `main`) and the outermost entries, so that a deep native library called from Python
/// reads `deep_0 (deep.c:4) ← … 10 frames in libdeep.so ← load_weights (deep.py:9) ← <module>
/// (deep.py:12)`. Empty when the stack has no mixed order, or when one entry is left (the site
/// alone says as much).
pub fn chain(stack: &Stack) -> Vec<String> {
    let Some(order) = mixed_order(stack) else {
        return Vec::new();
    };
    let mut entries: Vec<Entry> = Vec::new();
    let mut run: Vec<ChainFrame> = Vec::new();
    let flush = |run: &mut Vec<ChainFrame>, entries: &mut Vec<Entry>| {
        if run.len() >= FOLD_MIN {
            entries.push(Entry::folded(run.drain(..).map(|f| f.place).collect()));
        } else {
            entries.extend(run.drain(..).map(Entry::one));
        }
    };
    for f in chain_frames(stack, &order) {
        if f.tier == Some(Tier::Framework) {
            run.push(f);
            continue;
        }
        flush(&mut run, &mut entries);
        entries.push(Entry::one(f));
    }
    flush(&mut run, &mut entries);
    let mut out: Vec<String> = fit(entries).into_iter().map(|e| e.text).collect();
    if out.len() < 2 {
        out.clear();
    }
    out
}

/// One entry of a chain: one frame, or a folded run of frames.
struct Entry {
    text: String,
    /// Where each frame it stands for lives, innermost first (see [`ChainFrame::place`]).
    places: Vec<String>,
    /// One frame of the user's own code (neither framework nor operation).
    user: bool,
    /// One frame where the user's program runs its own code from: a Python frame outside the
    /// frameworks, or a native `main`.
    caller: bool,
}

impl Entry {
    fn one(f: ChainFrame) -> Entry {
        Entry {
            text: f.text,
            places: vec![f.place],
            user: f.tier.is_none(),
            caller: f.tier.is_none() && f.caller,
        }
    }

    fn folded(places: Vec<String>) -> Entry {
        Entry {
            text: fold_text(&places),
            places,
            user: false,
            caller: false,
        }
    }
}

/// Fits a chain's entries into [`MAX_CHAIN`], keeping its ends (see [`chain`]). A chain that
/// fits is left as it is. Else, first, the entries between the head (the innermost entries up
/// to and with the first user frame) and the first caller after it (a Python frame of the
/// user's, or `main`) become one folded entry; then, if that is still too long, the head, the
/// folded entry and that caller stay, and the entries after them fold down to as many of the
/// outermost as fit.
fn fit(mut entries: Vec<Entry>) -> Vec<Entry> {
    if entries.len() <= MAX_CHAIN {
        return entries;
    }
    let fold = |entries: &mut Vec<Entry>, range: std::ops::Range<usize>| {
        let places: Vec<String> = entries
            .splice(range.clone(), std::iter::empty())
            .flat_map(|e| e.places)
            .collect();
        entries.insert(range.start, Entry::folded(places));
    };
    let head = entries.iter().position(|e| e.user).unwrap_or(0) + 1;
    let caller = entries[head..]
        .iter()
        .position(|e| e.caller)
        .map(|i| head + i);
    let mut front = head;
    if let Some(caller) = caller {
        if caller - head >= 2 {
            fold(&mut entries, head..caller);
            front = head + 2;
        } else {
            front = caller + 1;
        }
    }
    if entries.len() > MAX_CHAIN {
        let front = front.min(MAX_CHAIN - 2);
        let tail = MAX_CHAIN - front - 1;
        let end = entries.len() - tail;
        fold(&mut entries, front..end);
    }
    entries
}

/// The entry a folded run of frames reads as, from where each frame lives (see [`chain`]).
fn fold_text(places: &[String]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for p in places {
        if !names.contains(&p.as_str()) {
            names.push(p);
        }
    }
    let mut text = format!("… {} frames in ", places.len());
    if names.len() <= FOLD_NAMES {
        text.push_str(&names.join(", "));
    } else {
        text.push_str(&names[..FOLD_NAMES - 1].join(", "));
        text.push_str(&format!(" and {} more", names.len() - (FOLD_NAMES - 1)));
    }
    text
}

/// A stack's frames for people as [`chain`] names and filters them, at full depth (no cut,
/// nothing folded, one frame kept), innermost first; `None` when the stack has no mixed
/// order. The flame graph of `cuguard view` draws these.
pub fn mixed_names(stack: &Stack) -> Option<Vec<String>> {
    let order = mixed_order(stack)?;
    Some(chain_frames(stack, &order).map(|f| f.text).collect())
}

/// One frame of a chain: its text, its tier, where it lives (a native frame's module file
/// name, a Python frame's file name), which a folded run lists, and whether it is a frame the
/// user's code is run from (a Python frame, or a native `main`), which [`fit`] keeps.
struct ChainFrame {
    text: String,
    tier: Option<Tier>,
    place: String,
    caller: bool,
}

/// Where a Python frame lives, as a folded run names it: the installed package it is part of
/// (`torch` for `…/site-packages/torch/nn/modules/module.py`), else its file name.
fn python_place(file: &str) -> String {
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some((_, rest)) = file.rsplit_once(marker)
            && let Some(package) = rest.split('/').next()
            && !package.is_empty()
            && rest.contains('/')
        {
            return package.to_string();
        }
    }
    file_name(file).to_string()
}

/// Where a native frame lives, as a folded run names it: its module's file name, but for a
/// Python extension module (`core.cpython-312-x86_64-linux-gnu.so`, `_C.abi3.so`) the installed
/// package it is part of (`cupy`).
fn native_place(module: &str) -> String {
    let name = file_name(module);
    if name.contains(".cpython-") || name.ends_with(".abi3.so") {
        let place = python_place(module);
        if place != name {
            return place;
        }
    }
    name.to_string()
}

/// The frames of `order` that a chain shows (never-site frames left out), innermost first.
fn chain_frames<'s>(stack: &'s Stack, order: &'s [Slot]) -> impl Iterator<Item = ChainFrame> + 's {
    order.iter().filter_map(move |slot| {
        let (frame, name, place, py_loc, caller) = match *slot {
            Slot::Native(i) => {
                let f = &stack.frames[i];
                let name = match f.function.as_deref() {
                    Some(n) if !n.is_empty() => {
                        let q = qualified_path(n);
                        if q.is_empty() { n.to_string() } else { q }
                    }
                    _ => frame_name(f),
                };
                let main = name == "main";
                (site_frame(f), name, native_place(&f.module), None, main)
            }
            Slot::Python(j) => {
                let f = &stack.python[j];
                let place = match &f.display {
                    Some(display) => display.clone(),
                    None => python_place(&f.file),
                };
                let loc = python_location(f);
                (python_site_frame(f), f.function.clone(), place, loc, true)
            }
        };
        let tier = crate::site_frames::tier(&frame);
        if tier == Some(Tier::NeverSite) {
            return None;
        }
        let text = match py_loc.or_else(|| location(frame.file, frame.line)) {
            Some(loc) => format!("{name} ({loc})"),
            None => name,
        };
        Some(ChainFrame {
            text,
            tier,
            place,
            caller,
        })
    })
}

/// The sites of one report's stacks, computed once per stack.
#[derive(Debug)]
pub struct SiteIndex<'r> {
    by_stack: HashMap<u64, (Site, &'r Stack)>,
    no_stack: Site,
}

impl<'r> SiteIndex<'r> {
    /// Indexes `report`'s stacks. When two stacks share an id the first wins.
    pub fn new(report: &'r Report) -> SiteIndex<'r> {
        let mut by_stack: HashMap<u64, (Site, &'r Stack)> =
            HashMap::with_capacity(report.stacks.len());
        for stack in &report.stacks {
            by_stack
                .entry(stack.id)
                .or_insert_with(|| (site_of_stack(stack), stack));
        }
        // A site reached through an allocation helper is charged to the caller.
        crate::call_path::resolve(&mut by_stack, crate::call_path::helpers());
        // Stacks made under an origin: a site that is not the user's own frame says where the
        // work was started (the origin's own site), in its label and its key.
        let origins: Vec<(u64, String)> = by_stack
            .iter()
            .filter(|(_, (site, _))| site.kind != Some(SiteKind::User))
            .filter_map(|(&id, (_, stack))| {
                let (origin, _) = by_stack.get(&stack.origin?)?;
                let text = origin
                    .location
                    .clone()
                    .or_else(|| origin.function.is_some().then(|| origin.name.clone()))?;
                Some((id, text))
            })
            .collect();
        for (id, text) in origins {
            if let Some((site, _)) = by_stack.get_mut(&id) {
                site.key = format!("{}, from {text}", site.key);
                site.origin = Some(text);
            }
        }
        SiteIndex {
            by_stack,
            no_stack: Site::placeholder("<no stack>".into()),
        }
    }

    /// The site for a stack id, as leaks and events refer to stacks.
    pub fn site(&self, stack: Option<u64>) -> std::borrow::Cow<'_, Site> {
        use std::borrow::Cow;
        match stack {
            None => Cow::Borrowed(&self.no_stack),
            Some(id) => match self.by_stack.get(&id) {
                Some((site, _)) => Cow::Borrowed(site),
                None => Cow::Owned(Site::placeholder(format!("<unknown stack {id}>"))),
            },
        }
    }

    /// The stack with this id, when the report has it.
    pub fn stack(&self, stack: Option<u64>) -> Option<&'r Stack> {
        stack.and_then(|id| self.by_stack.get(&id)).map(|(_, s)| *s)
    }

    /// The stack's frames for people in the mixed order (see [`chain`]); empty without one.
    pub fn chain(&self, stack: Option<u64>) -> Vec<String> {
        self.stack(stack).map(chain).unwrap_or_default()
    }
}

/// The site of a cache block by the frames the framework recorded: the user's frame by the
/// site rules; `None` without frames (the block then goes with its segment's site).
pub fn frames_site(frames: &[cuguard_format::PyFrame]) -> Option<Site> {
    if frames.is_empty() {
        return None;
    }
    let site_frames: Vec<_> = frames.iter().map(python_site_frame).collect();
    let at = builtin_rules()
        .find_site_with_kind(&site_frames)
        .map_or(0, |(s, _)| s.index);
    let f = &frames[at];
    let file = file_name(&f.file);
    let location = Some(match f.line {
        Some(line) => format!("{file}:{line}"),
        None => file.to_string(),
    });
    let key = format!("{} ({})", f.function, location.as_deref().unwrap_or(""));
    Some(Site {
        key,
        name: f.function.clone(),
        location,
        function: Some(f.function.clone()),
        module: None,
        kind: Some(SiteKind::User),
        context: None,
        origin: None,
        via: None,
    })
}

#[cfg(test)]
mod tests;
