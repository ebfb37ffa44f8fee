//! Hash maps keyed by device address, with a hasher of one multiply. Addresses are at least
//! 256-byte aligned, so the low bits are dropped first.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher: one multiply for a `u64`.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A set of addresses.
pub(crate) type AddrSet = HashSet<u64, BuildHasherDefault<AddrHasher>>;
/// A map from addresses.
pub(crate) type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;
