//! The keys the fast path reads, each as written before its value (`"name":`), and which of
//! them an element must have.

use crate::allocation::{Allocation, Fields};
use crate::text::Text;

/// A key as written before its value: `"name":`, in at most 16 bytes, as two little-endian
/// words and the masks of the bytes it covers in each.
#[derive(Clone, Copy)]
pub(crate) struct Key {
    pub(crate) name: &'static [u8],
    pub(super) len: usize,
    pub(super) lo: u64,
    pub(super) hi: u64,
    pub(super) lo_mask: u64,
    pub(super) hi_mask: u64,
}

impl Key {
    pub(super) const fn new(name: &'static str) -> Key {
        let name = name.as_bytes();
        let len = name.len() + 3;
        assert!(len <= 16);
        let mut text = [0u8; 16];
        text[0] = b'"';
        let mut i = 0;
        while i < name.len() {
            text[i + 1] = name[i];
            i += 1;
        }
        text[name.len() + 1] = b'"';
        text[name.len() + 2] = b':';
        let (mut lo, mut hi) = (0u64, 0u64);
        let mut j = 0;
        while j < 8 {
            lo |= (text[j] as u64) << (8 * j);
            hi |= (text[j + 8] as u64) << (8 * j);
            j += 1;
        }
        let lo_mask = if len >= 8 {
            u64::MAX
        } else {
            (1 << (8 * len)) - 1
        };
        let hi_mask = if len >= 16 {
            u64::MAX
        } else if len <= 8 {
            0
        } else {
            (1 << (8 * (len - 8))) - 1
        };
        Key {
            name,
            len,
            lo,
            hi,
            lo_mask,
            hi_mask,
        }
    }
}

/// The keys of a leak's own fields, after its core's.
const LEAK_OWN_KEYS: [&str; 3] = ["state", "handle", "owner"];
/// How many keys a leak has: its core's and its own.
const LEAK_KEY_COUNT: usize = <LeakCore<'static> as Fields>::KEYS.len() + LEAK_OWN_KEYS.len();

/// The keys of `leaks[]`, in the order the shim writes them: the core's ([`Allocation`]), then
/// the leak's own.
pub(crate) const LEAK_KEYS: [Key; LEAK_KEY_COUNT] = {
    let core = <LeakCore<'static> as Fields>::KEYS;
    let mut keys = [Key::new("state"); LEAK_KEY_COUNT];
    let mut i = 0;
    while i < LEAK_KEY_COUNT {
        keys[i] = if i < core.len() {
            Key::new(core[i])
        } else {
            Key::new(LEAK_OWN_KEYS[i - core.len()])
        };
        i += 1;
    }
    keys
};
/// The keys a leak must have, by bit (all but `handle`, `owner` and the core's optional ones).
pub(super) const LEAK_REQUIRED: u32 =
    ((1 << (LEAK_KEY_COUNT - 2)) - 1) & !(<LeakCore<'static> as Fields>::OPTIONAL as u32);

/// A leak's core, borrowed.
pub(super) type LeakCore<'a> = Allocation<Text<'a>>;

/// The keys of `stacks[]` read here, in the shim's order.
pub(crate) const STACK_KEYS: [Key; 4] = [
    Key::new("id"),
    Key::new("frames"),
    Key::new("site"),
    Key::new("owner"),
];

/// The other keys of `stacks[]`: at one of them the fast path gives up on purpose (a Python
/// report's stacks, or a stack with an origin, are few and left to serde_json). With
/// [`STACK_KEYS`], every field of [`Stack`].
#[cfg_attr(
    not(test),
    allow(dead_code, reason = "the list the tests check the fast path against")
)]
pub(crate) const STACK_SLOW_KEYS: [&str; 3] = ["python", "mixed", "origin"];

/// The keys of `stacks[].site`, in the shim's order.
pub(crate) const SITE_KEYS: [Key; 4] = [
    Key::new("in"),
    Key::new("index"),
    Key::new("fingerprint"),
    Key::new("kind"),
];

/// The keys of `stacks[].frames[]`, in the shim's order.
pub(crate) const FRAME_KEYS: [Key; 7] = [
    Key::new("ip"),
    Key::new("module"),
    Key::new("offset"),
    Key::new("function"),
    Key::new("file"),
    Key::new("line"),
    Key::new("inlined"),
];
