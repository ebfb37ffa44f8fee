//! What a captured stack is made of: its id ([`StackId`]) and its words: native ips, then the
//! tagged words of its Python frames ([`TAIL_TAG`]), then, under an origin, the origin's word
//! ([`ORIGIN_TAG`]); and how a stack is read back into those parts ([`split`], [`origin_of`]).
//! Shared by the capture ([`super`]), the Python frame reader ([`super::python`]) and the
//! origins ([`super::origin`]).

/// Identifies one distinct captured stack. Dense: `0..` in first-capture order.
pub type StackId = u32;

/// The tag of the words that follow a stack's native frames: its Python frames
/// ([`super::python`]), innermost first. A word `w` is one when `w & TAIL_MASK == TAIL_TAG`; no
/// ip is (ips are user-space addresses, below 2^47).
pub const TAIL_TAG: u64 = 0xc0de_0000_0000_0000;
/// See [`TAIL_TAG`].
pub const TAIL_MASK: u64 = 0xffff_0000_0000_0000;

/// Whether a word of a stack is a Python frame rather than a native ip.
#[inline]
pub fn is_tail(word: u64) -> bool {
    word & TAIL_MASK == TAIL_TAG
}

/// The tag of the word that ends a stack captured on a thread without Python frames while an
/// origin was open ([`super::origin`]): `ORIGIN_TAG | stack id of the origin`. No ip and no
/// Python frame's word has it.
pub const ORIGIN_TAG: u64 = 0xc0df_0000_0000_0000;

/// The stack id of the origin a stack from [`super::stacks`] was captured under, if any
/// ([`super::origin`]).
pub fn origin_of(words: &[u64]) -> Option<StackId> {
    let &last = words.last()?;
    (last & TAIL_MASK == ORIGIN_TAG).then_some(last as u32)
}

/// Splits a stack from [`super::stacks`] into its native ips and its Python frames (tagged words
/// for [`super::python::decode`]); its origin's word, if any ([`origin_of`]), is in neither.
pub fn split(words: &[u64]) -> (&[u64], &[u64]) {
    let words = match origin_of(words) {
        Some(_) => &words[..words.len() - 1],
        None => words,
    };
    let n = words
        .iter()
        .position(|&w| is_tail(w))
        .unwrap_or(words.len());
    words.split_at(n)
}
