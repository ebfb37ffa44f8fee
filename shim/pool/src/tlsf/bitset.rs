//! A hierarchical bitset over `0..len` that answers "the largest member ≤ i" in a few word reads.
//!
//! The sub-allocator keeps one per chunk, with one bit per granule, set where a live block starts.
//! That makes [`SubAllocator::find`](super::SubAllocator::find) (interior pointers) logarithmic
//! without putting an ordered map on the alloc/free path: marking a start is a handful of bit
//! operations.
//!
//! ```text
//!   level 2:  [0000…0101]                      bit w set ⇔ level-1 word w ≠ 0
//!   level 1:  [0…01] [0…0] [1…00] …            bit w set ⇔ level-0 word w ≠ 0
//!   level 0:  [..] [..] [..] [..] … [..]       bit i set ⇔ i is a member
//! ```
//!
//! # Invariants
//! - `words[offsets[0]..offsets[1]]` is level 0 (`ceil(len / 64)` words, at least one); each level
//!   above has `ceil(words below / 64)` words; the top level has exactly one word.
//! - For every level `l > 0`: bit `w` of level `l` is set if and only if word `w` of level `l - 1`
//!   is not zero.
//! - No bit at or beyond `len` is set at level 0.
//!
//! Memory: `len / 8` bytes and a little more, allocated zeroed (so the OS maps pages lazily and an
//! untouched region costs no resident memory).

#![deny(unsafe_code)]

/// The most levels a bitset can have: 64^11 > 2^64.
const MAX_LEVELS: usize = 11;

/// A set of integers in `0..len` with O(log₆₄ len) insert, remove and predecessor queries.
///
/// See the [module documentation](self) for the layout and its invariants.
#[derive(Debug, Clone)]
pub(crate) struct PredSet {
    /// All levels, level 0 first.
    words: Vec<u64>,
    /// `offsets[l]` is the index in `words` of level `l`'s first word; `offsets[depth]` is
    /// `words.len()`.
    offsets: [usize; MAX_LEVELS + 1],
    /// Number of levels (at least 1).
    depth: usize,
    /// Members are `< len`.
    len: u64,
}

impl PredSet {
    /// An empty set able to hold `0..len`.
    ///
    /// Returns `None` instead of aborting when the host cannot provide the memory.
    ///
    /// # Time Complexity
    /// O(len / 64) to zero the words (done by the OS lazily for large sets).
    pub(crate) fn new(len: u64) -> Option<Self> {
        let mut offsets = [0usize; MAX_LEVELS + 1];
        let mut depth = 0;
        let mut total: usize = 0;
        let mut n = len.div_ceil(64).max(1);
        loop {
            offsets[depth] = total;
            // `n` words on this level; a `usize` that overflows could not be allocated anyway.
            total = total.checked_add(usize::try_from(n).ok()?)?;
            depth += 1;
            if n == 1 || depth == MAX_LEVELS {
                break;
            }
            n = n.div_ceil(64);
        }
        offsets[depth] = total;
        // Probe that the host can provide the memory (so an absurd size fails instead of aborting),
        // then allocate it zeroed: `vec![0; n]` asks for zeroed pages, which the OS maps lazily.
        let mut probe = Vec::<u64>::new();
        probe.try_reserve_exact(total).ok()?;
        drop(probe);
        let words = vec![0u64; total];
        Some(PredSet {
            words,
            offsets,
            depth,
            len,
        })
    }

    /// The exclusive upper bound on members.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Adds `i` (which must be `< len`; larger values are ignored).
    ///
    /// # Time Complexity
    /// O(log₆₄ len); usually one word write.
    #[inline]
    pub(crate) fn insert(&mut self, i: u64) {
        if i >= self.len {
            return;
        }
        // Level 0 starts at word 0; most inserts stop there (the word was already non-zero).
        let w = (i >> 6) as usize;
        let word = self.words[w];
        self.words[w] = word | (1u64 << (i & 63));
        if word == 0 {
            self.mark_up(i >> 6);
        }
    }

    /// Sets the summary bits above level 0 for level-0 word `w`, which just became non-zero.
    fn mark_up(&mut self, w: u64) {
        let mut i = w;
        for level in 1..self.depth {
            let slot = self.offsets[level] + (i >> 6) as usize;
            let word = self.words[slot];
            self.words[slot] = word | (1u64 << (i & 63));
            if word != 0 {
                return;
            }
            i >>= 6;
        }
    }

    /// Removes `i` if present.
    ///
    /// # Time Complexity
    /// O(log₆₄ len); usually one word write.
    #[inline]
    pub(crate) fn remove(&mut self, i: u64) {
        if i >= self.len {
            return;
        }
        let w = (i >> 6) as usize;
        let word = self.words[w] & !(1u64 << (i & 63));
        self.words[w] = word;
        if word == 0 {
            self.clear_up(i >> 6);
        }
    }

