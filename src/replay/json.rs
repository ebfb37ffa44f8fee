//! `--format json`: a replay as one JSON document.
//!
//! The format is documented on [`Json`], the type that writes it.

use std::io::{self, Write};

use super::answer::Replayed;
use crate::output::{Format, Options};

/// `--format json`: the [`Replayed`] as one pretty-printed JSON document and a newline.
///
/// ```text
/// source              the PATH given
/// process             "limit[4242]"
/// question            "capacity" (--capacity) | "smallest" (--find-capacity)
/// device              the device replayed (null: the history allocates on none)
/// device_total_bytes  its memory as the report records it (null for a history file alone)
/// requests            allocations and refusals replayed; refusals: of them, the run's refusals;
///                     cache_blocks: of them, tensors of PyTorch's cache (where the history
///                     holds them), replayed in place of its cache_segments that held them
/// peak_live_bytes     the most the program held live at once
/// begins_ms, ends_ms  what the history spans
/// ends_early          why it ends before the process did (cut short, killed, the recording
///                     stopped), or null
/// notes[]             lines: events lost, an older part let go, other devices
/// allocators[]        {name, capacity_bytes, fits, peak_reserved_bytes}, by capacity then
///                     allocator; with --find-capacity capacity_bytes is the smallest that fits
///                     (null: none up to 1 PiB); where it fails also {event (the request's
///                     number, from 1), time_ms, asked_bytes, site, location|null, live_bytes,
///                     idle_bytes, idle_pieces, largest_idle_piece_bytes}
/// ```
pub struct Json;

impl Format<Replayed> for Json {
    const NAME: &'static str = "json";
    const HELP: &'static str = "One JSON document (see docs/cli.md)";

    fn write(r: &Replayed, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, r)?;
        out.write_all(b"\n")
    }
}
