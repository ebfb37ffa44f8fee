//! The JSON documents of the shim's in-process C ABI (`shim/src/api/`, documented in
//! `docs/python.md`), besides the report itself: what a closed `track` window saw
//! ([`Window`]) and the live allocations ([`LiveAllocations`]). The Python package reads them.
//!
//! ```text
//! Window:          {"peak_bytes": N, "allocated_bytes": N, "leaked_bytes": N, "leaks": [Allocation…]}
//! LiveAllocations: {"allocations": [Allocation…]}
//! Allocation:      {"address": N, "size": N, "requested": N, "api": "cuMemAlloc_v2",
//!                   "memory": "device", "device": 0|null, "thread": N, "time_ms": N,
//!                   "owner": "program"|null, "owner_kind": "program"|null,
//!                   "site": Site}
//! Site:            {"file": s|null, "line": N|null, "function": s|null, "module": s|null,
//!                   "callers": [Site…]}                 // only when some caller is named
//! FrameworkOom:    {"framework": "pytorch"|"cupy"|"jax", "device": 0, "requested": N, "device_free": N|null,
//!                   "limit": N|null, "reserved": N, "message": s|null, "cache": IdleHolder,
//!                   "read_ns": N|null}
//! ```
//!
//! [`FrameworkOom`] goes the other way: the Python package tells the shim that a framework's
//! allocator refused a request (`cuguard_framework_oom`), with its cache's figures.
//!
//! Unlike the report's, addresses here are JSON numbers (Python reads them exactly), and
//! `site` is always an object: its fields are null where nothing names the frame. `callers`
//! are the user's frames that called the site's, innermost first (the site's caller, then its
//! caller…), at most [`MAX_CALLERS`], each without callers of its own: what a program that
//! allocates through a helper of its own needs to tell the helper's callers apart.

use serde::{Deserialize, Serialize};

use crate::enums::Memory;

/// The most callers a [`Site`] names.
pub const MAX_CALLERS: usize = 4;

/// The frame an allocation is charged to, named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// Source file (a Python file for a Python site), if known.
    pub file: Option<String>,
    /// Source line, if known.
    pub line: Option<u32>,
    /// Function, if known.
    pub function: Option<String>,
    /// The module (shared library or executable) of a native site; null for a Python one.
    pub module: Option<String>,
    /// The user's frames further out on the stack, innermost first: the site's caller, its
    /// caller…, at most [`MAX_CALLERS`], by the same site rules that chose the site, in the
    /// same list (a Python site's callers are Python frames, a native site's native ones).
    /// Absent when none is known, so that readers older than it read the rest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<Site>,
}

/// One allocation the program owns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// Its address.
    pub address: u64,
    /// Bytes the program received.
    pub size: u64,
    /// Bytes it asked for.
    pub requested: u64,
    /// The entry that made it, e.g. `"cuMemAlloc_v2"`.
    pub api: String,
    /// What kind of memory.
    pub memory: Memory,
    /// Device ordinal; null when unknown.
    pub device: Option<u32>,
    /// OS thread id of the allocating thread.
    pub thread: u64,
    /// When, milliseconds since the process started.
    pub time_ms: u64,
    /// Who holds it, by the report's owner rules (`owners[].id` in a report).
    pub owner: Option<String>,
    /// That owner's kind: `program`, `framework_cache`, `library` or `driver`.
    pub owner_kind: Option<String>,
    /// Where it was made.
    pub site: Site,
}

/// What a `track` window saw when it closed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// The most device memory live while it was open, above what was live when it opened.
    pub peak_bytes: u64,
    /// Device bytes allocated while it was open.
    pub allocated_bytes: u64,
    /// Bytes of `leaks`.
    pub leaked_bytes: u64,
    /// Allocations made while it was open and still live when it closed, in the order they were
    /// made.
    pub leaks: Vec<Allocation>,
}

/// The live allocations, largest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveAllocations {
    pub allocations: Vec<Allocation>,
    /// Milliseconds since the process started, as the list was made (`cuguard_end_begin`
    /// says it: the Python side lines its clock up with the report's with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now_ms: Option<u64>,
}