    /// Clears the summary bits above level 0 for level-0 word `w`, which just became zero.
    fn clear_up(&mut self, w: u64) {
        let mut i = w;
        for level in 1..self.depth {
            let slot = self.offsets[level] + (i >> 6) as usize;
            let word = self.words[slot] & !(1u64 << (i & 63));
            self.words[slot] = word;
            if word != 0 {
                return;
            }
            i >>= 6;
        }
    }

    /// Whether `i` is a member.
    ///
    /// # Time Complexity
    /// O(1).
    #[cfg(test)]
    pub(crate) fn contains(&self, i: u64) -> bool {
        i < self.len && self.words[(i >> 6) as usize] & (1u64 << (i & 63)) != 0
    }

    /// The largest member `≤ i`, if any.
    ///
    /// # Time Complexity
    /// O(log₆₄ len): at most one word per level going up and one per level coming down.
    pub(crate) fn pred(&self, i: u64) -> Option<u64> {
        let mut i = i.min(self.len.checked_sub(1)?);
        let mut level = 0;
        while level < self.depth {
            let w = i >> 6;
            // Bits 0..=i%64 of word w.
            let masked =
                self.words[self.offsets[level] + w as usize] & (u64::MAX >> (63 - (i & 63)));
            if masked != 0 {
                let mut j = (w << 6) | u64::from(63 - masked.leading_zeros());
                // Walk down, always taking the highest set bit.
                while level > 0 {
                    level -= 1;
                    let word = self.words[self.offsets[level] + j as usize];
                    j = (j << 6) | u64::from(63 - word.leading_zeros());
                }
                return Some(j);
            }
            if w == 0 {
                return None;
            }
            i = w - 1;
            level += 1;
        }
        None
    }

    /// Number of members.
    ///
    /// # Time Complexity
    /// O(len / 64).
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.words[..self.offsets[1]]
            .iter()
            .map(|w| u64::from(w.count_ones()))
            .sum()
    }

    /// Checks the summary levels against the level below and the bits past `len`.
    ///
    /// # Time Complexity
    /// O(len / 64).
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        for level in 1..self.depth {
            let below = &self.words[self.offsets[level - 1]..self.offsets[level]];
            let this = &self.words[self.offsets[level]..self.offsets[level + 1]];
            if this.len() != below.len().div_ceil(64) {
                return Err(format!(
                    "bitset level {level} has the wrong number of words"
                ));
            }
            for (w, word) in below.iter().enumerate() {
                let bit = this[w >> 6] & (1u64 << (w & 63)) != 0;
                if bit != (*word != 0) {
                    return Err(format!(
                        "bitset level {level} bit {w} disagrees with the level below"
                    ));
                }
            }
            if !below.len().is_multiple_of(64) && this[this.len() - 1] >> (below.len() % 64) != 0 {
                return Err(format!(
                    "bitset level {level} has a bit past its level below"
                ));
            }
        }
        let level0 = &self.words[..self.offsets[1]];
        if level0.len() as u64 != self.len.div_ceil(64).max(1) {
            return Err("bitset level 0 has the wrong number of words".into());
        }
        let last = level0[level0.len() - 1];
        let used = self.len - (level0.len() as u64 - 1) * 64;
        if used < 64 && last >> used != 0 {
            return Err(format!("bitset has a member past len {}", self.len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::PredSet;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn empty_and_tiny() {
        let s = PredSet::new(0).unwrap();
        assert_eq!(s.pred(0), None);
        let mut s = PredSet::new(1).unwrap();
        assert_eq!(s.pred(5), None);
        s.insert(0);
        assert_eq!(s.pred(0), Some(0));
        assert_eq!(s.pred(u64::MAX), Some(0));
        s.insert(1); // out of range: ignored
        assert_eq!(s.count(), 1);
        s.check().unwrap();
    }

    #[test]
    fn crosses_levels() {
        let len = 64 * 64 * 64 + 5;
        let mut s = PredSet::new(len).unwrap();
        s.insert(3);
        s.insert(len - 1);
        assert_eq!(s.pred(len - 2), Some(3));
        assert_eq!(s.pred(len - 1), Some(len - 1));
        assert_eq!(s.pred(2), None);
        s.remove(3);
        assert_eq!(s.pred(len - 2), None);
        s.check().unwrap();
    }

    proptest! {
        #[test]
        fn agrees_with_btreeset(
            len in 1u64..20_000,
            ops in prop::collection::vec((any::<bool>(), any::<u64>()), 0..200),
        ) {
            let mut s = PredSet::new(len).unwrap();
            let mut m = BTreeSet::new();
            for (ins, x) in ops {
                let i = x % len;
                if ins { s.insert(i); m.insert(i); } else { s.remove(i); m.remove(&i); }
                let q = x.rotate_left(17) % len;
                prop_assert_eq!(s.pred(q), m.range(..=q).next_back().copied());
                prop_assert_eq!(s.contains(i), m.contains(&i));
            }
            prop_assert_eq!(s.count(), m.len() as u64);
            prop_assert!(s.check().is_ok());
        }
    }
}
