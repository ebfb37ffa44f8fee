//! The call stack of an allocation: captured when it is made (through [`crate::stack`]: native
//! frames and, when the thread runs Python, its Python frames), and handed to the report
//! ([`stacks`], as the report crate's types) when it is written, symbolized within a deadline and
//! with its site.
//!
//! # What the report gets, per stack
//!
//! ```text
//! {"id": 3,
//!  "frames": [{"ip", "module", "offset", "function", "file", "line", "inlined"}, …],
//!  "python": [{"file", "line", "function"}, …],            // only when Python frames were read
//!  "site":   {"in": "frames"|"python", "index": 2, "fingerprint": "9c3e…"} | null,
//!  "origin": 5}                                              // only under an origin
//! ```
//!
//! - `frames`: native frames, innermost first. An ip inside inlined code gives one entry per
//!   inlined function (innermost first, `inlined: true`), then the function it was inlined
//!   into (`inlined: false`), all with the same ip/module/offset. Names come from
//!   [`cuguard_symbolize`] (symbol tables, DWARF, separate debug files), each distinct
//!   (module, offset) once; work stops at a deadline (`CUGUARD_SYMBOLIZE_SECS`, default 2 s,
//!   0 = off), after which frames keep null names for `cuguard symbolize` to fill in.
//! - `python`: the thread's Python frames, innermost first; a frame in a file the program
//!   named (`cuguard_file_alias`, [`crate::process::aliases`]) has that name as `display`.
//! - `origin`: for a stack captured on a thread without Python frames while an origin was open
//!   ([`crate::stack::origin`]), the id of the origin's stack.
//! - `site`: the frame the stack is charged to, by [`cuguard_symbolize::site::find_site`] with
//!   the built-in plumbing list plus `CUGUARD_PLUMBING` (comma-separated `module:GLOB`,
//!   `function:GLOB`, `file:GLOB`). The rule runs over the frames in call order: the native
//!   frames above the interpreter, then the Python frames, then the interpreter's own and
//!   what called it. `in` names the array `index` points into.
//!
//! Modules are written as `{path, build_id, base, start, size}`: `base` is the load bias
//! (`ip - base` = the offset symbol tables use), `[start, start + size)` the addresses its
//! segments cover (for a non-PIE executable `base` is 0 and `start` is not).
//!
//! Everything here runs inside the report writer (under its guard and panic shield), in a
//! process that may be exiting: it calls no CUDA and no Python, and a panic in symbolization
//! costs only the names (the report is still written).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use cuguard_format as format;
use cuguard_format::{Addr, site_list};
use cuguard_symbolize::mixed::{self, Slot};
use cuguard_symbolize::rules::Rules;
use cuguard_symbolize::site::{Plumbing, SiteFrame};
use cuguard_symbolize::{Frame, Symbolizer};

use crate::stack::{self, Module, python};

/// A return address, where it lies (module, offset) and its frames.
type ResolvedIp = (u64, Option<(usize, u64)>, Arc<[Frame]>);

/// The default symbolization budget, seconds.
pub const DEFAULT_SYMBOLIZE_SECS: f64 = 2.0;

/// Settings of the report-time work, from the environment (read at the first report).
struct Settings {
    /// `None`: do not symbolize.
    budget: Option<Duration>,
    /// The site and owner rules: built in, plus `CUGUARD_PLUMBING` and `CUGUARD_OWNERS`.
    rules: Rules,
    problems: Vec<String>,
}

impl Settings {
    fn from_env(var: impl Fn(&str) -> Option<String>) -> Settings {
        let mut problems = Vec::new();
        let secs = match var("CUGUARD_SYMBOLIZE_SECS").as_deref().map(str::trim) {
            None | Some("") => DEFAULT_SYMBOLIZE_SECS,
            Some(s) => match s.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => v,
                _ => {
                    problems.push(format!(
                        "CUGUARD_SYMBOLIZE_SECS={s:?} is not a number of seconds; using {DEFAULT_SYMBOLIZE_SECS}"
                    ));
                    DEFAULT_SYMBOLIZE_SECS
                }
            },
        };
        let mut plumbing = Plumbing::builtin();
        if let Some(list) = var("CUGUARD_PLUMBING") {
            for spec in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                if let Err(e) = plumbing.add(spec) {
                    problems.push(format!("CUGUARD_PLUMBING: {e}"));
                }
            }
        }
        let mut rules = plumbing.into_rules();
        if let Some(spec) = var("CUGUARD_OWNERS")
            && let Err(e) = rules.add_owner_spec(&spec)
        {
            problems.push(format!("CUGUARD_OWNERS: {e}"));
        }
        Settings {
            budget: (secs > 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0))),
            rules,
            problems,
        }
    }
}

