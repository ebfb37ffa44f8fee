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

use std::collections::HashMap;
use std::sync::OnceLock;

use cuguard_symbolize::mixed::{self, Slot};
use cuguard_symbolize::rules::{Rules, Tier};
use cuguard_symbolize::site::{SiteFrame, qualified_path};
use serde::Serialize;

use cuguard_format::{Frame, Report, Stack};

/// What kind of frame a site is (`stacks[].site.kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKind {
    /// The user's own frame.
    User,
    /// No user frame on the stack: the framework operation that asked (an autograd node).
    Operation,
    /// Neither: the first framework frame.
    Fallback,
}

impl SiteKind {
    /// The kind a report names (`user`, `operation`, `fallback`); `None` for others.
    pub fn parse(s: &str) -> Option<SiteKind> {
        match s {
            "user" => Some(SiteKind::User),
            "operation" => Some(SiteKind::Operation),
            "fallback" => Some(SiteKind::Fallback),
            _ => None,
        }
    }
}

/// The site of a leak or event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Site {
    /// What groups leaks: `function (file:line)` for a site the shim chose; else the function
    /// name, or `module+0xoffset` (module file name only), or one of `<no stack>`,
    /// `<unknown stack N>`, `<empty stack>`.
    pub key: String,
    /// What [`Site::label`] prints before the location: the function (for an operation or a
    /// fallback, its qualified path without parameters), `module+0xoffset`, or the placeholder.
    pub name: String,
    /// The site's source location, `file:line`, when known.
    pub location: Option<String>,
    /// The function of the site's frame, when known.
    pub function: Option<String>,
    /// The module holding the site's frame (full path), when there is one.
    pub module: Option<String>,
    /// What kind of frame it is, when the report says (a site the shim chose: `user` when the
    /// report is older than kinds); `None` for sites found by the older rule, and placeholders.
    pub kind: Option<SiteKind>,
    /// For an operation: where it ran, when the stack tells (`on the autograd thread`).
    pub context: Option<String>,
    /// For a site that is not the user's own frame, on a stack made under an origin
    /// (`stacks[].origin`): where the work was started, the origin stack's site location
    /// (`train.py:42`), else its name. Part of the key.
    pub origin: Option<String>,
    /// For a site charged to the caller of an allocation helper ([`crate::call_path`]): the
    /// helper's frame the caller called. Part of the key and the label.
    pub via: Option<Box<Site>>,
}

impl Site {
    /// A site without a frame (`<no stack>`, `<unknown stack N>`): its key is its name.
    pub(crate) fn placeholder(key: String) -> Site {
        Site {
            name: key.clone(),
            key,
            location: None,
            function: None,
            module: None,
            kind: None,
            context: None,
            origin: None,
            via: None,
        }
    }

    /// The site for people, its location once: `name (location)`, or the name alone; an
    /// operation as `operation: name (location)` (or `on the autograd thread: …`), a fallback as
    /// `framework: name (location)`; with an origin, where the work was started after it
    /// (`on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520), backward from
    /// train.py:42`; elsewhere `…, from train.py:42`).
    pub fn label(&self) -> String {
        let prefix = match self.kind {
            Some(SiteKind::Operation) => {
                format!("{}: ", self.context.as_deref().unwrap_or("operation"))
            }
            Some(SiteKind::Fallback) => "framework: ".to_string(),
            _ => String::new(),
        };
        let mut label = match &self.location {
            Some(loc) => format!("{prefix}{} ({loc})", self.name),
            None => format!("{prefix}{}", self.name),
        };
        if let Some(origin) = &self.origin {
            let how = if self.context.as_deref() == Some(AUTOGRAD_THREAD) {
                "backward from"
            } else {
                "from"
            };
            label.push_str(&format!(", {how} {origin}"));
        }
        if let Some(helper) = &self.via {
            label.push_str(" via ");
            label.push_str(&helper.label());
        }
        label
    }
}

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

/// The built-in site and owner rules (`cuguard_symbolize::rules`), built once.
pub fn builtin_rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(Rules::builtin)
}

/// Whether a module belongs to cuguard or CUDA itself, so frames in it are not sites.
pub fn is_runtime_module(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("libcuguard")
        || name.starts_with("libcuda.so")
        || name.starts_with("libcudart")
}

/// The last component of a path.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
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

