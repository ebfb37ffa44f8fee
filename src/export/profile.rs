//! Memory by call stack, as profilers keep it: what `pprof` is written from.
//!
//! A [`Profile`] has value types (Go's heap profile's `inuse_space`/`inuse_objects`,
//! `alloc_space`/`alloc_objects`), locations (a native frame, with its inlined callers, in a
//! mapping; or a Python frame, a function with file and line), and samples: one stack, innermost
//! first, its values and its labels (device, owner, process, rank). [`Builder`] makes one from
//! report [`Stack`]s, frames in the mixed native and Python order cuguard's stacks have, and
//! merges samples of the same stack and labels.

use std::collections::HashMap;

use cuguard_symbolize::mixed::Slot;
use cuguard_symbolize::rules::Tier;

use crate::sites::{
    builtin_rules, file_name, is_runtime_module, mixed_order, python_site_frame, site_frame,
};
use cuguard_format::{Frame, PyFrame, Stack};

/// A value's type and unit (`inuse_space`, `bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueType {
    pub kind: &'static str,
    pub unit: &'static str,
}

/// Go's heap profile's in-use pair: bytes, then allocations.
pub const INUSE: [ValueType; 2] = [
    ValueType {
        kind: "inuse_objects",
        unit: "count",
    },
    ValueType {
        kind: "inuse_space",
        unit: "bytes",
    },
];

/// Go's heap profile's allocated pair, over the run.
pub const ALLOC: [ValueType; 2] = [
    ValueType {
        kind: "alloc_objects",
        unit: "count",
    },
    ValueType {
        kind: "alloc_space",
        unit: "bytes",
    },
];

/// A module's address range in one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Its load bias: an address less this is the offset its symbol tables use.
    pub start: u64,
    /// One past the highest address seen in it.
    pub limit: u64,
    pub file: String,
    pub build_id: String,
}

/// One function, file and line of a location.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Line {
    pub function: String,
    pub file: String,
    /// 0 when unknown.
    pub line: u32,
}

/// One place in a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// Index into [`Profile::mappings`]; `None` for a Python frame.
    pub mapping: Option<usize>,
    /// The instruction's address (0 for a Python frame).
    pub address: u64,
    /// The frame and the frames inlined into it, innermost first (pprof's order).
    pub lines: Vec<Line>,
}

/// One stack's values under one set of labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Indexes into [`Profile::locations`], innermost first.
    pub locations: Vec<usize>,
    /// One per [`Profile::types`].
    pub values: Vec<i64>,
    /// Label and value, in a fixed order.
    pub labels: Vec<(&'static str, String)>,
}

/// See the module doc.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub types: Vec<ValueType>,
    /// The type a reader shows first.
    pub default_type: &'static str,
    pub mappings: Vec<Mapping>,
    pub locations: Vec<Location>,
    pub samples: Vec<Sample>,
    /// When the (earliest) process started, nanoseconds since the Unix epoch.
    pub time_unix_ns: u64,
    /// How long the run lasted.
    pub duration_ns: u64,
    pub comments: Vec<String>,
}

