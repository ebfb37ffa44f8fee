//! Interning of the strings that repeat in a report (driver entries, modules, functions, files):
//! one shared `Arc<str>` per distinct value instead of one allocation per occurrence.
//!
//! The table is per thread, emptied at the start of each report ([`reset`]) and capped at
//! [`MAX_ENTRIES`], so a hostile report cannot grow it without bound.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use serde::de::{self, Deserializer, Visitor};

/// Most strings kept per report; later new strings are still returned, just not shared.
pub const MAX_ENTRIES: usize = 1 << 16;

/// FNV-1a: fast on the short strings interned here; no hostile-collision concern since the
/// table is capped and per report.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type Table = HashSet<Arc<str>, BuildHasherDefault<Fnv>>;

thread_local! {
    static TABLE: RefCell<Table> = RefCell::new(Table::default());
}

/// Empties this thread's table (at the start of each report).
pub fn reset() {
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if t.capacity() > 4096 {
            *t = Table::default();
        } else {
            t.clear();
        }
    });
}

/// The shared copy of `s`.
pub fn intern(s: &str) -> Arc<str> {
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        if let Some(a) = t.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        if t.len() < MAX_ENTRIES {
            t.insert(a.clone());
        }
        a
    })
}

struct InternVisitor;

impl Visitor<'_> for InternVisitor {
    type Value = Arc<str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Arc<str>, E> {
        Ok(intern(v))
    }
}

/// `deserialize_with` for `Arc<str>` fields.
pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    d.deserialize_str(InternVisitor)
}

/// `deserialize_with` for `Option<Arc<str>>` fields.
pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<str>>, D::Error> {
    struct OptVisitor;
    impl<'de> Visitor<'de> for OptVisitor {
        type Value = Option<Arc<str>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            string(d).map(Some)
        }
    }
    d.deserialize_option(OptVisitor)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    #[test]
    fn equal_strings_share_one_allocation() {
        super::reset();
        let a = super::intern("cuMemAlloc_v2");
        let b = super::intern("cuMemAlloc_v2");
        assert!(Arc::ptr_eq(&a, &b));
        super::reset();
        let c = super::intern("cuMemAlloc_v2");
        assert!(!Arc::ptr_eq(&a, &c), "a new report starts a new table");
    }
}
