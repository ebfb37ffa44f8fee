//! A report's leaks folded as they are parsed ([`LeakFold`]): what `cuguard summary` and
//! `cuguard check` read of them, in memory that grows with the distinct kinds of leak (stack,
//! owner, driver entry, memory kind, device, context, state), never with the number of leaks.
//!
//! The reader folds a report's leaks as it parses them when asked to
//! ([`Document::read_folding`](super::Document::read_folding),
//! [`Document::merged_process_folding`](super::Document::merged_process_folding)): the fold
//! comes back beside the report, whose own `leaks` is then empty. [`LeakFold::of`] folds a
//! report already parsed whole, the same way.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use crate::enums::{LeakState, Memory};
use crate::leak::LeakView;
use crate::model::Leak;

/// Leaks that share everything but their address, size, thread, order and time.
#[derive(Clone, Debug, PartialEq)]
pub struct LeakGroup {
    /// The group's first leak (its stack, owner, driver entry, memory kind, device, context and
    /// state are the group's).
    pub leak: Leak,
    /// Bytes of its leaks (saturating).
    pub bytes: u64,
    /// How many leaks.
    pub leaks: u64,
}

/// A report's leaks, folded: groups in the order of their first leak, the count, and the
/// largest leaks (at most the number asked for).
#[derive(Debug, Default)]
pub struct LeakFold {
    groups: Vec<LeakGroup>,
    index: HashMap<Key, usize, BuildHasherDefault<Fx>>,
    apis: Names,
    owners: Names,
    largest: BinaryHeap<Ranked>,
    keep: usize,
    count: u64,
}

/// What a group shares: stack, driver entry (index in `apis`), owner (1 + index in `owners`; 0:
/// none), memory kind, device, context, state.
type Key = (Option<u64>, u32, u32, Memory, u32, Option<u32>, LeakState);

/// A leak ranked for the largest ones: the greatest is the one to drop first.
#[derive(Debug)]
struct Ranked {
    rank: (Reverse<u64>, u64, u64),
    leak: Leak,
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.rank == other.rank
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank.cmp(&other.rank)
    }
}

impl LeakFold {
    /// An empty fold that keeps the `keep` largest leaks (largest first; ties: smallest `seq`,
    /// then earliest in the report).
    pub fn new(keep: usize) -> LeakFold {
        LeakFold {
            keep,
            ..LeakFold::default()
        }
    }

    /// Folds leaks already parsed, keeping the `keep` largest.
    pub fn of(leaks: &[Leak], keep: usize) -> LeakFold {
        let mut fold = LeakFold::new(keep);
        for leak in leaks {
            fold.add(leak.api.as_ref(), leak.owner.as_deref(), leak, || {
                leak.clone()
            });
        }
        fold
    }

    /// Forgets every leak folded (a parse that gave up), keeping what it keeps.
    pub(crate) fn clear(&mut self) {
        *self = LeakFold::new(self.keep);
    }

    /// Folds one leak as parsed.
    pub(crate) fn leak(&mut self, leak: &LeakView<'_>) {
        let owner = leak.owner.as_ref().map(|o| &*o.0);
        self.add(&leak.api.0, owner, leak, || leak.to_leak());
    }

    /// Folds one leak already whole.
    pub(crate) fn push(&mut self, leak: Leak) {
        self.add(&leak.api, leak.owner.as_deref(), &leak, || leak.clone());
    }

    /// The groups, in the order of their first leak.
    pub fn groups(&self) -> &[LeakGroup] {
        &self.groups
    }

    /// How many leaks were folded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest leaks kept, largest first (ties: smallest `seq`, then earliest).
    pub fn largest(&self) -> Vec<&Leak> {
        let mut ranked: Vec<&Ranked> = self.largest.iter().collect();
        ranked.sort_unstable();
        ranked.into_iter().map(|r| &r.leak).collect()
    }

    /// Adds one leak: `fields` gives what groups it (its `api` and `owner` come apart, as
    /// parsed), `owned` makes it whole when it is kept.
    fn add<F: LeakFields>(
        &mut self,
        api: &str,
        owner: Option<&str>,
        fields: &F,
        owned: impl FnOnce() -> Leak,
    ) {
        let index = self.count;
        self.count += 1;
        let size = fields.size();
        let rank = (Reverse(size), fields.seq(), index);
        let keep_it = self.keep > 0
            && (self.largest.len() < self.keep
                || self.largest.peek().is_some_and(|worst| rank < worst.rank));
        let api_id = self.apis.id(api);
        let owner_id = owner.map_or(0, |o| self.owners.id(o) + 1);
        let key: Key = (
            fields.stack(),
            api_id,
            owner_id,
            fields.memory().clone(),
            fields.device(),
            fields.context(),
            fields.state().clone(),
        );
        let group = self.index.get(&key).copied();
        let mut leak = (keep_it || group.is_none()).then(owned);
        match group {
            Some(i) => {
                let g = &mut self.groups[i];
                g.bytes = g.bytes.saturating_add(size);
                g.leaks += 1;
            }
            None => {
                let first = if keep_it { leak.clone() } else { leak.take() };
                if let Some(first) = first {
                    self.index.insert(key, self.groups.len());
                    self.groups.push(LeakGroup {
                        leak: first,
                        bytes: size,
                        leaks: 1,
                    });
                }
            }
        }
        if let Some(leak) = leak.filter(|_| keep_it) {
            if self.largest.len() == self.keep {
                self.largest.pop();
            }
            self.largest.push(Ranked { rank, leak });
        }
    }
}

