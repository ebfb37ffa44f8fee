//! Compact tables for what the commands gather across thousands of reports: [`Strings`] keeps
//! each distinct string once and numbers it, [`Column`] is a vector that never moves what it
//! holds, and [`SiteTable`] numbers sites by key and keeps how each is shown.
//!
//! `cuguard summary` and `cuguard check` keep, for every distinct site of every report they
//! read, its key and a few numbers (see [`crate::summary`] and [`crate::check`]). Held as a
//! `String` per field in a hash map entry, a site cost about a kilobyte; here it costs its key's
//! bytes once, a word to find them, a few bytes of index, and the numbers, in columns indexed by
//! the key's number.
//!
//! Neither table ever copies what it holds to grow: both are made of blocks that are filled and
//! kept, so their peak memory is what they hold (plus one partly filled block), never twice
//! that while a vector moves.
//!
//! ```
//! use cuguard::compact::Strings;
//! let mut s = Strings::new();
//! let a = s.id("train.py:42");
//! assert_eq!(s.id("make_buffers"), a + 1);
//! assert_eq!(s.id("train.py:42"), a);
//! assert_eq!(s.get(a), "train.py:42");
//! assert_eq!(s.find("nowhere"), None);
//! ```

use std::borrow::Cow;
use std::hash::Hasher;

use hashbrown::HashTable;

use crate::sites::SiteKind;

/// Bytes per block of [`Strings`] (a longer string gets a block of its own size).
const STRING_BLOCK: usize = 64 << 10;

/// Items per block of a [`Column`].
const COLUMN_BLOCK: usize = 4096;

/// Distinct strings, numbered from 0 by first appearance, each held once.
///
/// Each string's bytes follow a varint of its length in a block of [`STRING_BLOCK`] bytes (a
/// longer string has a block of its own, and the blocks its length spans after the first are
/// left empty), so that a string's place is one number, block × [`STRING_BLOCK`] + offset; a
/// [`Column`] gives each string's place, and the index is a hash table of numbers alone (hashed
/// by their text). A string costs its length, about one byte, four bytes of place and a few
/// bytes of index.
#[derive(Default)]
pub struct Strings {
    blocks: Vec<Vec<u8>>,
    /// By number: where the string starts, block × [`STRING_BLOCK`] + offset.
    at: Column<u32>,
    index: HashTable<u32>,
    bytes: usize,
}

impl std::fmt::Debug for Strings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Strings")
            .field("len", &self.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Strings {
    /// An empty table.
    pub fn new() -> Strings {
        Strings::default()
    }

    /// How many distinct strings it holds.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// The number of `s`, added when new (numbers count up from 0).
    ///
    /// # Panics
    ///
    /// Past 4 GiB of distinct strings.
    pub fn id(&mut self, s: &str) -> u32 {
        let hash = hash(s);
        let Strings {
            blocks, at, index, ..
        } = self;
        let text = |id: u32| text(blocks, at, id);
        if let Some(&id) = index.find(hash, |&id| text(id) == s) {
            return id;
        }
        let id = u32::try_from(at.len()).expect("more than 2^32 distinct strings");
        index.insert_unique(hash, id, |&id| self::hash(text(id)));
        self.store(s);
        id
    }

    /// The number of `s`, if it holds it.
    pub fn find(&self, s: &str) -> Option<u32> {
        self.index.find(hash(s), |&id| self.get(id) == s).copied()
    }

    /// The string numbered `id`.
    ///
    /// # Panics
    ///
    /// When `id` was not given by [`Strings::id`].
    pub fn get(&self, id: u32) -> &str {
        text(&self.blocks, &self.at, id)
    }

    /// The bytes it holds for the strings (their text and lengths, not the index), for tests.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn store(&mut self, s: &str) {
        let mut head = [0u8; 10];
        let n = varint(s.len() as u64, &mut head);
        let need = n + s.len();
        let fits = self
            .blocks
            .last()
            .is_some_and(|b| b.capacity() - b.len() >= need);
        if !fits {
            self.blocks.push(Vec::with_capacity(need.max(STRING_BLOCK)));
        }
        let block = self.blocks.len() - 1;
        let b = &mut self.blocks[block];
        let offset = b.len();
        b.extend_from_slice(&head[..n]);
        b.extend_from_slice(s.as_bytes());
        // The blocks a long string spans past its first stay empty.
        for _ in 1..need.div_ceil(STRING_BLOCK) {
            self.blocks.push(Vec::new());
        }
        self.bytes += need;
        let place = block * STRING_BLOCK + offset;
        self.at
            .push(u32::try_from(place).expect("more than 4 GiB of distinct strings"));
    }
}