/// `file:line` (file name only), or the file alone.
fn location(file: Option<&str>, line: Option<u32>) -> Option<String> {
    file.map(|file| match line {
        Some(line) => format!("{}:{line}", file_name(file)),
        None => file_name(file).to_string(),
    })
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

/// What [`operation_context`] says of PyTorch's autograd engine's own threads.
const AUTOGRAD_THREAD: &str = "on the autograd thread";

/// Where an operation ran, when its stack tells: PyTorch's autograd engine's own threads.
fn operation_context(stack: &Stack) -> Option<String> {
    stack
        .frames
        .iter()
        .filter_map(|f| f.function.as_deref())
        .any(|f| qualified_path(f).starts_with("torch::autograd::Engine::thread_"))
        .then(|| AUTOGRAD_THREAD.to_string())
}

/// A Python frame's location: `file:line` (file name only), or, for a file the program named
/// (`display`, IPython's `Cell In[2]`), `Cell In[2], line 5`.
pub fn python_location(f: &cuguard_format::PyFrame) -> Option<String> {
    match (&f.display, f.line) {
        (Some(display), Some(line)) => Some(format!("{display}, line {line}")),
        (Some(display), None) => Some(display.clone()),
        (None, _) => location(Some(&f.file), f.line),
    }
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

/// A named native frame as a site of the user's own (`function (file:line)`, keyed as the
/// shim's sites are); `None` for a frame without a name. [`crate::call_path`] follows these.
pub fn user_frame_site(f: &Frame) -> Option<Site> {
    let function = f.function.as_deref().filter(|n| !n.is_empty())?.to_string();
    Some(user_site(
        function,
        location(f.file.as_deref(), f.line),
        Some(f.module.to_string()),
    ))
}

/// A Python frame as a site of the user's own (`function (file:line)`, or its display name's
/// `Cell In[2], line 5`).
pub fn python_frame_site(f: &cuguard_format::PyFrame) -> Option<Site> {
    (!f.function.is_empty()).then(|| user_site(f.function.clone(), python_location(f), None))
}

fn user_site(function: String, location: Option<String>, module: Option<String>) -> Site {
    let key = match &location {
        Some(loc) => format!("{function} ({loc})"),
        None => function.clone(),
    };
    Site {
        key,
        name: function.clone(),
        location,
        function: Some(function),
        module,
        kind: Some(SiteKind::User),
        context: None,
        origin: None,
        via: None,
    }
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

/// The frames of a stack in the mixed native and Python order, innermost first: the report's
/// `mixed` when it has one, else the order `cuguard_symbolize::mixed` gives from the Python
/// frames' entry marks; `None` when the stack has no Python frames or no way to place them.
pub fn mixed_order(stack: &Stack) -> Option<Vec<Slot>> {
    if stack.python.is_empty() {
        return None;
    }
    if !stack.mixed.is_empty() {
        let slots: Vec<Slot> = stack
            .mixed
            .iter()
            .filter_map(|m| match (m.native, m.python) {
                (Some(i), None) if i < stack.frames.len() => Some(Slot::Native(i)),
                (None, Some(j)) if j < stack.python.len() => Some(Slot::Python(j)),
                _ => None,
            })
            .collect();
        return (!slots.is_empty()).then_some(slots);
    }
    let native: Vec<SiteFrame<'_>> = stack.frames.iter().map(site_frame).collect();
    let entries: Vec<Option<bool>> = stack.python.iter().map(|p| p.entry).collect();
    mixed::mixed(&native, &entries)
}

/// What the rules look at in a native frame.
pub fn site_frame(f: &Frame) -> SiteFrame<'_> {
    SiteFrame {
        module: &f.module,
        function: f.function.as_deref(),
        file: f.file.as_deref(),
        line: f.line,
        offset: f.offset.0,
    }
}

/// What the rules look at in a Python frame.
pub fn python_site_frame(f: &cuguard_format::PyFrame) -> SiteFrame<'_> {
    SiteFrame {
        module: "",
        function: Some(&f.function),
        file: Some(&f.file),
        line: f.line,
        offset: 0,
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
    let rules = builtin_rules();
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
        let tier = rules.tier(&frame);
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
mod tests {
    use super::*;
    use cuguard_format::Addr;

    fn frame(module: &str, function: Option<&str>) -> Frame {
        Frame {
            ip: Addr(0x1000),
            module: module.into(),
            offset: Addr(0x1a2b),
            function: function.map(Into::into),
            file: None,
            line: None,
            inlined: None,
        }
    }

    #[test]
    fn skips_shim_driver_and_runtime_frames() {
        let stack = Stack {
            id: 1,
            frames: vec![
                frame("/opt/cuguard/libcuguard.so", Some("cuMemAlloc_v2")),
                frame("/usr/lib/libcuda.so.1", None),
                frame("/usr/local/cuda/lib64/libcudart.so.13", Some("cudaMalloc")),
                frame("/opt/app/train", Some("make_buffers")),
                frame("/opt/app/train", Some("main")),
            ],
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        assert_eq!(site_of_stack(&stack).key, "make_buffers");
    }

    #[test]
    fn unnamed_frames_use_module_and_offset() {
        let stack = Stack {
            id: 1,
            frames: vec![frame("/opt/app/lib/libscratch.so", None)],
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        assert_eq!(site_of_stack(&stack).key, "libscratch.so+0x1a2b");
    }

    #[test]
    fn all_runtime_frames_fall_back_to_the_first() {
        let stack = Stack {
            id: 1,
            frames: vec![frame("/x/libcuguard.so", Some("cuMemAlloc_v2"))],
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        assert_eq!(site_of_stack(&stack).key, "cuMemAlloc_v2");
        let empty = Stack {
            id: 2,
            frames: vec![],
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        assert_eq!(site_of_stack(&empty).key, "<empty stack>");
    }

    #[test]
    fn the_shims_site_wins_and_keeps_lines_apart() {
        let py = |line| cuguard_format::PyFrame {
            file: "/work/train.py".into(),
            line: Some(line),
            function: "make".into(),
            entry: None,
            display: None,
        };
        let stack = |line| Stack {
            id: 1,
            frames: vec![frame("/usr/lib/libcudart.so.13", Some("cudaMalloc"))],
            python: vec![py(line)],
            site: Some(cuguard_format::StackSite {
                in_: "python".into(),
                index: 0,
                fingerprint: "f".into(),
                kind: None,
            }),
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        assert_eq!(site_of_stack(&stack(75)).key, "make (train.py:75)");
        assert_ne!(site_of_stack(&stack(75)).key, site_of_stack(&stack(76)).key);
        let native = Stack {
            id: 2,
            frames: vec![
                frame("/tmp/planted", Some("cudaMalloc")),
                Frame {
                    file: Some("/src/planted_leaks.cu".into()),
                    line: Some(29),
                    ..frame("/tmp/planted", Some("leak_in_static_function"))
                },
            ],
            python: vec![],
            site: Some(cuguard_format::StackSite {
                in_: "frames".into(),
                index: 1,
                fingerprint: "g".into(),
                kind: None,
            }),
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        assert_eq!(
            site_of_stack(&native).key,
            "leak_in_static_function (planted_leaks.cu:29)"
        );
    }

    fn named(module: &str, function: &str, file: Option<&str>, line: Option<u32>) -> Frame {
        Frame {
            file: file.map(Into::into),
            line,
            ..frame(module, Some(function))
        }
    }

    fn site(in_: &str, index: usize, kind: Option<&str>) -> Option<cuguard_format::StackSite> {
        Some(cuguard_format::StackSite {
            in_: in_.into(),
            index,
            fingerprint: "f".into(),
            kind: kind.map(Into::into),
        })
    }

    #[test]
    fn a_label_prints_the_location_once_and_says_what_the_site_is() {
        let user = Stack {
            id: 1,
            frames: vec![
                frame("/x/libcuguard.so", Some("cuMemAllocAsync")),
                named(
                    "/opt/app/cudarc_leaks",
                    "cudarc_leaks::main",
                    Some("/src/cudarc_leaks.rs"),
                    Some(25),
                ),
            ],
            python: vec![],
            site: site("frames", 1, None),
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        let s = site_of_stack(&user);
        assert_eq!(s.key, "cudarc_leaks::main (cudarc_leaks.rs:25)");
        assert_eq!(s.label(), "cudarc_leaks::main (cudarc_leaks.rs:25)");
        assert_eq!(
            s.kind,
            Some(SiteKind::User),
            "older reports: the user's frame"
        );

        let torch = "/venv/torch/lib/libtorch_cpu.so";
        let autograd = Stack {
            id: 2,
            frames: vec![
                frame("/x/libcuguard.so", Some("cuMemAlloc_v2")),
                named(
                    torch,
                    "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
                    Some("torch/csrc/autograd/generated/Functions.cpp"),
                    Some(1520),
                ),
                named(
                    torch,
                    "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
                    None,
                    None,
                ),
            ],
            python: vec![],
            site: site("frames", 1, Some("operation")),
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        let s = site_of_stack(&autograd);
        assert_eq!(
            s.label(),
            "on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520)"
        );
        assert!(
            s.key
                .starts_with("torch::autograd::generated::AddmmBackward0::apply(")
        );
        let elsewhere = Stack {
            frames: autograd.frames[..2].to_vec(),
            ..autograd.clone()
        };
        assert_eq!(
            site_of_stack(&elsewhere).label(),
            "operation: AddmmBackward0::apply (Functions.cpp:1520)"
        );
        let fallback = Stack {
            site: site("frames", 1, Some("fallback")),
            ..elsewhere
        };
        assert_eq!(
            site_of_stack(&fallback).label(),
            "framework: AddmmBackward0::apply (Functions.cpp:1520)"
        );
        // A kind from the future is shown plainly.
        let future = Stack {
            site: site("frames", 1, Some("psychic")),
            ..fallback
        };
        assert_eq!(site_of_stack(&future).kind, None);
        assert!(
            site_of_stack(&future)
                .label()
                .starts_with("torch::autograd::generated::")
        );
    }

    fn python_stack(mixed: Vec<cuguard_format::MixedRef>, entries: [Option<bool>; 2]) -> Stack {
        let py = "/usr/bin/python3.12";
        let pyframe = |function: &str, line, entry| cuguard_format::PyFrame {
            file: "/work/train.py".into(),
            line: Some(line),
            function: function.into(),
            entry,
            display: None,
        };
        Stack {
            id: 7,
            frames: vec![
                frame("/x/libcuguard.so", Some("cuMemAlloc_v2")),
                frame("/venv/torch/lib/libcudart.so.13", Some("cudaMalloc")),
                named(
                    "/venv/torch/lib/libtorch_cuda.so",
                    "at::native::empty_cuda(c10::ArrayRef<long>)",
                    None,
                    None,
                ),
                frame(py, Some("_PyEval_EvalFrameDefault")),
                frame(py, Some("Py_RunMain")),
                frame("/lib/libc.so.6", Some("__libc_start_call_main")),
            ],
            python: vec![
                pyframe("step", 7, entries[0]),
                pyframe("<module>", 12, entries[1]),
            ],
            site: site("python", 0, Some("user")),
            owner: None,
            mixed,
            origin: None,
        }
    }

    #[test]
    fn chains_read_like_py_spy_native() {
        let want = [
            "at::native::empty_cuda",
            "step (train.py:7)",
            "<module> (train.py:12)",
        ];
        // From entry marks.
        let stack = python_stack(Vec::new(), [Some(false), Some(true)]);
        assert_eq!(chain(&stack), want);
        // From the report's own mixed order.
        let m = |native, python| cuguard_format::MixedRef { native, python };
        let stack = python_stack(
            vec![
                m(Some(0), None),
                m(Some(1), None),
                m(Some(2), None),
                m(None, Some(0)),
                m(None, Some(1)),
                m(Some(5), None),
                m(Some(99), None),
            ],
            [None, None],
        );
        assert_eq!(chain(&stack), want, "bad indices are skipped");
        // Neither: no mixed order, no chain.
        let stack = python_stack(Vec::new(), [None, None]);
        assert_eq!(mixed_order(&stack), None);
        assert!(chain(&stack).is_empty());
    }

    /// A stack of `shim/symbolize/tests/fixtures/stacks-recorded.txt` (recorded on the H200) as
    /// the report gives it: its native frames as listed, its Python frames run by one call of
    /// the evaluation loop (the entry mark on the outermost), so that the mixed order puts them
    /// at the first evaluation frame listed after them.
    fn recorded(name: &str) -> Stack {
        let text = include_str!("../shim/symbolize/tests/fixtures/stacks-recorded.txt");
        let head = format!("stack {name}");
        let block = text
            .split("\n\n")
            .find(|b| b.lines().any(|l| l == head))
            .unwrap_or_else(|| panic!("no {head}"));
        let opt = |s: &str| (s != "-").then(|| s.to_string());
        let mut frames = Vec::new();
        let mut python = Vec::new();
        for line in block.lines() {
            if let Some(rest) = line.strip_prefix("N ") {
                let p: Vec<&str> = rest.split(" | ").collect();
                frames.push(Frame {
                    file: opt(p[2]).map(Into::into),
                    line: p[3].parse().ok(),
                    ..frame(p[0], opt(p[1]).as_deref())
                });
            } else if let Some(rest) = line.strip_prefix("P ") {
                let p: Vec<&str> = rest.split(" | ").collect();
                python.push(cuguard_format::PyFrame {
                    file: p[0].into(),
                    line: p[2].parse().ok(),
                    function: p[1].into(),
                    entry: Some(false),
                    display: None,
                });
            }
        }
        if let Some(last) = python.last_mut() {
            last.entry = Some(true);
        }
        Stack {
            id: 1,
            frames,
            python,
            site: None,
            owner: None,
            mixed: Vec::new(),
            origin: None,
        }
    }

    #[test]
    fn pytorch_chains_fold_the_framework_and_reach_the_users_lines() {
        // torch.full on the main thread: the runtime and the allocator left out, the 16
        // frames of ATen's dispatcher and kernels in one entry, then the user's lines.
        let stack = recorded("torch_tensor_caching_off");
        assert_eq!(
            chain(&stack),
            [
                "… 16 frames in libtorch_cpu.so, libtorch_cuda.so, libtorch_python.so",
                "case_torch (clients.py:54)",
                "main (clients.py:170)",
                "<module> (clients.py:182)",
            ]
        );
        // The flame graph keeps every frame.
        let names = mixed_names(&stack).unwrap();
        assert_eq!(names.len(), 16 + 3);
        assert_eq!(names[0], "at::detail::empty_generic");
        assert_eq!(names[15], "torch::autograd::THPVariable_full");
        // nn.Linear's forward: ATen's frames and torch.nn's Python frames are one run.
        let stack = recorded("torch_forward_cublaslt_workspace");
        assert_eq!(
            chain(&stack),
            [
                "… 19 frames in libtorch_cuda.so, libtorch_cpu.so and 2 more",
                "torch_train (reliability.py:28)",
                "<module> (reliability.py:52)",
            ]
        );
        // Without folding this chain would have been ATen's first eight frames and "…".
        assert!(mixed_names(&stack).unwrap().len() > MAX_CHAIN + 2);
        // CuPy: its extension modules and its Python frames, named by the package.
        let stack = recorded("cupy_pool_off_array");
        assert_eq!(
            chain(&stack),
            [
                "… 6 frames in cupy",
                "case_cupy (clients.py:89)",
                "main (clients.py:170)",
                "<module> (clients.py:182)",
            ]
        );
        // JAX: a long Python run of the framework, folded by its package.
        let stack = recorded("jax_cudnn_handle");
        let c = chain(&stack);
        assert!(c.len() <= MAX_CHAIN, "{c:?}");
        assert!(
            c.iter().any(|e| e.starts_with("… ") && e.contains("jax")),
            "{c:?}"
        );
        assert_eq!(
            &c[c.len() - 3..],
            [
                "case_jax (clients.py:125)",
                "main (clients.py:170)",
                "<module> (clients.py:182)"
            ],
            "{c:?}"
        );
    }

    #[test]
    fn folds_keep_operations_and_user_frames_and_count_what_they_hide() {
        let torch = "/venv/torch/lib/libtorch_cpu.so";
        let py = "/usr/bin/python3.12";
        let mut stack = python_stack(Vec::new(), [Some(false), Some(true)]);
        // allocator, 4 framework frames, an operation, 3 framework frames, a user native frame,
        // 2 framework frames, then the evaluation loop.
        stack.frames = vec![
            frame("/x/libcuguard.so", Some("cuMemAlloc_v2")),
            frame(
                "/venv/torch/lib/libc10_cuda.so",
                Some(
                    "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
                ),
            ),
            frame(
                torch,
                Some("at::detail::empty_generic(c10::ArrayRef<long>)"),
            ),
            frame("/lib/x86_64-linux-gnu/libc.so.6", Some("memset")),
            frame(torch, Some("at::native::empty_cuda(c10::ArrayRef<long>)")),
            frame(torch, Some("at::_ops::empty::call(c10::ArrayRef<long>)")),
            frame(
                torch,
                Some("c10::impl::wrap_kernel_functor_unboxed_<void>::call()"),
            ),
            frame(
                torch,
                Some("torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor>&&)"),
            ),
            frame(torch, Some("at::_ops::mul::call()")),
            frame(torch, Some("at::_ops::mul::redispatch()")),
            frame(
                torch,
                Some("torch::autograd::THPVariable_mul(_object*, _object*)"),
            ),
            named(
                "/opt/app/libmine.so",
                "mine::step(int)",
                Some("/src/mine.cc"),
                Some(9),
            ),
            frame(torch, Some("at::_ops::add::call()")),
            frame(torch, Some("at::_ops::add::redispatch()")),
            frame(py, Some("_PyEval_EvalFrameDefault")),
            frame(py, Some("Py_RunMain")),
        ];
        assert_eq!(
            chain(&stack),
            [
                "… 4 frames in libtorch_cpu.so",
                "torch::autograd::generated::MulBackward0::apply",
                "… 3 frames in libtorch_cpu.so",
                "mine::step (mine.cc:9)",
                "at::_ops::add::call",
                "at::_ops::add::redispatch",
                "step (train.py:7)",
                "<module> (train.py:12)",
            ],
            "libc's frame is left out and does not break the run; two frames are not folded"
        );
        // Exactly MAX_CHAIN entries: as they are. One more, and what lies between the user's
        // native frame and the Python line that called it is folded, so the ends stay.
        stack.python.insert(
            0,
            cuguard_format::PyFrame {
                file: "/work/train.py".into(),
                line: Some(3),
                function: "inner".into(),
                entry: Some(false),
                display: None,
            },
        );
        assert_eq!(
            chain(&stack),
            [
                "… 4 frames in libtorch_cpu.so",
                "torch::autograd::generated::MulBackward0::apply",
                "… 3 frames in libtorch_cpu.so",
                "mine::step (mine.cc:9)",
                "… 2 frames in libtorch_cpu.so",
                "inner (train.py:3)",
                "step (train.py:7)",
                "<module> (train.py:12)",
            ]
        );
        // A run over many modules names three, or two and how many more.
        let run: Vec<String> = ["a.so", "b.so", "a.so", "c.so", "d.so", "e.so"]
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(fold_text(&run[..4]), "… 4 frames in a.so, b.so, c.so");
        assert_eq!(fold_text(&run), "… 6 frames in a.so, b.so and 3 more");
        assert_eq!(
            python_place("/v/lib/python3.12/site-packages/torch/nn/modules/module.py"),
            "torch"
        );
        assert_eq!(
            python_place("/usr/lib/python3/dist-packages/numpy/core.py"),
            "numpy"
        );
        assert_eq!(python_place("/work/train.py"), "train.py");
        assert_eq!(
            native_place("/v/site-packages/cupy/_core/core.cpython-312-x86_64-linux-gnu.so"),
            "cupy"
        );
        assert_eq!(
            native_place("/v/site-packages/torch/lib/libtorch_cpu.so"),
            "libtorch_cpu.so"
        );
    }

    #[test]
    fn a_deep_native_library_folds_between_its_first_frame_and_its_caller() {
        // A library of the user's, 11 calls deep, called through ctypes from Python.
        let py = "/usr/bin/python3.12";
        let deep = "/work/libdeep.so";
        let mut frames = vec![frame("/x/libcuguard.so", Some("cuMemAlloc_v2"))];
        for i in 0..11 {
            let name = format!("deep_{i}");
            frames.push(named(deep, &name, Some("/work/deep.c"), Some(4 + i)));
        }
        frames.extend([
            frame("/lib/x86_64-linux-gnu/libffi.so.8", Some("ffi_call")),
            frame(
                "/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so",
                Some("_ctypes_callproc"),
            ),
            frame(py, Some("_PyEval_EvalFrameDefault")),
            frame(py, Some("Py_RunMain")),
        ]);
        let pyframe = |function: &str, line, entry| cuguard_format::PyFrame {
            file: "/work/deep.py".into(),
            line: Some(line),
            function: function.into(),
            entry: Some(entry),
            display: None,
        };
        let mut stack = Stack {
            id: 1,
            frames,
            python: vec![
                pyframe("load_weights", 9, false),
                pyframe("<module>", 12, true),
            ],
            site: None,
            owner: None,
            mixed: Vec::new(),
            origin: None,
        };
        assert_eq!(
            chain(&stack),
            [
                "deep_0 (deep.c:4)",
                "… 10 frames in libdeep.so",
                "load_weights (deep.py:9)",
                "<module> (deep.py:12)",
            ]
        );
        // Six frames deep, the chain fits: nothing folded.
        stack.frames.drain(7..12);
        assert_eq!(chain(&stack).len(), 6 + 2);
        assert_eq!(chain(&stack)[MAX_CHAIN - 1], "<module> (deep.py:12)");
        // A native `main` calls the user's code as a Python line does: everything before it
        // (the Python frames here run by no evaluation frame on the stack) is kept.
        let mut stack = Stack {
            python: vec![pyframe("callback", 3, true)],
            ..stack
        };
        stack.frames.truncate(7);
        for i in 6..11 {
            let name = format!("deep_{i}");
            stack
                .frames
                .push(named(deep, &name, Some("/work/deep.c"), Some(4 + i)));
        }
        stack
            .frames
            .push(named("/work/app", "main", Some("/work/app.c"), Some(30)));
        assert_eq!(
            chain(&stack),
            [
                "deep_0 (deep.c:4)",
                "… 10 frames in libdeep.so",
                "main (app.c:30)",
                "callback (deep.py:3)",
            ]
        );
    }

    #[test]
    fn origins_and_cell_names_in_labels() {
        let node = Site {
            key: "k".into(),
            name: "AddmmBackward0::apply".into(),
            location: Some("Functions.cpp:1520".into()),
            function: None,
            module: None,
            kind: Some(SiteKind::Operation),
            context: Some(AUTOGRAD_THREAD.into()),
            origin: Some("train.py:42".into()),
            via: None,
        };
        assert_eq!(
            node.label(),
            "on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520), backward from train.py:42"
        );
        let elsewhere = Site {
            context: None,
            ..node
        };
        assert_eq!(
            elsewhere.label(),
            "operation: AddmmBackward0::apply (Functions.cpp:1520), from train.py:42"
        );
        let cell = |line, display: Option<&str>| cuguard_format::PyFrame {
            file: "/tmp/ipykernel_4242/817962334.py".into(),
            line,
            function: "<module>".into(),
            entry: Some(true),
            display: display.map(Into::into),
        };
        assert_eq!(
            python_location(&cell(Some(5), Some("Cell In[2]"))).unwrap(),
            "Cell In[2], line 5"
        );
        assert_eq!(
            python_location(&cell(None, Some("Cell In[2]"))).unwrap(),
            "Cell In[2]"
        );
        assert_eq!(
            python_location(&cell(Some(5), None)).unwrap(),
            "817962334.py:5"
        );
        // A chain shows the cell's name too.
        let mut stack = python_stack(Vec::new(), [Some(false), Some(true)]);
        stack.python[1].display = Some("Cell In[7]".into());
        assert_eq!(
            chain(&stack).last().unwrap(),
            "<module> (Cell In[7], line 12)"
        );
    }

    #[test]
    fn mixed_names_are_chains_at_full_depth() {
        let mut stack = python_stack(Vec::new(), [Some(false), Some(true)]);
        assert_eq!(mixed_names(&stack), Some(chain(&stack)));
        // Twelve Python frames: the chain keeps its ends within MAX_CHAIN, the names go on.
        stack.python = (0..12)
            .map(|i| cuguard_format::PyFrame {
                file: "/work/deep.py".into(),
                line: Some(i),
                function: format!("f{i}"),
                entry: Some(i == 11),
                display: None,
            })
            .collect();
        assert_eq!(
            chain(&stack),
            [
                "at::native::empty_cuda",
                "f0 (deep.py:0)",
                "f1 (deep.py:1)",
                "… 6 frames in deep.py",
                "f8 (deep.py:8)",
                "f9 (deep.py:9)",
                "f10 (deep.py:10)",
                "f11 (deep.py:11)",
            ]
        );
        let names = mixed_names(&stack).unwrap();
        assert_eq!(names.len(), 13);
        assert_eq!(names[0], "at::native::empty_cuda");
        assert_eq!(names[12], "f11 (deep.py:11)");
        // One frame left is still a name (the chain leaves it to the site).
        stack.python.truncate(1);
        stack.python[0].entry = Some(true);
        stack.frames.remove(2);
        assert_eq!(mixed_names(&stack).unwrap(), ["f0 (deep.py:0)"]);
        assert!(chain(&stack).is_empty());
        stack.python.clear();
        assert_eq!(mixed_names(&stack), None);
    }
}
