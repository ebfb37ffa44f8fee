//! A framework cache's segments as the shim's own records give them (PyTorch's, at its
//! out-of-memory observer): each live driver allocation holding live cache blocks
//! ([`super::cache_blocks`]), its blocks and the free pieces between them. At PyTorch's
//! observer every segment cached holds a live block (before it gives up, PyTorch has freed every
//! segment with none), so these are its segments; the observer reads them here instead of
//! asking PyTorch for its whole snapshot (`torch.cuda.memory_snapshot()`, the most of what the
//! card cost the refused call on the H100, run 46).

use cuguard_format::api::{CacheSegment, CacheSegmentBlock};

use super::Tracker;

/// PyTorch's small segments: 2 MiB (`kSmallBuffer`), holding blocks of at most 1 MiB.
const SMALL_SEGMENT: u64 = 2 << 20;

/// The segments on `device` that hold live cache blocks, by address; `None` where a live block
/// lies in no allocation the shim knows, or some blocks were not kept: the answer would be
/// short, and the caller asks the framework instead. `pooled` finds the block of cuguard's pool
/// that holds an address (its address and size), for the allocations the pool served.
pub fn on_device(
    t: &Tracker,
    device: i32,
    pooled: impl Fn(u64) -> Option<(u64, u64)>,
) -> Option<Vec<CacheSegment>> {
    let blocks = super::cache_blocks::on_device(device)?;
    let mut live: Vec<(u64, u64)> = t
        .live
        .snapshot()
        .into_iter()
        .filter(|(_, r)| r.device == device)
        .map(|(a, r)| (a, r.size))
        .collect();
    live.sort_unstable();
    let mut out: Vec<CacheSegment> = Vec::new();
    for (addr, size) in blocks {
        let holder = match out.last() {
            Some(s) if addr >= s.address && addr < s.address + s.total_size => None,
            _ => Some(holding(&live, addr).or_else(|| pooled(addr))?),
        };
        if let Some((base, total)) = holder {
            out.push(CacheSegment {
                device: u32::try_from(device).unwrap_or(cuguard_format::wire::UNKNOWN_DEVICE),
                address: base,
                total_size: total,
                segment_type: if total <= SMALL_SEGMENT {
                    "small"
                } else {
                    "large"
                }
                .into(),
                blocks: Vec::new(),
            });
        }
        let segment = out.last_mut()?;
        let at = covered_to(segment);
        if addr > at {
            segment.blocks.push(piece(at, addr - at, "inactive"));
        }
        segment.blocks.push(piece(addr, size, "active_allocated"));
    }
    for segment in &mut out {
        let end = segment.address + segment.total_size;
        let at = covered_to(segment);
        if end > at {
            segment.blocks.push(piece(at, end - at, "inactive"));
        }
    }
    Some(out)
}

/// Where the pieces listed so far of `segment` end.
fn covered_to(segment: &CacheSegment) -> u64 {
    segment
        .blocks
        .last()
        .map_or(segment.address, |b| b.address + b.size)
}

/// The allocation of `live` (by address) that holds `addr`.
fn holding(live: &[(u64, u64)], addr: u64) -> Option<(u64, u64)> {
    let i = live.partition_point(|(a, _)| *a <= addr);
    i.checked_sub(1)
        .map(|i| live[i])
        .filter(|(a, size)| addr < a + size)
}

fn piece(address: u64, size: u64, state: &str) -> CacheSegmentBlock {
    CacheSegmentBlock {
        address,
        size,
        state: state.into(),
    }
}