/// The text at number `id`.
fn text<'a>(blocks: &'a [Vec<u8>], at: &Column<u32>, id: u32) -> &'a str {
    let place = *at.get(id as usize) as usize;
    let block = &blocks[place / STRING_BLOCK];
    let mut i = place % STRING_BLOCK;
    let (mut len, mut shift) = (0usize, 0);
    loop {
        let byte = block[i];
        i += 1;
        len |= usize::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            break;
        }
        shift += 7;
    }
    let bytes = &block[i..i + len];
    // SAFETY: `store` is the only writer of the blocks, and writes each string as the bytes of a
    // whole `&str` after its length: these `len` bytes are exactly one of them, valid UTF-8.
    // (Checking them again cost `cuguard check` 6-13% of its CPU time over 500,000 distinct
    // sites, docs/benchmarks.md: every lookup of a string already held reads it back.)
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

/// Writes `n` as a LEB128 varint into `out`; returns its length.
fn varint(mut n: u64, out: &mut [u8; 10]) -> usize {
    let mut i = 0;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out[i] = byte;
            return i + 1;
        }
        out[i] = byte | 0x80;
        i += 1;
    }
}

/// The hash of a string: the Fx hash of its bytes, its high and low bits mixed.
fn hash(s: &str) -> u64 {
    let mut h = cuguard_format::read::fold::Fx::default();
    h.write(s.as_bytes());
    h.write_usize(s.len());
    let h = h.finish();
    (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32)
}

