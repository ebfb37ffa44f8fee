//! The live blocks of a framework's cache that the hook recorded (PyTorch's tensors,
//! `crate::hooks::torch_blocks`), by address, each with the stack that asked for it: what names
//! a cache block's line at the end of a Python program and at an out-of-memory
//! (`crate::api::cache_blocks`), so that cuguard's package need not turn on PyTorch's own
//! memory history (0.77 µs a tensor pair on the H100, run 39) for those lines.
//!
//! A map in [`SHARDS`] shards by address, each behind its own mutex, so that threads making
//! tensors at once rarely meet; at most [`MAX_BLOCKS`] blocks are kept (one more has no line:
//! the Python side says how many blocks it could not name). A forked child starts empty.
//!
//! The timeline's sampler adds the live blocks' bytes up by (stack, device) at each tick
//! ([`live_by_stack`], off the allocation path), so that growth inside the cache follows the
//! lines that made its tensors (the report's `stack_samples.series[].cache_blocks`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use cuguard_history::bounded::Mix;

use crate::process::global;

/// Shards of the map.
const SHARDS: usize = 64;
/// The most blocks kept.
pub const MAX_BLOCKS: usize = 1 << 20;

type Fast = std::hash::BuildHasherDefault<Mix>;

/// A live block: the stack that asked for it, its size, its device.
#[derive(Clone, Copy)]
struct Block {
    stack: u32,
    size: u64,
    device: i32,
}

struct Map {
    shards: [Mutex<HashMap<u64, Block, Fast>>; SHARDS],
    len: AtomicUsize,
}

static MAP: AtomicPtr<Map> = AtomicPtr::new(std::ptr::null_mut());

fn fresh() -> Map {
    Map {
        shards: std::array::from_fn(|_| Mutex::new(HashMap::default())),
        len: AtomicUsize::new(0),
    }
}

/// The shard of `addr`: blocks are at least 512 bytes apart, and neighbours land apart.
fn shard(m: &Map, addr: u64) -> &Mutex<HashMap<u64, Block, Fast>> {
    let h = (addr >> 9) ^ (addr >> 15) ^ (addr >> 21);
    &m.shards[(h as usize) % SHARDS]
}

/// A block of `size` bytes was handed out at `addr` on `device`, asked for from `stack`.
pub fn allocated(addr: u64, size: u64, device: i32, stack: u32) {
    let m = global::get_or_create(&MAP, fresh);
    if m.len.load(Ordering::Relaxed) >= MAX_BLOCKS {
        return;
    }
    let block = Block {
        stack,
        size,
        device,
    };
    if global::lock(shard(m, addr)).insert(addr, block).is_none() {
        m.len.fetch_add(1, Ordering::Relaxed);
    }
}

/// The block at `addr` was freed.
pub fn freed(addr: u64) {
    if let Some(m) = global::get(&MAP)
        && global::lock(shard(m, addr)).remove(&addr).is_some()
    {
        m.len.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The stack of the live block at each of `addrs`; `None` where no recorded block starts there.
pub fn stacks_of(addrs: &[u64]) -> Vec<Option<u32>> {
    let Some(m) = global::get(&MAP) else {
        return vec![None; addrs.len()];
    };
    addrs
        .iter()
        .map(|&a| global::lock(shard(m, a)).get(&a).map(|b| b.stack))
        .collect()
}

/// The live blocks' bytes by (stack, device) now; nothing past [`MAX_SUMMED`] live blocks
/// (the sampler's bound: it holds each shard's lock while it adds that shard up).
pub fn live_by_stack() -> HashMap<(u32, i32), u64> {
    let mut out: HashMap<(u32, i32), u64> = HashMap::new();
    let Some(m) = global::get(&MAP) else {
        return out;
    };
    if m.len.load(Ordering::Relaxed) > MAX_SUMMED {
        return out;
    }
    for s in &m.shards {
        for b in global::lock(s).values() {
            *out.entry((b.stack, b.device)).or_default() += b.size;
        }
    }
    out
}

/// The most live blocks [`live_by_stack`] adds up.
pub const MAX_SUMMED: usize = 200_000;

/// In the child of a fork: no blocks (the parent's map's locks may be held by threads the
/// child does not have).
pub fn reset_after_fork() {
    if global::get(&MAP).is_some() {
        global::replace(&MAP, fresh());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_by_their_start_until_freed() {
        let base = 0x7f00_0000_0000u64;
        for i in 0..1000u64 {
            allocated(
                base + i * 512,
                512,
                0,
                (i % 10) as u32 + 1000 * (i / 500) as u32,
            );
        }
        freed(base + 512);
        let got = stacks_of(&[base, base + 512, base + 999 * 512, base + 1]);
        assert_eq!(got, [Some(0), None, Some(1009), None]);
        let summed = live_by_stack();
        assert_eq!(
            summed.get(&(1, 0)),
            Some(&(49 * 512)),
            "one of stack 1's blocks freed"
        );
        assert_eq!(summed.get(&(1009, 0)), Some(&(50 * 512)));
        for i in 0..1000u64 {
            freed(base + i * 512);
        }
        assert_eq!(stacks_of(&[base]), [None]);
    }
}