/// A framework's allocator refused a request: what its out-of-memory observer was told and its
/// cache's idle memory then (`cuguard_framework_oom`; the report's `ooms[]` record it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameworkOom {
    /// Whose allocator: `pytorch`, `cupy`, `jax` or `rmm` ([`crate::frameworks`]).
    pub framework: String,
    /// Device ordinal.
    pub device: u32,
    /// Bytes asked for.
    pub requested: u64,
    /// The device's free memory, as the framework read it.
    #[serde(default)]
    pub device_free: Option<u64>,
    /// The framework's own limit on what it reserves (PyTorch's per-process memory fraction,
    /// in bytes), where one is set.
    #[serde(default)]
    pub limit: Option<u64>,
    /// What the framework had reserved from the device then.
    pub reserved: u64,
    /// The framework's message, where it has one.
    #[serde(default)]
    pub message: Option<String>,
    /// Its cache's idle memory then (`holder` `pytorch_cache`), where the framework says it
    /// (RMM's pool does not).
    #[serde(default)]
    pub cache: Option<crate::attribution::IdleHolder>,
    /// What reading the framework's figures took the package, in nanoseconds.
    #[serde(default)]
    pub read_ns: Option<u64>,
}

impl FrameworkOom {
    /// Reads the document the Python package sends.
    pub fn from_json(json: &str) -> serde_json::Result<FrameworkOom> {
        serde_json::from_str(json)
    }
}

/// What `cuguard_cache_block_frames` is asked: the start addresses of a framework's cache blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockAddresses {
    /// The blocks' start addresses.
    pub addresses: Vec<u64>,
    /// Answer each distinct stack's frames once (`BlockFrames::stacks` and `of`), not each
    /// block's: an out-of-memory observer with hundreds of tensors from a few lines waits for
    /// the answer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

impl BlockAddresses {
    /// Reads the document the Python package sends.
    pub fn from_json(json: &str) -> serde_json::Result<BlockAddresses> {
        serde_json::from_str(json)
    }
}

/// What `cuguard_cache_block_frames` answers: for each address asked, in order, the Python
/// frames (innermost first) of the stack that made the live block the hook recorded there, or
/// null where none was recorded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BlockFrames {
    /// One entry per address asked (empty when asked `shared`).
    pub frames: Vec<Option<Vec<crate::PyFrame>>>,
    /// Asked `shared`: each distinct stack's frames once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<Vec<crate::PyFrame>>,
    /// Asked `shared`: for each address, in order, its stack's index in `stacks`, or null.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub of: Vec<Option<u32>>,
}

/// `value` as one line of compact JSON.
pub fn to_vec<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these types to a Vec cannot fail (string keys, no floats).
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_reads_back_with_numbers_for_addresses() {
        let w = Window {
            peak_bytes: 3 << 20,
            allocated_bytes: 4 << 20,
            leaked_bytes: 1 << 20,
            leaks: vec![Allocation {
                address: 0xffff_7f2a_4000_0000,
                size: 1 << 20,
                requested: 1000,
                api: "cuMemAlloc_v2".into(),
                memory: Memory::Device,
                device: Some(0),
                thread: 77,
                time_ms: 5,
                owner: Some("program".into()),
                owner_kind: Some("program".into()),
                site: Site {
                    file: Some("/w/t.py".into()),
                    line: Some(12),
                    function: Some("f".into()),
                    module: None,
                    callers: vec![Site {
                        file: Some("/w/t.py".into()),
                        line: Some(30),
                        function: Some("step".into()),
                        ..Site::default()
                    }],
                },
            }],
        };
        let text = to_vec(&w);
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(
            v["leaks"][0]["address"].as_u64(),
            Some(0xffff_7f2a_4000_0000)
        );
        assert_eq!(v["leaks"][0]["memory"], "device");
        assert_eq!(v["leaks"][0]["site"]["line"], 12);
        assert_eq!(v["leaks"][0]["site"]["callers"][0]["line"], 30);
        assert_eq!(serde_json::from_slice::<Window>(&text).unwrap(), w);
    }

    #[test]
    fn a_site_without_callers_reads_and_writes_as_before() {
        let old = r#"{"file": "/w/t.py", "line": 12, "function": "f", "module": null}"#;
        let site: Site = serde_json::from_str(old).unwrap();
        assert!(site.callers.is_empty());
        let v: serde_json::Value = serde_json::from_slice(&to_vec(&site)).unwrap();
        assert_eq!(v, serde_json::from_str::<serde_json::Value>(old).unwrap());
        // The caller's own callers are not written either.
        let outer = Site {
            callers: vec![site.clone()],
            ..site.clone()
        };
        let v: serde_json::Value = serde_json::from_slice(&to_vec(&outer)).unwrap();
        assert_eq!(v["callers"][0].as_object().unwrap().len(), 4, "{v}");
    }
}
