//! A free list of address ranges, coalescing and best fit, for the models that carve blocks out
//! of larger pieces (RMM's pool, PyTorch's cache): ranges by address, to join a range with the
//! free ones it touches, and by (size, address), to find the smallest that fits, the lowest
//! address among equals.
//!
//! Ranges join only when they touch: a model keeps pieces that must never join (two driver
//! allocations, two segments) apart by leaving a gap between their addresses.

use std::collections::{BTreeMap, BTreeSet};

use super::model::Idle;

/// Free ranges (address → size), indexed by size.
#[derive(Debug, Default)]
pub struct FreeList {
    by_addr: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    bytes: u64,
}

impl FreeList {
    /// Adds `[addr, addr + size)`, joined with the free ranges that end where it begins and
    /// begin where it ends; the range it became.
    pub fn insert(&mut self, mut addr: u64, mut size: u64) -> (u64, u64) {
        if size == 0 {
            return (addr, 0);
        }
        if let Some((&a, &s)) = self.by_addr.range(..addr).next_back()
            && a + s == addr
        {
            self.remove(a);
            addr = a;
            size += s;
        }
        if let Some(&s) = self.by_addr.get(&(addr + size)) {
            self.remove(addr + size);
            size += s;
        }
        self.by_addr.insert(addr, size);
        self.by_size.insert((size, addr));
        self.bytes += size;
        (addr, size)
    }

    /// Removes the range that begins at `addr`: its size, if there was one.
    pub fn remove(&mut self, addr: u64) -> Option<u64> {
        let size = self.by_addr.remove(&addr)?;
        self.by_size.remove(&(size, addr));
        self.bytes -= size;
        Some(size)
    }

    /// The smallest range of at least `size` bytes (the lowest address among equals).
    pub fn best_fit(&self, size: u64) -> Option<(u64, u64)> {
        self.by_size.range((size, 0)..).next().map(|&(s, a)| (a, s))
    }

    /// The range that ends exactly at `addr`, if any.
    pub fn ending_at(&self, addr: u64) -> Option<(u64, u64)> {
        self.by_addr
            .range(..addr)
            .next_back()
            .filter(|(a, s)| *a + *s == addr)
            .map(|(&a, &s)| (a, s))
    }

    /// The size of the range that begins at `addr`, if any.
    pub fn at(&self, addr: u64) -> Option<u64> {
        self.by_addr.get(&addr).copied()
    }

    /// The ranges in address order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_addr.iter().map(|(&a, &s)| (a, s))
    }

    /// Moves every range of `other` in, joining those that touch.
    pub fn append(&mut self, other: FreeList) {
        for (a, s) in other.by_addr {
            self.insert(a, s);
        }
    }

    /// Free bytes in all.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    /// The free ranges as idle memory.
    pub fn idle(&self) -> Idle {
        Idle {
            bytes: self.bytes,
            pieces: self.by_addr.len() as u64,
            largest: self.by_size.last().map_or(0, |&(s, _)| s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_that_touch_join_and_others_stay_apart() {
        let mut f = FreeList::default();
        f.insert(100, 10);
        f.insert(120, 10);
        assert_eq!(f.idle().pieces, 2);
        // Fills the hole: all three become one.
        assert_eq!(f.insert(110, 10), (100, 30));
        assert_eq!(f.iter().collect::<Vec<_>>(), vec![(100, 30)]);
        // A gap keeps it apart.
        f.insert(131, 5);
        assert_eq!(
            f.idle(),
            Idle {
                bytes: 35,
                pieces: 2,
                largest: 30
            }
        );
        assert_eq!(f.ending_at(130), Some((100, 30)));
        assert_eq!(f.ending_at(131), None);
    }

    #[test]
    fn best_fit_takes_the_smallest_then_the_lowest() {
        let mut f = FreeList::default();
        f.insert(1000, 64);
        f.insert(0, 32);
        f.insert(500, 32);
        assert_eq!(f.best_fit(20), Some((0, 32)));
        assert_eq!(f.best_fit(33), Some((1000, 64)));
        assert_eq!(f.best_fit(65), None);
        assert_eq!(f.remove(0), Some(32));
        assert_eq!(f.best_fit(20), Some((500, 32)));
        let mut g = FreeList::default();
        g.insert(532, 8);
        f.append(g);
        assert_eq!(f.at(500), Some(40));
        assert_eq!(f.bytes(), 104);
    }
}