/// Names found by earlier reports of this process (checkpoints, snapshots), by module (path
/// and build-id) and offset, so that each address is looked up once per process. Bounded by
/// [`MAX_CACHED`].
#[derive(Default)]
struct Names {
    modules: HashMap<(String, Option<String>), usize>,
    by_module: Vec<HashMap<u64, Arc<[Frame]>>>,
    count: usize,
}

impl Names {
    fn slot(&mut self, m: &Module) -> usize {
        let key = (m.path.clone(), m.build_id.clone());
        if let Some(&i) = self.modules.get(&key) {
            return i;
        }
        self.by_module.push(HashMap::new());
        self.modules.insert(key, self.by_module.len() - 1);
        self.by_module.len() - 1
    }
}

static NAMES: Mutex<Option<Names>> = Mutex::new(None);
/// The most addresses whose names are kept between reports.
const MAX_CACHED: usize = 1 << 20;
static SETTINGS: OnceLock<Settings> = OnceLock::new();
static DEADLINE_NOTED: AtomicBool = AtomicBool::new(false);
static BROKEN_NOTED: AtomicBool = AtomicBool::new(false);

/// What [`stacks`] gives the report.
pub struct Stacks {
    /// The report's `stacks`: symbolized, with Python frames, mixed order, site and owner.
    pub stacks: Vec<format::Stack>,
    /// The report's `modules`.
    pub modules: Vec<format::Module>,
    /// The report's `owners`: every owner a stack or a leak names.
    pub owners: Vec<format::OwnerInfo>,
    /// The owner of an allocation by its stack and memory kind (owner rules may look at the
    /// memory kind), for the leaks' `owner`.
    pub owner_of: HashMap<(u32, &'static str), String>,
}

/// The report's `stacks` (symbolized, with Python frames, sites and owners) and `modules`.
/// `memories` gives, per stack id, the memory kinds of the live allocations made with it (the
/// first is the stack's own owner's); stacks absent from it get an owner decided without one.
pub fn stacks(memories: &HashMap<u32, Vec<&'static str>>) -> Stacks {
    let started = Instant::now();
    let stacks = stack::stacks();
    let modules = if stacks.is_empty() {
        Vec::new()
    } else {
        stack::modules()
    };
    let settings = settings();
    // A forked child may find the lock held by a thread it does not have: work without the
    // names of earlier reports then.
    let mut guard: Option<MutexGuard<'_, Option<Names>>> = match NAMES.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    let mut local: Option<Names> = None;
    let names = match guard.as_deref_mut() {
        Some(cached) => cached.get_or_insert_with(Names::default),
        None => local.get_or_insert_with(Names::default),
    };
    let mut w = Writer::new(&modules, settings, names);
    let none = Vec::new();
    let out: Vec<format::Stack> = stacks
        .iter()
        .map(|(id, words)| w.stack(*id, words, memories.get(id).unwrap_or(&none)))
        .collect();
    let listed = modules
        .iter()
        .map(|m| format::Module {
            path: m.path.clone(),
            build_id: m.build_id.clone(),
            base: Addr(m.base),
            start: Some(Addr(m.start)),
            size: m.end.saturating_sub(m.start),
        })
        .collect();
    crate::process::diag::log(|| {
        format!(
            "stacks: {} written ({} addresses looked up now, {} named in all) in {:.1} ms",
            stacks.len(),
            w.looked_up,
            w.names.count,
            started.elapsed().as_secs_f64() * 1e3
        )
    });
    if w.broken && !BROKEN_NOTED.swap(true, Ordering::Relaxed) {
        crate::process::faults::record(
            "symbolization failed (internal error); the remaining frames have no names".into(),
        );
    }
    if w.unnamed > 0 && !DEADLINE_NOTED.swap(true, Ordering::Relaxed) {
        crate::process::faults::record(format!(
            "symbolization reached its deadline ({:.1} s, CUGUARD_SYMBOLIZE_SECS): {} addresses were left without names (`cuguard symbolize` can fill them in)",
            settings.budget.map_or(0.0, |b| b.as_secs_f64()),
            w.unnamed
        ));
    }
    let mut owner_ids: Vec<&String> = w.owner_of.values().collect();
    owner_ids.extend(out.iter().filter_map(|s| s.owner.as_ref()));
    owner_ids.sort();
    owner_ids.dedup();
    let owners = owner_ids
        .into_iter()
        .filter_map(|id| settings.rules.owner_by_id(id))
        .map(|o| format::OwnerInfo {
            id: o.id.clone(),
            kind: o.kind.as_str().into(),
            label: o.label.clone(),
            hint: o.hint.clone(),
        })
        .collect();
    Stacks {
        stacks: out,
        modules: listed,
        owners,
        owner_of: w.owner_of,
    }
}

/// How long [`sites_now`] may spend naming frames.
const SITES_NOW_BUDGET: Duration = Duration::from_millis(500);

/// The site of a stack, named now (see [`sites_now`]), and who holds its memory.
pub struct SiteNow {
    /// `function (file:line)`, or the module and offset where nothing names the frame; `None`
    /// when the stack has no site.
    pub label: Option<String>,
    /// The owner the rules give the stack (an owner id: `program`, `torch-caching-allocator`, …).
    pub owner: String,
}

/// The sites of stacks `ids`, named now (`function (file:line)`, or the module and offset where
/// nothing names the frame), for a line on stderr while the program runs (an out-of-memory);
/// `None` for an id without a stack or without a site. Names frames within half a second at
/// most, and shares the names it finds with the reports.
pub fn sites_now(ids: &[u32]) -> Vec<Option<String>> {
    sites_with_owners_now(ids)
        .0
        .into_iter()
        .map(|s| s.and_then(|s| s.label))
        .collect()
}

/// As [`sites_now`], with each stack's owner; `None` for an id without a stack. The flag says
/// whether every frame could be named in time (when not, a later call may name more).
pub fn sites_with_owners_now(ids: &[u32]) -> (Vec<Option<SiteNow>>, bool) {
    let all = stack::stacks();
    let wanted: Vec<&(u32, Vec<u64>)> = ids
        .iter()
        .map(|id| all.iter().find(|(sid, _)| sid == id))
        .collect::<Option<Vec<_>>>()
        .unwrap_or_else(|| {
            ids.iter()
                .filter_map(|id| all.iter().find(|(sid, _)| sid == id))
                .collect()
        });
    let modules = stack::modules();
    let settings = settings();
    let mut guard = NAMES.try_lock().ok();
    let mut local: Option<Names> = None;
    let names = match guard.as_deref_mut() {
        Some(cached) => cached.get_or_insert_with(Names::default),
        None => local.get_or_insert_with(Names::default),
    };
    let mut w = Writer::new(&modules, settings, names);
    w.symbolizer = Some(Symbolizer::new(Some(Instant::now() + SITES_NOW_BUDGET)));
    let sites = ids
        .iter()
        .map(|id| {
            let (_, words) = wanted.iter().find(|(sid, _)| sid == id)?;
            let st = w.stack(*id, words, &[]);
            let owner = st.owner.clone().unwrap_or_default();
            Some(SiteNow {
                label: site_label(&st, &settings.rules),
                owner,
            })
        })
        .collect();
    (sites, w.unnamed == 0 && !w.broken)
}

/// The label of a symbolized stack's site, with the user's frame that called it when there is
/// one (`alloc (spike.py:9) ← train_step (spike.py:18)`), so that the lines that called one
/// helper read apart.
fn site_label(st: &format::Stack, rules: &Rules) -> Option<String> {
    let mut label = frame_label(st)?;
    if let Some(caller) = api_site(st, rules).and_then(|s| s.callers.into_iter().next()) {
        let name = caller.function.as_deref().unwrap_or("?");
        label.push_str(&match (&caller.file, caller.line) {
            (Some(file), Some(l)) => format!(" ← {name} ({}:{l})", base_name(file)),
            (Some(file), None) => format!(" ← {name} ({})", base_name(file)),
            _ => format!(" ← {name}"),
        });
    }
    Some(label)
}

/// The label of a symbolized stack's site frame alone.
fn frame_label(st: &format::Stack) -> Option<String> {
    let site = st.site.as_ref()?;
    Some(match site.in_.as_str() {
        site_list::PYTHON => {
            let f = st.python.get(site.index)?;
            match (&f.display, f.line) {
                (Some(d), Some(l)) => format!("{} ({d}, line {l})", f.function),
                (Some(d), None) => format!("{} ({d})", f.function),
                (None, Some(l)) => format!("{} ({}:{l})", f.function, base_name(&f.file)),
                (None, None) => format!("{} ({})", f.function, base_name(&f.file)),
            }
        }
        _ => {
            let f = st.frames.get(site.index)?;
            match (&f.function, &f.file, f.line) {
                (Some(func), Some(file), Some(l)) => {
                    format!("{func} ({}:{l})", base_name(file))
                }
                (Some(func), _, _) => func.to_string(),
                _ => format!("{}+{:#x}", base_name(&f.module), f.offset.0),
            }
        }
    })
}

/// An allocation's site and owner as the in-process API gives them ([`named_now`]).
pub struct Named {
    pub site: format::api::Site,
    /// The owner's id, by the report's owner rules.
    pub owner: String,
    /// Its kind (`program`, `framework_cache`, `library`, `driver`).
    pub owner_kind: Option<String>,
}

/// The Python frames of each stack of `ids`, innermost first, as the report writes them: the
/// code table's names only, no native frame named (cheap: what a framework's out-of-memory
/// observer may wait for). Empty for a stack without Python frames or an unknown id.
pub fn python_frames_now(ids: &[u32]) -> Vec<Vec<format::PyFrame>> {
    let codes = python::codes();
    let aliases = crate::process::aliases::all();
    ids.iter()
        .map(|&id| {
            let Some(words) = stack::words_of(id) else {
                return Vec::new();
            };
            let (_, tail) = stack::split(&words);
            tail.iter()
                .map(|&w| {
                    let f = python::decode(w, &codes);
                    format::PyFrame {
                        file: f.file.into(),
                        line: f.line,
                        function: f.function.into(),
                        entry: Some(f.entry),
                        display: aliases.get(f.file).cloned(),
                    }
                })
                .collect()
        })
        .collect()
}

/// For each `(stack id or NONE, memory kind)` of `asks`: the stack's site, named now with its
/// callers ([`api_site`]: what tells apart the lines that called a helper of the program's), and
/// the owner of an allocation of that memory made from it, by the same rules as the report's
/// (`site`, `owner`). Names frames within half a second at most (as [`sites_now`]), and shares
/// the names it finds with the reports; a frame left unnamed has null fields.
pub fn named_now(asks: &[(u32, &'static str)]) -> Vec<Named> {
    let mut memories: HashMap<u32, Vec<&'static str>> = HashMap::new();
    for &(id, memory) in asks {
        let kinds = memories.entry(id).or_default();
        if !kinds.contains(&memory) {
            kinds.push(memory);
        }
    }
    let all = stack::stacks();
    let modules = stack::modules();
    let settings = settings();
    let mut guard = NAMES.try_lock().ok();
    let mut local: Option<Names> = None;
    let names = match guard.as_deref_mut() {
        Some(cached) => cached.get_or_insert_with(Names::default),
        None => local.get_or_insert_with(Names::default),
    };
    let mut w = Writer::new(&modules, settings, names);
    w.symbolizer = Some(Symbolizer::new(Some(Instant::now() + SITES_NOW_BUDGET)));
    let mut sites: HashMap<u32, format::api::Site> = HashMap::new();
    for (id, words) in all.iter().filter(|(id, _)| memories.contains_key(id)) {
        let st = w.stack(*id, words, &memories[id]);
        sites.insert(*id, api_site(&st, &settings.rules).unwrap_or_default());
    }
    let rules = &settings.rules;
    asks.iter()
        .map(|&(id, memory)| {
            let owner = w
                .owner_of
                .get(&(id, memory))
                .cloned()
                .unwrap_or_else(|| rules.owner(&[], Some(memory)).id.clone());
            Named {
                site: sites.get(&id).cloned().unwrap_or_default(),
                owner_kind: rules
                    .owner_by_id(&owner)
                    .map(|o| o.kind.as_str().to_string()),
                owner,
            }
        })
        .collect()
}

/// The frame `st`'s site points at, as the API names it, with its callers: the frames further
/// out in the list the site is in (`python` or `frames`) that are the user's by the site rules
/// (`rules`, as [`Rules::find_site_with_kind`] judges them) and have a name, innermost first, at
/// most [`format::api::MAX_CALLERS`]. A native site's callers stop at the native frames.
fn api_site(st: &format::Stack, rules: &Rules) -> Option<format::api::Site> {
    let site = st.site.as_ref()?;
    let python = site.in_ == site_list::PYTHON;
    let len = if python {
        st.python.len()
    } else {
        st.frames.len()
    };
    let (_, mut named) = api_frame(st, python, site.index)?;
    named.callers = (site.index + 1..len)
        .filter_map(|i| api_frame(st, python, i))
        .filter(|(frame, _)| frame.function.is_some() && rules.tier(frame).is_none())
        .map(|(_, caller)| caller)
        .take(format::api::MAX_CALLERS)
        .collect();
    Some(named)
}

/// Frame `index` of `st`'s Python frames (`python`) or native ones, as the site rules see it
/// and as the API names it (without callers).
fn api_frame(
    st: &format::Stack,
    python: bool,
    index: usize,
) -> Option<(SiteFrame<'_>, format::api::Site)> {
    Some(if python {
        let f = st.python.get(index)?;
        (
            SiteFrame {
                module: "",
                function: Some(&f.function),
                file: Some(&f.file),
                line: f.line,
                offset: 0,
            },
            format::api::Site {
                file: Some(f.file.to_string()),
                line: f.line,
                function: Some(f.function.to_string()),
                module: None,
                callers: Vec::new(),
            },
        )
    } else {
        let f = st.frames.get(index)?;
        (
            SiteFrame {
                module: &f.module,
                function: f.function.as_deref(),
                file: f.file.as_deref(),
                line: f.line,
                offset: f.offset.0,
            },
            format::api::Site {
                file: f.file.as_deref().map(str::to_string),
                line: f.line,
                function: f.function.as_deref().map(str::to_string),
                module: Some(f.module.to_string()),
                callers: Vec::new(),
            },
        )
    })
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Reads the report-time settings now (at the shim's first use in the process), so that a bad
/// `CUGUARD_PLUMBING`, `CUGUARD_OWNERS` or `CUGUARD_SYMBOLIZE_SECS` gets its one line on stderr
/// then rather than when the report is written.
pub fn read_settings() {
    settings();
}

/// The report-time settings, read at first use; each problem is said once on stderr and kept
/// for the report's faults.
fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| {
        let s = Settings::from_env(|k| std::env::var(k).ok());
        for p in &s.problems {
            crate::process::diag::warn(p);
            crate::process::faults::record(p.clone());
        }
        if let Some(why) = python::declined() {
            crate::process::faults::record(format!("Python frames not read: {why}"));
        }
        s
    })
}

/// Report-time state: the symbolizer and the names of each (module, offset).
struct Writer<'a> {
    modules: &'a [Module],
    /// Each module's path, shared by its frames; then the empty path of frames in no module.
    paths: Vec<Arc<str>>,
    /// Function and file names, shared by the frames of this report.
    strings: HashSet<Arc<str>>,
    rules: &'a Rules,
    symbolizer: Option<Symbolizer>,
    /// Set when the symbolizer panicked: no more symbolization.
    broken: bool,
    names: &'a mut Names,
    /// Each module's slot in `names`, found when first needed.
    slots: Vec<Option<usize>>,
    /// Addresses this report looked up (not named by an earlier one).
    looked_up: usize,
    /// Addresses left without names because the deadline passed.
    unnamed: usize,
    codes: Vec<&'static python::Code>,
    /// The module holding the Python interpreter, when Python frames were read.
    interpreter: Option<usize>,
    /// The owner of each (stack, memory kind) asked for.
    owner_of: HashMap<(u32, &'static str), String>,
    /// The names the program gave its source files for people ([`crate::process::aliases`]).
    aliases: HashMap<String, String>,
}

impl<'a> Writer<'a> {
    fn new(modules: &'a [Module], settings: &'a Settings, names: &'a mut Names) -> Writer<'a> {
        Writer {
            modules,
            paths: modules
                .iter()
                .map(|m| Arc::from(m.path.as_str()))
                .chain([Arc::from("")])
                .collect(),
            strings: HashSet::new(),
            rules: &settings.rules,
            symbolizer: settings
                .budget
                .map(|b| Symbolizer::new(Some(Instant::now() + b))),
            broken: false,
            names,
            slots: vec![None; modules.len()],
            looked_up: 0,
            unnamed: 0,
            codes: python::codes(),
            interpreter: python::interpreter_anchor()
                .and_then(|a| stack::locate(a, modules))
                .map(|(m, _)| m),
            owner_of: HashMap::new(),
            aliases: crate::process::aliases::all(),
        }
    }

    /// The frames at `offset` in module `m`, innermost inlined first; empty when unknown.
    fn symbolize(&mut self, m: usize, offset: u64) -> Arc<[Frame]> {
        let module = &self.modules[m];
        let slot = match self.slots[m] {
            Some(i) => i,
            None => *self.slots[m].insert(self.names.slot(module)),
        };
        if let Some(f) = self.names.by_module[slot].get(&offset) {
            return f.clone();
        }
        self.looked_up += 1;
        let mut out: Vec<Frame> = Vec::new();
        let mut keep = true;
        if let Some(s) = self.symbolizer.as_mut()
            && !self.broken
            && module.path.starts_with('/')
        {
            let path = Path::new(&module.path);
            let build_id = module.build_id.as_deref();
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                s.symbolize(path, build_id, offset)
            })) {
                Ok(f) => out = f,
                Err(_) => self.broken = true,
            }
            if out.is_empty() && (s.timed_out() || self.broken) {
                // Not known to be unknown: a later report may name it.
                self.unnamed += usize::from(!self.broken);
                keep = false;
            }
        } else if self.symbolizer.is_none() {
            keep = false;
        }
        let out: Arc<[Frame]> = out.into();
        if keep && self.names.count < MAX_CACHED {
            self.names.by_module[slot].insert(offset, out.clone());
            self.names.count += 1;
        }
        out
    }

    /// One shared copy of `s`.
    fn shared(&mut self, s: Option<&str>) -> Option<Arc<str>> {
        let s = s?;
        if let Some(a) = self.strings.get(s) {
            return Some(a.clone());
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(a.clone());
        Some(a)
    }

    /// The report's stack `id` from its captured `words`: its native frames named, its Python
    /// frames decoded, its site and its owner (by the first of `memories`, the kinds of memory
    /// allocated from it; each kind's owner is noted in `owner_of`).
    fn stack(&mut self, id: u32, words: &[u64], memories: &[&'static str]) -> format::Stack {
        let (native, tail) = stack::split(words);
        // Resolve first, so that the site frames can borrow the resolved names.
        let rows = self.resolve(native);
        let unknown = Frame::default();
        let (frames, site_frames, first_interpreter) = self.native_frames(&rows, &unknown);

        let py: Vec<python::PyFrame<'_>> = tail
            .iter()
            .map(|&w| python::decode(w, &self.codes))
            .collect();
        let py_frames: Vec<SiteFrame<'_>> = py
            .iter()
            .map(|f| SiteFrame {
                module: "",
                function: Some(f.function),
                file: Some(f.file),
                line: f.line,
                offset: 0,
            })
            .collect();
        let order = call_order(&site_frames, &py, first_interpreter);
        let ordered: Vec<SiteFrame<'_>> = order
            .iter()
            .map(|s| match *s {
                Slot::Native(i) => site_frames[i],
                Slot::Python(j) => py_frames[j],
            })
            .collect();
        let site = self.site(&ordered, &order);
        let owner = owner(self.rules, &mut self.owner_of, id, &ordered, memories);
        let mixed = if py.is_empty() {
            Vec::new()
        } else {
            mixed_refs(&order)
        };
        format::Stack {
            id: id.into(),
            frames,
            python: py
                .iter()
                .map(|f| format::PyFrame {
                    file: f.file.into(),
                    line: f.line,
                    function: f.function.into(),
                    entry: Some(f.entry),
                    display: self.aliases.get(f.file).cloned(),
                })
                .collect(),
            site,
            owner: Some(owner),
            mixed,
            origin: stack::origin_of(words).map(u64::from),
        }
    }

    /// Each return address in `native`: where it lies (module, offset) and its frames.
    fn resolve(&mut self, native: &[u64]) -> Vec<ResolvedIp> {
        native
            .iter()
            .map(|&ip| {
                let at = stack::locate(ip, self.modules);
                let frames = match at {
                    Some((m, offset)) => self.symbolize(m, offset),
                    None => Arc::from([]),
                };
                (ip, at, frames)
            })
            .collect()
    }

    /// The report's native frames for `rows` (an address without names gives one frame named
    /// by `unknown`), the same frames as the site rules see them, and the index of the first
    /// of those in the interpreter's module.
    fn native_frames<'r>(
        &mut self,
        rows: &'r [ResolvedIp],
        unknown: &'r Frame,
    ) -> (Vec<format::Frame>, Vec<SiteFrame<'r>>, Option<usize>)
    where
        'a: 'r,
    {
        let modules: &'a [Module] = self.modules;
        let mut frames: Vec<format::Frame> = Vec::with_capacity(rows.len());
        let mut site_frames: Vec<SiteFrame<'r>> = Vec::with_capacity(rows.len());
        let mut first_interpreter: Option<usize> = None;
        for (ip, at, resolved) in rows {
            let (m, module, offset) = match at {
                Some((m, off)) => (*m, modules[*m].path.as_str(), *off),
                None => (modules.len(), "", *ip),
            };
            if first_interpreter.is_none() && at.is_some_and(|(m, _)| Some(m) == self.interpreter) {
                first_interpreter = Some(site_frames.len());
            }
            let list: &[Frame] = if resolved.is_empty() {
                std::slice::from_ref(unknown)
            } else {
                resolved
            };
            for f in list {
                let function = self.shared(f.function.as_deref());
                let file = self.shared(f.file.as_deref());
                frames.push(format::Frame {
                    ip: Addr(*ip),
                    module: self.paths[m].clone(),
                    offset: Addr(offset),
                    function,
                    file,
                    line: f.line,
                    inlined: Some(f.inlined),
                });
                site_frames.push(SiteFrame {
                    module,
                    function: f.function.as_deref(),
                    file: f.file.as_deref(),
                    line: f.line,
                    offset,
                });
            }
        }
        (frames, site_frames, first_interpreter)
    }

    /// The stack's site, by the site rules over its frames in call order (`ordered`, whose
    /// slots `order` gives).
    fn site(&self, ordered: &[SiteFrame<'_>], order: &[Slot]) -> Option<format::StackSite> {
        self.rules.find_site_with_kind(ordered).map(|(site, kind)| {
            let (list, index) = match order[site.index] {
                Slot::Native(i) => (site_list::FRAMES, i),
                Slot::Python(j) => (site_list::PYTHON, j),
            };
            format::StackSite {
                in_: list.into(),
                index,
                fingerprint: site.fingerprint,
                kind: Some(kind.as_str().into()),
            }
        })
    }
}

/// The frames' call order: the mixed order where the Python frames' entries are known (each
/// evaluation frame replaced by the Python frames it ran); else the native frames above the
/// interpreter (before `first_interpreter`), the Python frames, the rest.
fn call_order(
    site_frames: &[SiteFrame<'_>],
    py: &[python::PyFrame<'_>],
    first_interpreter: Option<usize>,
) -> Vec<Slot> {
    let entries: Vec<Option<bool>> = py.iter().map(|f| Some(f.entry)).collect();
    match mixed::mixed(site_frames, &entries) {
        Some(order) => order,
        None => {
            let split = first_interpreter.unwrap_or(site_frames.len());
            (0..split)
                .map(Slot::Native)
                .chain((0..py.len()).map(Slot::Python))
                .chain((split..site_frames.len()).map(Slot::Native))
                .collect()
        }
    }
}

/// The stack's owner by the owner rules over its frames in call order: for the first of
/// `memories`, or for no kind of memory when there is none; each kind's owner is noted in
/// `owner_of` under (`id`, kind).
fn owner(
    rules: &Rules,
    owner_of: &mut HashMap<(u32, &'static str), String>,
    id: u32,
    ordered: &[SiteFrame<'_>],
    memories: &[&'static str],
) -> String {
    let mut owner = None;
    for (n, memory) in memories.iter().enumerate() {
        let o = rules.owner(ordered, Some(memory)).id.clone();
        if n == 0 {
            owner = Some(o.clone());
        }
        owner_of.insert((id, memory), o);
    }
    owner.unwrap_or_else(|| rules.owner(ordered, None).id.clone())
}

/// The report's `mixed`: each frame in call order, as an index into `frames` or `python`.
fn mixed_refs(order: &[Slot]) -> Vec<format::MixedRef> {
    order
        .iter()
        .map(|s| match *s {
            Slot::Native(i) => format::MixedRef {
                native: Some(i),
                python: None,
            },
            Slot::Python(j) => format::MixedRef {
                native: None,
                python: Some(j),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::env;

    #[test]
    fn settings() {
        let s = Settings::from_env(env(&[]));
        assert_eq!(s.budget, Some(Duration::from_secs(2)));
        assert!(s.problems.is_empty());
        let s = Settings::from_env(env(&[("CUGUARD_SYMBOLIZE_SECS", "0")]));
        assert_eq!(s.budget, None);
        let s = Settings::from_env(env(&[
            ("CUGUARD_SYMBOLIZE_SECS", "soon"),
            (
                "CUGUARD_PLUMBING",
                "function:mypool::*, bogus ,module:libpool.so",
            ),
        ]));
        assert_eq!(s.budget, Some(Duration::from_secs(2)));
        assert_eq!(s.problems.len(), 2, "{:?}", s.problems);
        let rules: Vec<&str> = s.rules.site_rules().map(|(_, p)| p).collect();
        assert!(rules.contains(&"function:mypool::*"));
        assert!(rules.contains(&"module:libpool.so"));
    }

    fn py(file: &str, line: u32, function: &str) -> format::PyFrame {
        format::PyFrame {
            file: file.into(),
            line: Some(line),
            function: function.into(),
            entry: None,
            display: None,
        }
    }

    fn native(module: &str, function: Option<&str>, line: u32) -> format::Frame {
        format::Frame {
            ip: Addr(0x1000 + u64::from(line)),
            module: module.into(),
            offset: Addr(u64::from(line)),
            function: function.map(Arc::from),
            file: function.map(|_| Arc::from("/w/app.c")),
            line: function.map(|_| line),
            inlined: Some(false),
        }
    }

    fn stack_at(
        in_: &str,
        index: usize,
        frames: Vec<format::Frame>,
        python: Vec<format::PyFrame>,
    ) -> format::Stack {
        format::Stack {
            id: 1,
            frames,
            python,
            site: Some(format::StackSite {
                in_: in_.into(),
                index,
                fingerprint: String::new(),
                kind: Some("user".into()),
            }),
            owner: None,
            mixed: Vec::new(),
            origin: None,
        }
    }

    fn lines(site: &format::api::Site) -> Vec<(Option<&str>, Option<u32>)> {
        site.callers
            .iter()
            .map(|c| (c.function.as_deref(), c.line))
            .collect()
    }

    #[test]
    fn an_api_site_names_the_users_callers_innermost_first() {
        let s = Settings::from_env(env(&[("CUGUARD_PLUMBING", "file:*/gpu.py")]));
        let st = stack_at(
            site_list::PYTHON,
            1,
            Vec::new(),
            vec![
                py("/w/gpu.py", 5, "raw"),
                py("/w/app.py", 18, "alloc"),
                py("/usr/lib/python3.12/functools.py", 9, "wrapper"),
                py("/w/app.py", 27, "step"),
                py("/w/gpu.py", 7, "retry"),
                py("/w/app.py", 40, "train"),
                py("/w/app.py", 50, "main"),
                py("/w/app.py", 60, "<module>"),
                py("/w/app.py", 70, "beyond"),
            ],
        );
        let site = api_site(&st, &s.rules).unwrap();
        assert_eq!(
            (site.function.as_deref(), site.line),
            (Some("alloc"), Some(18))
        );
        // The standard library's and the plumbing's frames are not the user's; four at most.
        assert_eq!(
            lines(&site),
            [
                (Some("step"), Some(27)),
                (Some("train"), Some(40)),
                (Some("main"), Some(50)),
                (Some("<module>"), Some(60)),
            ]
        );
        assert!(
            site.callers
                .iter()
                .all(|c| c.callers.is_empty() && c.module.is_none())
        );
        assert_eq!(site.callers[0].file.as_deref(), Some("/w/app.py"));

        // The outermost frame has no callers.
        let last = stack_at(site_list::PYTHON, 8, Vec::new(), st.python.clone());
        assert!(api_site(&last, &s.rules).unwrap().callers.is_empty());
    }

    #[test]
    fn a_native_sites_callers_are_named_native_frames_of_the_user() {
        let s = Settings::from_env(env(&[]));
        let st = stack_at(
            site_list::FRAMES,
            1,
            vec![
                native("/usr/lib/libcuda.so.1", Some("cuMemAlloc_v2"), 1),
                native("/w/app", Some("alloc"), 18),
                native("/w/app", None, 20),
                native(
                    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
                    Some("std::function"),
                    3,
                ),
                native("/w/app", Some("step"), 27),
                native("/w/app", Some("main"), 40),
                native(
                    "/usr/lib/x86_64-linux-gnu/libc.so.6",
                    Some("__libc_start_main"),
                    2,
                ),
            ],
            vec![py("/w/app.py", 5, "not_in_the_native_list")],
        );
        let site = api_site(&st, &s.rules).unwrap();
        assert_eq!(site.module.as_deref(), Some("/w/app"));
        assert_eq!(
            lines(&site),
            [(Some("step"), Some(27)), (Some("main"), Some(40))]
        );
        assert_eq!(site.callers[0].module.as_deref(), Some("/w/app"));
    }
}
