//! The report format's `python`: what a Python program's memory was held by, at the end of its code (the final
//! report) or at a snapshot, and whether that end was seen at all.
//!
//! A Python program's code ends before the interpreter tears its modules down, and the teardown
//! frees module globals: a report written at exit alone cannot tell what the program still
//! held. cuguard's Python bootstrap (a `sitecustomize` that `cuguard run` puts on `PYTHONPATH`)
//! marks that moment through the shim's C ABI (`cuguard_end_begin`), after `__main__` and the
//! program's own `atexit` handlers, and classifies each allocation live then
//! (`cuguard_end_classify`):
//!
//! - [`HeldClass::Held`]: Python objects hold it ([`PyHolder`]: a path of references from a
//!   name; an integer whose value lies inside the allocation is a *weak* holder, as
//!   LeakSanitizer counts a pointer-sized value);
//! - [`HeldClass::Lost`]: the program's own, and nothing holds it;
//! - [`HeldClass::Cache`]: a framework cache's segment, split into [`PyBlock`]s, live (with the
//!   line that allocated each, where the framework records it) and idle;
//! - [`HeldClass::Library`]: a library's or the driver's;
//! - [`HeldClass::Unclassified`]: made while the end was looked at, or the look was cut short.
//!
//! [`Python::end`] says whether the end was recorded, and why not when it was not
//! (`python -I`, `os._exit`, an embedded interpreter). The JSON Schema is in
//! `docs/report.schema.json` (`python`).

use serde::{Deserialize, Serialize};

use crate::addr::Addr;
use crate::allocation::Allocation;
pub use crate::enums::HeldClass;
use std::sync::Arc;

/// `python`: the end of a Python program's code, and the classes of what it held.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Python {
    /// Whether the end of the program's code was recorded.
    pub end: PyEnd,
    /// What each allocation live at that moment (or at the snapshot) was held by; absent when
    /// nothing was classified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<PyView>,
}

/// `python.end`: the moment the program's code ended, or why it is not known.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PyEnd {
    /// Whether the end was recorded.
    pub recorded: bool,
    /// How the code ended: `finished` (`__main__` returned or `sys.exit`), `raised` (an uncaught
    /// exception), `interrupted` (KeyboardInterrupt), `kernel_shutdown` (a Jupyter kernel), `os_exit` (`os._exit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
    /// The uncaught exception's type, when it `raised`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception: Option<String>,
    /// When, milliseconds since the process started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<u64>,
    /// Why the end is not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// `python.view`: the live allocations at one moment, each with its class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyView {
    /// `end` (the end of the program's code) or `snapshot` (a live snapshot).
    pub at: String,
    /// When, milliseconds since the process started.
    pub time_ms: u64,
    /// Whether every holder was looked for within the walk's bounds (time, depth) and nothing
    /// cut the look short.
    pub complete: bool,
    /// How long the look took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// Lines that say what could not be told and why (a framework's history missing, the
    /// walk's time bound, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The frameworks' caches seen, with their live and idle bytes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caches: Vec<PyCache>,
    /// Every allocation live at that moment, in allocation order.
    pub allocations: Vec<PyAllocation>,
}

/// `python.view.allocations[]`: one allocation live at the moment, its record as in `leaks[]`
/// and its class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyAllocation {
    /// The allocation, as in `leaks[]` (`seq` numbers both alike).
    #[serde(flatten)]
    pub allocation: Allocation<Arc<str>>,
    /// Who holds it by the owner rules: an id of `owners[]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Freed after the moment (while the interpreter tore down), so not in `leaks[]`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub freed_after: bool,
    /// What holds it.
    pub class: HeldClass,
    /// The Python objects that hold it (for `held`), shortest path first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<PyHolder>,
    /// For a cache segment: its blocks, in address order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<PyBlock>,
}

impl std::ops::Deref for PyAllocation {
    type Target = Allocation<Arc<str>>;
    fn deref(&self) -> &Allocation<Arc<str>> {
        &self.allocation
    }
}

impl std::ops::DerefMut for PyAllocation {
    fn deref_mut(&mut self) -> &mut Allocation<Arc<str>> {
        &mut self.allocation
    }
}

