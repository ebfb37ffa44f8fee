//! Which live allocation holds an address: the index a reader and a writer of a history keep
//! once a framework's cache blocks ([`crate::MemoryKind::CacheBlock`]) appear, to find the
//! segment each block is carved from. A history without cache blocks never builds it.

use std::collections::BTreeMap;

/// Live allocations by address (their sizes), built on the first look-up from what is live
/// then, and kept up to date afterwards.
#[derive(Default)]
pub struct Holders {
    index: Option<BTreeMap<u64, u64>>,
}

impl Holders {
    /// An allocation of `size` bytes at `addr` was made.
    pub fn made(&mut self, addr: u64, size: u64) {
        if let Some(i) = &mut self.index {
            i.insert(addr, size);
        }
    }

    /// The allocation at `addr` is gone.
    pub fn gone(&mut self, addr: u64) {
        if let Some(i) = &mut self.index {
            i.remove(&addr);
        }
    }

    /// The address of the live allocation that holds `addr`; `live` lists every live
    /// allocation's (address, size) the first time.
    pub fn holder<I: IntoIterator<Item = (u64, u64)>>(
        &mut self,
        addr: u64,
        live: impl FnOnce() -> I,
    ) -> Option<u64> {
        let i = self
            .index
            .get_or_insert_with(|| live().into_iter().collect());
        let (&base, &size) = i.range(..=addr).next_back()?;
        (addr - base < size.max(1)).then_some(base)
    }

    /// The addresses of live allocations that hold any byte of `[addr, addr + size)` (a block
    /// of a framework's expandable segment can span several mapped allocations), lowest first;
    /// `live` as in [`Self::holder`].
    pub fn overlapping<I: IntoIterator<Item = (u64, u64)>>(
        &mut self,
        addr: u64,
        size: u64,
        live: impl FnOnce() -> I,
    ) -> Vec<u64> {
        let first = self.holder(addr, live);
        let i = self.index.as_ref().expect("built by holder");
        let after = i
            .range(addr.saturating_add(1)..addr.saturating_add(size))
            .map(|(&a, _)| a);
        first.into_iter().chain(after).collect()
    }

    /// The addresses of live allocations that begin in `[base, base + size)`; `live` as in
    /// [`Self::holder`].
    pub fn within<I: IntoIterator<Item = (u64, u64)>>(
        &mut self,
        base: u64,
        size: u64,
        live: impl FnOnce() -> I,
    ) -> Vec<u64> {
        let i = self
            .index
            .get_or_insert_with(|| live().into_iter().collect());
        i.range(base..base.saturating_add(size))
            .map(|(&a, _)| a)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Holders;

    #[test]
    fn finds_the_allocation_holding_an_address_and_follows_changes() {
        let mut h = Holders::default();
        h.made(0x10, 1); // before the index exists: not kept, the first look-up lists it
        let live = || vec![(0x1000, 0x100), (0x2000, 0x10)];
        assert_eq!(h.holder(0x1080, live), Some(0x1000));
        assert_eq!(h.holder(0x1100, Vec::new), None);
        assert_eq!(h.holder(0x2000, Vec::new), Some(0x2000));
        assert_eq!(h.holder(0xfff, Vec::new), None);
        h.made(0x3000, 0x1000);
        assert_eq!(h.holder(0x3fff, Vec::new), Some(0x3000));
        h.gone(0x3000);
        assert_eq!(h.holder(0x3fff, Vec::new), None);
        assert_eq!(h.within(0x1000, 0x2000, Vec::new), vec![0x1000, 0x2000]);
        assert_eq!(h.within(0x1001, 0xfff, Vec::new), Vec::<u64>::new());
        // A block across 0x1000's end and into 0x2000: both hold part of it.
        assert_eq!(
            h.overlapping(0x10f0, 0x1000, Vec::new),
            vec![0x1000, 0x2000]
        );
        assert_eq!(h.overlapping(0x1200, 0x10, Vec::new), Vec::<u64>::new());
        assert_eq!(h.overlapping(0x2000, 0x10, Vec::new), vec![0x2000]);
    }
}