/// Strings numbered by first appearance: looked up in a list while there are few (a report
/// names few driver entries and owners), by hash past that.
#[derive(Debug, Default)]
struct Names {
    list: Vec<String>,
    index: HashMap<String, u32, BuildHasherDefault<Fx>>,
}

impl Names {
    /// Past this many names, they are looked up by hash.
    const FEW: usize = 8;

    /// The id of `s`, added when new.
    fn id(&mut self, s: &str) -> u32 {
        if self.list.len() <= Self::FEW {
            if let Some(i) = self.list.iter().position(|n| n == s) {
                return i as u32;
            }
        } else if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = self.list.len() as u32;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), id);
        id
    }
}

/// The fields of a leak that rank and group it, parsed ([`LeakView`]) or whole ([`Leak`]).
trait LeakFields {
    fn size(&self) -> u64;
    fn seq(&self) -> u64;
    fn stack(&self) -> Option<u64>;
    fn memory(&self) -> &Memory;
    fn device(&self) -> u32;
    fn context(&self) -> Option<u32>;
    fn state(&self) -> &LeakState;
}

macro_rules! leak_fields {
    ($t:ty) => {
        impl LeakFields for $t {
            fn size(&self) -> u64 {
                self.size
            }
            fn seq(&self) -> u64 {
                self.seq
            }
            fn stack(&self) -> Option<u64> {
                self.stack
            }
            fn memory(&self) -> &Memory {
                &self.memory
            }
            fn device(&self) -> u32 {
                self.device
            }
            fn context(&self) -> Option<u32> {
                self.context
            }
            fn state(&self) -> &LeakState {
                &self.state
            }
        }
    };
}
leak_fields!(Leak);
leak_fields!(LeakView<'_>);

/// The Fx hash (rustc's): fast on the small keys of the fold and of `cuguard`'s tables of sites.
#[derive(Default)]
pub struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// Where a single report's leaks go while it is parsed.
pub(super) enum Leaks<'f> {
    /// Into the report's own `leaks`.
    Keep,
    /// Into a fold, the report's `leaks` left empty.
    Fold(&'f mut LeakFold),
}

impl Leaks<'_> {
    pub(super) fn reborrow(&mut self) -> Leaks<'_> {
        match self {
            Leaks::Keep => Leaks::Keep,
            Leaks::Fold(fold) => Leaks::Fold(fold),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::{DEFAULT_MAX_REPORT_BYTES, Document};

    fn fixtures() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
    }

    /// Folding while parsing gives what folding the parsed leaks gives, on every fixture.
    #[test]
    fn streaming_and_whole_folds_agree_on_the_fixtures() {
        let mut seen = 0;
        for entry in std::fs::read_dir(fixtures()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Ok(doc) = Document::read(&path) else {
                continue;
            };
            let whole: Vec<_> = doc.into_reports().map(Result::unwrap).collect();
            let (doc, _) = Document::read_folding(&path, DEFAULT_MAX_REPORT_BYTES, 0).unwrap();
            for (i, report) in whole.iter().enumerate() {
                for keep in [0, 1, 3, usize::MAX] {
                    let (parsed, fold) = if doc.is_merged() {
                        doc.merged_process_folding(i, keep).unwrap().unwrap()
                    } else {
                        let (doc, fold) =
                            Document::read_folding(&path, DEFAULT_MAX_REPORT_BYTES, keep).unwrap();
                        (doc.into_reports().next().unwrap().unwrap(), fold)
                    };
                    assert!(parsed.leaks.is_empty());
                    let reference = LeakFold::of(&report.leaks, keep);
                    assert_eq!(fold.groups(), reference.groups(), "{}", path.display());
                    assert_eq!(fold.count(), report.leaks.len() as u64);
                    assert_eq!(fold.largest(), reference.largest());
                    // The largest, as the summary ranked them before folds.
                    let mut all: Vec<&Leak> = report.leaks.iter().collect();
                    all.sort_by_key(|l| (Reverse(l.size), l.seq));
                    all.truncate(keep);
                    assert_eq!(fold.largest(), all);
                    let bytes = report
                        .leaks
                        .iter()
                        .map(|l| l.size)
                        .fold(0, u64::saturating_add);
                    let folded = fold
                        .groups()
                        .iter()
                        .map(|g| g.bytes)
                        .fold(0, u64::saturating_add);
                    assert_eq!(folded, bytes);
                    seen += report.leaks.len();
                }
            }
        }
        assert!(seen > 0);
    }
}