/// A Python object that holds (part of) an allocation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyHolder {
    /// The steps from a name to the holder, the holder last (`["CACHE", "['weights']",
    /// "torch.Tensor (2.0 MiB)"]`); `null` when no name reaches it within the bounds.
    pub path: Option<Vec<String>>,
    /// The holder's type (`torch.Tensor`, `cupy.ndarray`, `int`).
    pub holder: String,
    /// How it was recognized: `torch`, `cupy`, `rmm`, `numba`, `cuda_array_interface`,
    /// `dlpack`, `int` (a plain integer), `ctypes` (a ctypes integer or pointer).
    pub kind: String,
    /// A weak match: a number whose value lies inside the allocation, not an object that
    /// declares device memory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub weak: bool,
    /// The first address it holds.
    pub address: Addr,
    /// Bytes it holds (1 for a weak match).
    pub bytes: u64,
}

/// A block inside a framework cache's segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyBlock {
    /// Its first address.
    pub address: Addr,
    /// Its bytes.
    pub size: u64,
    /// `live` (handed to the program) or `idle` (kept by the cache for reuse).
    pub state: String,
    /// The Python objects that hold it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<PyHolder>,
    /// Where it was allocated, innermost first, as the framework recorded it (PyTorch's
    /// memory history, cuguard's CuPy hook); empty when not known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<PyFrame>,
}

/// A framework's cache, as seen at the moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyCache {
    /// The owner id of its segments (`owners[]`), when one is known.
    pub owner: Option<String>,
    /// `pytorch`, `cupy`, `rmm` or another name.
    pub framework: String,
    /// How live was told from idle: `history` (the framework's own per-block states and
    /// allocation lines), `states` (its per-block states, no lines), `cuguard` (its per-block
    /// states, lines from cuguard's own record of its blocks), `holders` (live is what
    /// Python objects hold; the rest of its segments is idle).
    pub source: String,
    /// Bytes in its segments.
    pub segment_bytes: u64,
    /// Bytes of live blocks.
    pub live_bytes: u64,
    /// Bytes kept idle.
    pub idle_bytes: u64,
    /// What could not be told, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Each program line's live bytes in the cache over time, from the framework's history
    /// (PyTorch's): growth inside the cache follows these lines, not its segments'.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<PyCacheLine>,
}

/// `python.view.caches[].lines[]`: one program line's live bytes inside a cache over time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyCacheLine {
    /// The device.
    pub device: u32,
    /// Where its blocks were allocated, innermost first, as the framework recorded it.
    pub frames: Vec<PyFrame>,
    /// `[milliseconds since the process started, live bytes]` after each change (thinned to
    /// the last value in each stretch of time); bytes count from the first entry the history
    /// kept.
    pub samples: Vec<(u64, u64)>,
}

/// What the Python side sends the shim at the end (`cuguard_end_classify`): the classes of the
/// allocations the shim listed at `cuguard_end_begin`, by address.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    /// See [`PyView::complete`].
    pub complete: bool,
    /// See [`PyView::elapsed_ms`].
    #[serde(default)]
    pub elapsed_ms: Option<u64>,
    /// See [`PyView::notes`].
    #[serde(default)]
    pub notes: Vec<String>,
    /// See [`PyView::caches`].
    #[serde(default)]
    pub caches: Vec<PyCache>,
    /// The files of the frameworks the program imported (a module's `__file__`: `cudf`, `rmm`,
    /// `jax`…), for the report's `versions`: a pure-Python package maps no file the shim could
    /// find it by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub framework_files: Vec<String>,
    /// One entry per classified allocation.
    #[serde(default)]
    pub allocations: Vec<Classified>,
}

/// One allocation's class, as the Python side found it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Classified {
    /// The allocation's address.
    pub address: Addr,
    /// Its class.
    pub class: HeldClass,
    /// See [`PyAllocation::holders`].
    #[serde(default)]
    pub holders: Vec<PyHolder>,
    /// See [`PyAllocation::blocks`].
    #[serde(default)]
    pub blocks: Vec<PyBlock>,
}

impl Classification {
    /// Reads what the Python side sent (`cuguard_end_classify`).
    pub fn from_json(text: &str) -> Result<Classification, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// `stacks[].python[]`: one Python frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyFrame {
    /// Source file.
    pub file: String,
    /// Line number.
    pub line: Option<u32>,
    /// Function name.
    pub function: String,
    /// Whether this frame is the first one that a call of the interpreter's evaluation loop
    /// ran: the outermost Python frame of the chain that one native evaluation frame
    /// (`_PyEval_EvalFrameDefault`) was running (on CPython 3.9 and 3.10, every frame). How
    /// `mixed` splits the Python frames among the native evaluation frames. Absent in older
    /// reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<bool>,
    /// What the program calls `file` for people, when it said (`cuguard_file_alias`): IPython's
    /// `Cell In[2]` for a notebook cell's compiled file. A location is then written
    /// `Cell In[2], line 5` rather than `file:line`. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
}