/// A sample's labels: name and value, in a fixed order.
pub type Labels = Vec<(&'static str, String)>;

/// A stack's place in the builder: which process's stacks (its mappings differ) and which id.
type StackKey = (usize, Option<u64>);

/// Builds a [`Profile`] (see the module doc).
#[derive(Default)]
pub struct Builder {
    profile: Profile,
    mappings: HashMap<(String, u64), usize>,
    natives: HashMap<(usize, u64, Vec<Line>), usize>,
    pythons: HashMap<Line, usize>,
    stacks: HashMap<StackKey, Vec<usize>>,
    samples: HashMap<(Vec<usize>, Labels), usize>,
}

impl Builder {
    /// A builder of samples with these value types, `default_type` shown first.
    pub fn new(types: Vec<ValueType>, default_type: &'static str) -> Builder {
        Builder {
            profile: Profile {
                types,
                default_type,
                ..Profile::default()
            },
            ..Builder::default()
        }
    }

    /// Adds `values` (one per type) to the sample of `stack` (of process number `process`, by
    /// its id `id`; `None`: no stack) under `labels`.
    pub fn add(
        &mut self,
        process: usize,
        id: Option<u64>,
        stack: Option<&Stack>,
        labels: Vec<(&'static str, String)>,
        values: &[i64],
    ) {
        let locations = self.stack_locations(process, id, stack);
        self.add_at(locations, labels, values);
    }

    /// As [`Self::add`], with one more frame named `leaf` (no file, no line) inside the stack's
    /// innermost: bytes that are not the stack's own allocation but sit in it.
    pub fn add_under(
        &mut self,
        leaf: &str,
        process: usize,
        id: Option<u64>,
        stack: Option<&Stack>,
        labels: Vec<(&'static str, String)>,
        values: &[i64],
    ) {
        let mut locations = vec![self.placeholder(leaf)];
        locations.extend(self.stack_locations(process, id, stack));
        self.add_at(locations, labels, values);
    }

    /// The locations of `stack`, made once per process and id.
    fn stack_locations(
        &mut self,
        process: usize,
        id: Option<u64>,
        stack: Option<&Stack>,
    ) -> Vec<usize> {
        let key = (process, id.filter(|_| stack.is_some()));
        match self.stacks.get(&key) {
            Some(l) => l.clone(),
            None => {
                let l = self.locations_of(stack);
                self.stacks.insert(key, l.clone());
                l
            }
        }
    }

    /// Adds `values` to the sample of `locations` under `labels`.
    fn add_at(
        &mut self,
        locations: Vec<usize>,
        labels: Vec<(&'static str, String)>,
        values: &[i64],
    ) {
        let n = self.profile.types.len();
        let i = *self
            .samples
            .entry((locations.clone(), labels.clone()))
            .or_insert_with(|| {
                self.profile.samples.push(Sample {
                    locations,
                    values: vec![0; n],
                    labels,
                });
                self.profile.samples.len() - 1
            });
        for (v, add) in self.profile.samples[i].values.iter_mut().zip(values) {
            *v = v.saturating_add(*add);
        }
    }

    /// The profile, with its run's times and comments; `main`'s mapping first (the program's
    /// executable, which pprof names the profile by), an empty one when no frame was in it.
    pub fn finish(
        mut self,
        main: Option<&str>,
        time_unix_ns: u64,
        duration_ns: u64,
        comments: Vec<String>,
    ) -> Profile {
        if let Some(main) = main.filter(|m| !m.is_empty()) {
            let mappings = &mut self.profile.mappings;
            let at = mappings.iter().position(|m| m.file == main);
            if at != Some(0) {
                let first = match at {
                    Some(i) => mappings.remove(i),
                    None => Mapping {
                        start: 0,
                        limit: 0,
                        file: main.to_string(),
                        build_id: String::new(),
                    },
                };
                mappings.insert(0, first);
                for loc in &mut self.profile.locations {
                    if let Some(m) = &mut loc.mapping {
                        *m = match at {
                            Some(i) if *m == i => 0,
                            Some(i) if *m < i => *m + 1,
                            Some(_) => *m,
                            None => *m + 1,
                        };
                    }
                }
            }
        }
        self.profile.time_unix_ns = time_unix_ns;
        self.profile.duration_ns = duration_ns;
        self.profile.comments = comments;
        // A sample whose values were all taken back (an allocation tagged after the fact moved
        // to its tag's sample) holds nothing.
        self.profile
            .samples
            .retain(|s| s.values.iter().any(|&v| v != 0));
        // Samples in a stable order: most bytes of the last type first, then by stack.
        self.profile.samples.sort_by(|a, b| {
            b.values
                .last()
                .cmp(&a.values.last())
                .then_with(|| a.locations.cmp(&b.locations))
                .then_with(|| a.labels.cmp(&b.labels))
        });
        self.profile
    }

    /// A stack's locations, innermost first: the mixed order when it has one (else the native
    /// frames, then the Python ones), without the frames at its top that are never a site by
    /// the built-in rules (the driver's, cuguard's, allocators', ctypes' and other binding
    /// layers'), as Go's heap profiles leave out the allocator's, so that a location's own
    /// bytes are those of the code that asked; one location for a stack without frames.
    fn locations_of(&mut self, stack: Option<&Stack>) -> Vec<usize> {
        let Some(stack) = stack else {
            return vec![self.placeholder("<no stack>")];
        };
        let slots: Vec<Slot> = mixed_order(stack).unwrap_or_else(|| {
            (0..stack.frames.len())
                .map(Slot::Native)
                .chain((0..stack.python.len()).map(Slot::Python))
                .collect()
        });
        let rules = builtin_rules();
        let plumbing = |s: &Slot| match *s {
            Slot::Native(i) => {
                let f = &stack.frames[i];
                is_runtime_module(&f.module) || rules.tier(&site_frame(f)) == Some(Tier::NeverSite)
            }
            Slot::Python(j) => {
                rules.tier(&python_site_frame(&stack.python[j])) == Some(Tier::NeverSite)
            }
        };
        let skip = slots.iter().take_while(|s| plumbing(s)).count();
        let slots = if skip < slots.len() {
            &slots[skip..]
        } else {
            &slots[..]
        };
        let mut out = Vec::with_capacity(slots.len());
        let mut i = 0;
        while i < slots.len() {
            match slots[i] {
                Slot::Python(j) => {
                    out.push(self.python(&stack.python[j]));
                    i += 1;
                }
                Slot::Native(first) => {
                    // A frame inlined into the next one shares its address: one location.
                    let mut frames = vec![&stack.frames[first]];
                    while frames.last().is_some_and(|f| f.inlined == Some(true))
                        && let Some(Slot::Native(k)) = slots.get(i + frames.len())
                        && stack.frames[*k].ip == frames[0].ip
                    {
                        frames.push(&stack.frames[*k]);
                    }
                    i += frames.len();
                    out.push(self.native(&frames));
                }
            }
        }
        if out.is_empty() {
            out.push(self.placeholder("<empty stack>"));
        }
        out
    }

    fn placeholder(&mut self, name: &str) -> usize {
        self.python(&PyFrame {
            file: String::new(),
            line: None,
            function: name.to_string(),
            entry: None,
            display: None,
        })
    }

    fn python(&mut self, f: &PyFrame) -> usize {
        let line = Line {
            function: f.function.clone(),
            file: f.display.clone().unwrap_or_else(|| f.file.clone()),
            line: f.line.unwrap_or(0),
        };
        if let Some(&i) = self.pythons.get(&line) {
            return i;
        }
        self.profile.locations.push(Location {
            mapping: None,
            address: 0,
            lines: vec![line.clone()],
        });
        let i = self.profile.locations.len() - 1;
        self.pythons.insert(line, i);
        i
    }

    /// One location for a native frame and the frames inlined into it (`frames[0]` innermost).
    fn native(&mut self, frames: &[&Frame]) -> usize {
        let f = frames[0];
        let bias = f.ip.0.wrapping_sub(f.offset.0);
        let next = self.profile.mappings.len();
        let m = *self
            .mappings
            .entry((f.module.to_string(), bias))
            .or_insert(next);
        if m == next {
            self.profile.mappings.push(Mapping {
                start: bias,
                limit: bias,
                file: f.module.to_string(),
                build_id: String::new(),
            });
        }
        let mapping = &mut self.profile.mappings[m];
        mapping.limit = mapping.limit.max(f.ip.0.saturating_add(1));
        let lines: Vec<Line> = frames
            .iter()
            .map(|f| Line {
                function: f.function.as_deref().map_or_else(
                    || format!("{}+{:#x}", file_name(&f.module), f.offset.0),
                    str::to_string,
                ),
                file: f.file.as_deref().unwrap_or_default().to_string(),
                line: f.line.unwrap_or(0),
            })
            .collect();
        let key = (m, f.ip.0, lines);
        if let Some(&i) = self.natives.get(&key) {
            return i;
        }
        self.profile.locations.push(Location {
            mapping: Some(m),
            address: f.ip.0,
            lines: key.2.clone(),
        });
        let i = self.profile.locations.len() - 1;
        self.natives.insert(key, i);
        i
    }
}
