//! The live-block index: an open-addressing hash map from a block's start address to its node.
//!
//! It exists because `free(addr)` must find the block from the address alone in O(1). A general
//! `HashMap` works, but this one is specialised for the job and about twice as fast: keys are
//! `u64` addresses, values `u32` node indices, one 16-byte slot per entry, linear probing, and
//! deletion by backward shifting (no tombstones, so probe sequences never rot under churn).
//!
//! # Invariants
//! - `slots.len()` is a power of two ≥ [`MIN_CAPACITY`]; `mask = slots.len() - 1`.
//! - `len` ≤ `slots.len() / 2` (load factor at most ½, so an unsuccessful probe visits ~2.5
//!   slots on average).
//! - A slot is empty when its key is [`EMPTY`] (`u64::MAX`, which is never a block start: a block
//!   holds at least one byte below `u64::MAX`).
//! - **Linear probing**: for every key `k` at slot `i`, all slots from `home(k)` up to `i`
//!   (cyclically) are occupied. Lookups rely on it to stop at the first empty slot.

#![deny(unsafe_code)]

/// The key of an empty slot.
const EMPTY: u64 = u64::MAX;
/// The smallest table.
const MIN_CAPACITY: usize = 16;

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    val: u32,
}

const EMPTY_SLOT: Slot = Slot { key: EMPTY, val: 0 };

/// A map `u64 → u32` for keys other than `u64::MAX`; see the [module documentation](self).
#[derive(Debug, Clone)]
pub(crate) struct AddrMap {
    slots: Vec<Slot>,
    mask: usize,
    len: usize,
}

/// Mixes an address into a slot index: a folded 64×64→128-bit multiply, so every address bit
/// reaches the low bits used as the index (addresses are multiples of 256 and chunk-structured).
#[inline]
fn mix(key: u64) -> u64 {
    let p = u128::from(key) * 0x9E37_79B9_7F4A_7C15_u128;
    (p as u64) ^ ((p >> 64) as u64)
}

impl AddrMap {
    /// An empty map with room for `entries` before it first grows.
    ///
    /// # Time Complexity
    /// O(entries).
    pub(crate) fn with_capacity(entries: usize) -> Self {
        let cap = entries
            .saturating_mul(2)
            .max(MIN_CAPACITY)
            .checked_next_power_of_two()
            .unwrap_or(1 << 62);
        AddrMap {
            slots: vec![EMPTY_SLOT; cap],
            mask: cap - 1,
            len: 0,
        }
    }

    /// Number of entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        mix(key) as usize & self.mask
    }

    /// The value for `key`.
    ///
    /// # Time Complexity
    /// O(1) expected.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return None;
        }
        let mut i = self.home(key);
        loop {
            let s = self.slots[i];
            if s.key == key {
                return Some(s.val);
            }
            if s.key == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Inserts or replaces `key → val`. Returns `false` (and changes nothing) for the reserved key
    /// `u64::MAX`.
    ///
    /// # Time Complexity
    /// O(1) expected; amortized when the table doubles.
    #[inline]
    pub(crate) fn insert(&mut self, key: u64, val: u32) -> bool {
        if key == EMPTY {
            return false;
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mut i = self.home(key);
        loop {
            let s = &mut self.slots[i];
            if s.key == key {
                s.val = val;
                return true;
            }
            if s.key == EMPTY {
                *s = Slot { key, val };
                self.len += 1;
                return true;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Removes `key` and returns its value.
    ///
    /// # Time Complexity
    /// O(1) expected.
    #[inline]
    pub(crate) fn remove(&mut self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return None;
        }
        let mut i = self.home(key);
        loop {
            let s = self.slots[i];
            if s.key == key {
                break;
            }
            if s.key == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask;
        }
        let val = self.slots[i].val;
        // Backward shift: pull later members of the cluster into the hole when the hole lies on
        // their probe path (between their home and their slot), so no probe path is broken.
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let s = self.slots[j];
            if s.key == EMPTY {
                break;
            }
            let home = self.home(s.key);
            // Distance from home to j, and from home to the hole, cyclically.
            if (j.wrapping_sub(home) & self.mask) >= (j.wrapping_sub(i) & self.mask) {
                self.slots[i] = s;
                i = j;
            }
        }
        self.slots[i] = EMPTY_SLOT;
        self.len -= 1;
        Some(val)
    }

    /// Doubles the table.
    #[cold]
    fn grow(&mut self) {
        let cap = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![EMPTY_SLOT; cap]);
        self.mask = cap - 1;
        for s in old {
            if s.key != EMPTY {
                let mut i = self.home(s.key);
                while self.slots[i].key != EMPTY {
                    i = (i + 1) & self.mask;
                }
                self.slots[i] = s;
            }
        }
    }

    /// Checks the linear-probing invariant and the count.
    ///
    /// # Time Complexity
    /// O(capacity).
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut n = 0;
        for (i, s) in self.slots.iter().enumerate() {
            if s.key == EMPTY {
                continue;
            }
            n += 1;
            let mut k = self.home(s.key);
            while k != i {
                if self.slots[k].key == EMPTY {
                    return Err(format!(
                        "address map: key {:#x} at slot {i} is cut off from its home",
                        s.key
                    ));
                }
                k = (k + 1) & self.mask;
            }
        }
        if n != self.len || self.len * 2 > self.slots.len() {
            return Err(format!(
                "address map: {n} entries counted, {} recorded, capacity {}",
                self.len,
                self.slots.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::AddrMap;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn reserved_key() {
        let mut m = AddrMap::with_capacity(0);
        assert!(!m.insert(u64::MAX, 1));
        assert_eq!(m.get(u64::MAX), None);
        assert_eq!(m.remove(u64::MAX), None);
        assert!(m.insert(0, 7));
        assert_eq!(m.get(0), Some(7));
        assert!(m.insert(0, 8));
        assert_eq!((m.len(), m.remove(0), m.len()), (1, Some(8), 0));
    }

    proptest! {
        #[test]
        fn agrees_with_hashmap(
            ops in prop::collection::vec((0u8..3, 0u64..512, any::<u32>()), 0..2000),
        ) {
            let mut m = AddrMap::with_capacity(0);
            let mut h = HashMap::new();
            for (op, k, v) in ops {
                // Few distinct, clustered keys: long probe runs and many wrap-arounds.
                let key = (k % 61) << 8 | (k / 61) << 40;
                match op {
                    0 => { m.insert(key, v); h.insert(key, v); }
                    1 => prop_assert_eq!(m.remove(key), h.remove(&key)),
                    _ => prop_assert_eq!(m.get(key), h.get(&key).copied()),
                }
                prop_assert_eq!(m.len(), h.len());
            }
            prop_assert!(m.check().is_ok(), "{:?}", m.check());
            for (k, v) in &h {
                prop_assert_eq!(m.get(*k), Some(*v));
            }
        }
    }
}
