//! The report format's `history`: where the process's history of every allocation and free is, and what it lost.
//! The history itself is binary (the `cuguard-history` crate); the report only names it.

use serde::{Deserialize, Serialize};

/// `history`: the history file(s) beside the report, and what they hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryInfo {
    /// The segment files, oldest first, by absolute path (reports of earlier builds: names in the
    /// report's directory). The command reads them only as the report's process's own.
    pub files: Vec<String>,
    /// Events written.
    pub events: u64,
    /// Bytes on disk, all segments together.
    pub bytes: u64,
    /// The bound (`CUGUARD_HISTORY`).
    pub bound_bytes: u64,
    /// Older segments let go to stay within the bound (0: the history is whole from the start).
    #[serde(default)]
    pub segments_let_go: u32,
    /// From when the kept history holds every event, milliseconds since the start (0 unless
    /// segments were let go).
    #[serde(default)]
    pub begins_ms: u64,
    /// Events that could not be recorded (a thread made them faster than they were drained), and
    /// when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<HistoryLost>,
    /// Why recording stopped before the end (a full disk), in words; absent when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Why the blocks inside a framework's cache (PyTorch's tensors) are not in the history
    /// though the framework was loaded, in words (the history then holds the cache's segments
    /// only); absent when they are recorded or no such framework was loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_blocks_unrecorded: Option<String>,
}

/// Events lost between two moments.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryLost {
    pub count: u64,
    /// Milliseconds since the start.
    pub from_ms: u64,
    pub to_ms: u64,
}