/// A vector in blocks of [`COLUMN_BLOCK`] items that are never moved once pushed: growing it
/// adds a block, never copies the others.
#[derive(Clone, Debug)]
pub struct Column<T> {
    blocks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Column<T> {
    fn default() -> Self {
        Column {
            blocks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Column<T> {
    /// An empty column.
    pub fn new() -> Column<T> {
        Column::default()
    }

    /// How many items it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds an item at the end (its index is the length before).
    pub fn push(&mut self, item: T) {
        if self.len.is_multiple_of(COLUMN_BLOCK) {
            self.blocks.push(Vec::with_capacity(COLUMN_BLOCK));
        }
        let last = self.blocks.len() - 1;
        self.blocks[last].push(item);
        self.len += 1;
    }

    /// Item `i`.
    ///
    /// # Panics
    ///
    /// When `i` is not less than the length.
    pub fn get(&self, i: usize) -> &T {
        &self.blocks[i / COLUMN_BLOCK][i % COLUMN_BLOCK]
    }

    /// Item `i`, to change.
    ///
    /// # Panics
    ///
    /// When `i` is not less than the length.
    pub fn get_mut(&mut self, i: usize) -> &mut T {
        &mut self.blocks[i / COLUMN_BLOCK][i % COLUMN_BLOCK]
    }

    /// The items in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.blocks.iter().flatten()
    }
}

/// Sites numbered by key, each shown as the first report that named it showed it: its
/// location, its label and its kind. Other strings the callers keep per site (owners, stack
/// entries, process names) are numbered in [`SiteTable::texts`], beside the locations.
///
/// A label is most often the key itself (a site the shim chose: `step (train.py:7)`), or the key
/// and its location (`name (file:line)`): then it takes no text of its own.
#[derive(Debug, Default)]
pub struct SiteTable {
    keys: Strings,
    texts: Strings,
    faces: Column<Face>,
    /// Labels numbered too far among the texts to be packed (see [`Face::pack`]), by site.
    far_labels: std::collections::HashMap<u32, u32>,
}

/// How a site is shown: its location (a number among the texts, or [`NO_TEXT`]) and, in one
/// word, where its label comes from and its kind (see [`Face::pack`]).
#[derive(Clone, Copy, Debug)]
struct Face {
    location: u32,
    shown: u32,
}

/// Where a site's label comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Label {
    /// The key itself.
    Key,
    /// `key (location)`.
    KeyAt,
    /// This text (its number among the texts).
    Text(u32),
}

impl Face {
    /// Texts numbered below this are kept in the word itself.
    const PACKED: u32 = 1 << 28;

    /// The label's source in bits 31-30 (0: the key, 1: key and location, 2: a text numbered in
    /// bits 27-0, 3: a text found in [`SiteTable::far_labels`]) and the kind in bits 29-28.
    fn pack(label: Label, kind: Option<SiteKind>) -> u32 {
        let kind = match kind {
            None => 0,
            Some(SiteKind::User) => 1,
            Some(SiteKind::Operation) => 2,
            Some(SiteKind::Fallback) => 3,
        };
        let label = match label {
            Label::Key => 0,
            Label::KeyAt => 1 << 30,
            Label::Text(t) if t < Face::PACKED => (2 << 30) | t,
            Label::Text(_) => 3 << 30,
        };
        label | (kind << 28)
    }

    fn kind(self) -> Option<SiteKind> {
        match (self.shown >> 28) & 3 {
            0 => None,
            1 => Some(SiteKind::User),
            2 => Some(SiteKind::Operation),
            _ => Some(SiteKind::Fallback),
        }
    }

    /// The label's source; a far text's number comes from `far`.
    fn label(self, far: impl FnOnce() -> u32) -> Label {
        match self.shown >> 30 {
            0 => Label::Key,
            1 => Label::KeyAt,
            2 => Label::Text(self.shown & (Face::PACKED - 1)),
            _ => Label::Text(far()),
        }
    }
}

/// The number that stands for no text.
const NO_TEXT: u32 = u32::MAX;

impl SiteTable {
    /// No sites yet.
    pub fn new() -> SiteTable {
        SiteTable::default()
    }

    /// How many sites.
    pub fn len(&self) -> usize {
        self.faces.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.faces.is_empty()
    }

    /// The number of the site keyed `key`, and whether it is new (then shown with `location`,
    /// `label` and `kind`; else these are not read). Numbers count up from 0.
    pub fn site(
        &mut self,
        key: &str,
        location: Option<&str>,
        label: &str,
        kind: Option<SiteKind>,
    ) -> (u32, bool) {
        let id = self.keys.id(key);
        if (id as usize) < self.faces.len() {
            return (id, false);
        }
        let label = if label == key {
            Label::Key
        } else if location.is_some_and(|l| is_key_at(label, key, l)) {
            Label::KeyAt
        } else {
            Label::Text(self.texts.id(label))
        };
        let location = location.map_or(NO_TEXT, |l| self.texts.id(l));
        if let Label::Text(t) = label
            && t >= Face::PACKED
        {
            self.far_labels.insert(id, t);
        }
        self.faces.push(Face {
            location,
            shown: Face::pack(label, kind),
        });
        (id, true)
    }

    /// The number of the site keyed `key`, if there is one.
    pub fn find(&self, key: &str) -> Option<u32> {
        self.keys.find(key)
    }

    /// Site `id`'s key.
    pub fn key(&self, id: u32) -> &str {
        self.keys.get(id)
    }

    /// Site `id`'s location.
    pub fn location(&self, id: u32) -> Option<&str> {
        let l = self.faces.get(id as usize).location;
        (l != NO_TEXT).then(|| self.texts.get(l))
    }

    /// Site `id`'s kind.
    pub fn kind(&self, id: u32) -> Option<SiteKind> {
        self.faces.get(id as usize).kind()
    }

    fn label_of(&self, id: u32) -> (Face, Label) {
        let face = *self.faces.get(id as usize);
        (face, face.label(|| self.far_labels[&id]))
    }

    /// Site `id`'s label.
    pub fn label(&self, id: u32) -> Cow<'_, str> {
        let (face, label) = self.label_of(id);
        match label {
            Label::Key => Cow::Borrowed(self.key(id)),
            Label::KeyAt => Cow::Owned(format!(
                "{} ({})",
                self.key(id),
                self.texts.get(face.location)
            )),
            Label::Text(t) => Cow::Borrowed(self.texts.get(t)),
        }
    }

    /// Whether `label` is site `id`'s label.
    pub fn label_is(&self, id: u32, label: &str) -> bool {
        let (face, source) = self.label_of(id);
        match source {
            Label::Key => label == self.key(id),
            Label::KeyAt => is_key_at(label, self.key(id), self.texts.get(face.location)),
            Label::Text(t) => label == self.texts.get(t),
        }
    }

    /// The other strings kept beside the sites.
    pub fn texts(&mut self) -> &mut Strings {
        &mut self.texts
    }

    /// Text `id` of [`SiteTable::texts`].
    pub fn text(&self, id: u32) -> &str {
        self.texts.get(id)
    }
}

/// Whether `label` is `key (location)`.
fn is_key_at(label: &str, key: &str, location: &str) -> bool {
    label.len() == key.len() + location.len() + 3
        && label.starts_with(key)
        && label[key.len()..].starts_with(" (")
        && label.ends_with(')')
        && &label[key.len() + 2..label.len() - 1] == location
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_are_shown_as_first_given() {
        let mut t = SiteTable::new();
        let (a, new) = t.site("f", Some("x.c:1"), "f (x.c:1)", None);
        assert!(new);
        let (b, _) = t.site(
            "g (y.py:2)",
            Some("y.py:2"),
            "g (y.py:2)",
            Some(SiteKind::User),
        );
        let (c, _) = t.site("h", None, "framework: h", Some(SiteKind::Fallback));
        let (d, _) = t.site("i", Some("i.c:9"), "i (i.c:10)", None);
        assert_eq!(t.site("f", None, "other", None), (a, false));
        assert_eq!(t.len(), 4);
        assert_eq!(
            (t.label(a), t.location(a), t.kind(a)),
            ("f (x.c:1)".into(), Some("x.c:1"), None)
        );
        assert_eq!(
            (t.label(b), t.kind(b)),
            ("g (y.py:2)".into(), Some(SiteKind::User))
        );
        assert_eq!((t.label(c), t.location(c)), ("framework: h".into(), None));
        assert_eq!(t.label(d), "i (i.c:10)");
        for id in [a, b, c, d] {
            assert!(t.label_is(id, &t.label(id)));
        }
        assert!(!t.label_is(a, "f") && !t.label_is(a, "f (x.c:2)") && !t.label_is(b, "g"));
        assert_eq!(t.find("h"), Some(c));
        assert_eq!(t.key(b), "g (y.py:2)");
    }

    #[test]
    fn strings_are_numbered_once_and_given_back() {
        let mut s = Strings::new();
        let words: Vec<String> = (0..20_000).map(|i| format!("site_{}", i % 7_000)).collect();
        let ids: Vec<u32> = words.iter().map(|w| s.id(w)).collect();
        assert_eq!(s.len(), 7_000);
        for (w, &id) in words.iter().zip(&ids) {
            assert_eq!(s.get(id), w);
            assert_eq!(s.find(w), Some(id));
            assert_eq!(id as usize, w[5..].parse::<usize>().unwrap());
        }
        assert_eq!(s.find("site_7000"), None);
        // Empty, long (past a block) and non-ASCII strings.
        let long = "ü".repeat(STRING_BLOCK);
        let (e, l, u) = (s.id(""), s.id(&long), s.id("Zürich ✓"));
        assert_eq!(
            (s.get(e), s.get(l), s.get(u)),
            ("", long.as_str(), "Zürich ✓")
        );
        assert_eq!(s.id(&long), l);
        assert_eq!(s.get(ids[0]), "site_0");
    }

    #[test]
    fn faces_pack_every_label_and_kind() {
        let kinds = [
            None,
            Some(SiteKind::User),
            Some(SiteKind::Operation),
            Some(SiteKind::Fallback),
        ];
        for kind in kinds {
            for label in [
                Label::Key,
                Label::KeyAt,
                Label::Text(0),
                Label::Text(Face::PACKED - 1),
                Label::Text(Face::PACKED),
            ] {
                let face = Face {
                    location: 0,
                    shown: Face::pack(label, kind),
                };
                assert_eq!(face.kind(), kind);
                assert_eq!(face.label(|| Face::PACKED), label);
            }
        }
    }

    #[test]
    fn a_column_keeps_its_items_in_order() {
        let mut c = Column::new();
        for i in 0..(3 * COLUMN_BLOCK + 5) {
            c.push(i as u64);
        }
        assert_eq!(c.len(), 3 * COLUMN_BLOCK + 5);
        *c.get_mut(COLUMN_BLOCK) += 1;
        assert_eq!(*c.get(COLUMN_BLOCK), COLUMN_BLOCK as u64 + 1);
        assert_eq!(c.iter().count(), c.len());
        assert_eq!(*c.get(c.len() - 1), c.len() as u64 - 1);
    }
}
