//! The reader's fast path: a report's `leaks` and `stacks` (nearly all of its bytes) parsed by
//! hand from the document's text, the rest by serde_json.
//!
//! [`report`] walks the document's top-level object, parses `leaks[]` and `stacks[]` element by
//! element for the keys and spellings the shim writes (any order, any JSON whitespace), and
//! copies every other member into a small document that serde_json parses into the
//! [`Report`] (with empty `leaks` and `stacks`, then filled in). It handles a subset of what
//! serde_json accepts, exactly: at a string with an escape, an unknown or repeated key, a
//! missing field, a number that is not a plain integer of the field's range, another shape, an
//! element in array form, or any error, it gives up ([`GaveUp`]) so that the caller parses the
//! document with serde_json, whose result and error stand.
//!
//! [`header`] reads what the reader looks at in a document that is not a single report (a
//! merged report's `schema`, `schema_version` and `processes`) by a scan that checks the
//! document is JSON outside its processes, each of which is checked when it is parsed; it gives
//! up the same way.
//!
//! Leaks go where the caller asked ([`Leaks`]): into `Report::leaks`, or into a
//! [`LeakFold`], which is emptied again when the fast path gives up so that serde_json's pass
//! starts it afresh.
//!
//! [`leaks_range`] finds where a document's `leaks` array lies, for serde_json's pass to fold it
//! apart from the rest.
//!
//! The keys each element may have are listed here once ([`LEAK_KEYS`], [`STACK_KEYS`] and
//! [`STACK_SLOW_KEYS`], [`SITE_KEYS`], [`FRAME_KEYS`]); the tests check them against the
//! types' own serde field names and against `docs/report.schema.json`, so that a field added to
//! a leak or a stack cannot send every report down the slow path unnoticed.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::Range;
use std::sync::Arc;

use serde_json::Value;

use super::fold::{Fx, Leaks};
use crate::addr::Addr;
use crate::allocation::{Fields, Values};
use crate::enums::{LeakState, Memory};
use crate::intern;
use crate::leak::LeakView;
use crate::model::{Frame, Report, Stack, StackSite};
use crate::text::Text;
use crate::wire::UNKNOWN_DEVICE;
#[cfg(test)]
use keys::STACK_SLOW_KEYS;
use keys::{FRAME_KEYS, Key, LEAK_KEYS, LEAK_REQUIRED, LeakCore, SITE_KEYS, STACK_KEYS};

/// Why the fast path gave no report.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum GaveUp {
    /// The document is an object without a `leaks` member: serde_json cannot read it as a
    /// report either (a required field is missing, or the text is not JSON).
    NoLeaks,
    /// Anything else: serde_json decides.
    Other,
}

/// The report in `text`, its leaks where `leaks` says, when the fast path handles the whole
/// document; else why not (a fold is left empty then).
pub(super) fn report(text: &str, leaks: Leaks<'_>) -> Result<Report, GaveUp> {
    match leaks {
        Leaks::Keep => {
            let mut leaks = Vec::new();
            let mut report = parse(text, &mut |leak| leaks.push(leak.to_leak()))?;
            report.leaks = leaks;
            Ok(report)
        }
        Leaks::Fold(fold) => {
            fold.clear();
            let report = parse(text, &mut |leak| fold.leak(&leak));
            if report.is_err() {
                fold.clear();
            }
            report
        }
    }
}

/// Where the value of the document's one `leaks` member lies, when the document is an object
/// whose members can be stepped over (the values are left to serde_json to check); `None` when
/// it has no `leaks`, or two.
pub(super) fn leaks_range(text: &str) -> Option<Range<usize>> {
    let mut c = Cursor::new(text);
    let mut leaks = None;
    c.members_of_report(|c, key| {
        let start = c.i;
        c.skip_value()?;
        if key == "leaks" {
            if leaks.is_some() {
                return None;
            }
            leaks = Some(start..c.i);
        }
        Some(())
    })?;
    leaks
}

/// Parses the document, handing each leak to `leak`.
fn parse<'a>(text: &'a str, leak: &mut dyn FnMut(LeakView<'a>)) -> Result<Report, GaveUp> {
    let mut c = Cursor::new(text);
    let mut stacks = None;
    let mut leaks_at = None;
    let mut stacks_at = None;
    c.members_of_report(|c, key| {
        let start = c.i;
        match key {
            "leaks" => {
                if leaks_at.is_some() {
                    return None;
                }
                c.array(|c| {
                    leak(c.leak()?);
                    Some(())
                })?;
                leaks_at = Some(start..c.i);
            }
            "stacks" => {
                if stacks_at.is_some() {
                    return None;
                }
                let mut list = Vec::new();
                c.array(|c| {
                    list.push(c.stack()?);
                    Some(())
                })?;
                stacks = Some(list);
                stacks_at = Some(start..c.i);
            }
            _ => c.skip_value()?,
        }
        Some(())
    })
    .ok_or(GaveUp::Other)?;
    let Some(leaks_at) = leaks_at else {
        return Err(GaveUp::NoLeaks);
    };
    // Required: without it, serde_json names the missing field.
    let stacks_at = stacks_at.ok_or(GaveUp::Other)?;
    let rest = without(text, leaks_at, stacks_at);
    let mut report: Report = serde_json::from_str(&rest).map_err(|_| GaveUp::Other)?;
    report.stacks = stacks.ok_or(GaveUp::Other)?;
    Ok(report)
}

/// `text` with the two ranges (the values of `leaks` and `stacks`) each replaced by `[]`.
fn without(text: &str, a: Range<usize>, b: Range<usize>) -> String {
    let (first, second) = if a.start < b.start { (a, b) } else { (b, a) };
    let mut rest = String::with_capacity(text.len() - first.len() - second.len() + 4);
    rest.push_str(&text[..first.start]);
    rest.push_str("[]");
    rest.push_str(&text[first.end..second.start]);
    rest.push_str("[]");
    rest.push_str(&text[second.end..]);
    rest
}

/// The most a merged report may nest for [`header`] (serde_json allows 128).
const MAX_DEPTH: usize = 100;

/// What the reader looks at in a document that is not a single report: its `schema`, its
/// `schema_version` and the text of each of its `processes` (each `None` when absent or
/// `null`).
pub(super) type Header<'a> = (Option<Value>, Option<Value>, Option<Vec<&'a str>>);

/// The [`Header`] of `text`, as serde_json gives it, when the document is valid JSON outside its
/// processes and the fast path reads it exactly; `None` otherwise.
///
/// Each process is only stepped over, where it ends found as in valid JSON: the reader parses
/// every process it hands out, and that parse checks the process's text. So a document that
/// serde_json refuses may have a header here, but then one of the processes listed is itself
/// refused when parsed (`Document` then gives serde_json's complaint about the whole file).
pub(super) fn header(text: &str) -> Option<Header<'_>> {
    let mut c = Cursor::new(text);
    let (mut schema, mut version, mut processes) = (None, None, None);
    let mut processes_seen = false;
    c.members_of_report(|c, key| {
        let start = c.i;
        if key == "processes" {
            if processes_seen {
                return None;
            }
            processes_seen = true;
            if c.is_null() {
                // `"processes": null` is read as absent.
                return c.null();
            }
            let mut list = Vec::new();
            c.array(|c| {
                let at = c.i;
                c.skip_value()?;
                list.push(text.get(at..c.i)?);
                Some(())
            })?;
            processes = Some(list);
            return Some(());
        }
        c.valid_value(1)?;
        let value = text.get(start..c.i)?;
        let slot = match key {
            "schema" => &mut schema,
            "schema_version" => &mut version,
            _ => return Some(()),
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(value);
        Some(())
    })?;
    let value = |v: Option<&str>| match v {
        Some(v) => serde_json::from_str::<Option<Value>>(v).ok(),
        None => Some(None),
    };
    Some((value(schema)?, value(version)?, processes))
}

/// What [`HEX`] holds for a byte that is not a hex digit.
const NOT_HEX: u8 = 0xff;

/// Each byte's value as a hex digit, or [`NOT_HEX`].
const HEX: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => NOT_HEX,
        };
        b += 1;
    }
    table
};

/// A short string of the document as a key: hashed and compared a word at a time, for the
/// names of functions and files that frames repeat.
#[derive(Clone, Copy)]
struct Name<'a>(&'a str);

impl Name<'_> {
    /// Every byte of a string of at most 16, in two words (as wyhash reads short keys): its
    /// first and last eight bytes, overlapping; its first and last four when shorter; its
    /// first, middle and last byte when shorter still. Longer strings give their ends.
    fn words(self) -> (u64, u64) {
        let b = self.0.as_bytes();
        let n = b.len();
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        match n {
            0 => (0, 0),
            1..=3 => (
                u64::from(b[0]) | u64::from(b[n / 2]) << 8 | u64::from(b[n - 1]) << 16,
                0,
            ),
            4..=7 => (u64::from(u32_at(0)) | u64::from(u32_at(n - 4)) << 32, 0),
            _ => (u64_at(0), u64_at(n - 8)),
        }
    }
}

impl std::hash::Hash for Name<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (first, last) = self.words();
        // Mixed so that the low bits, which pick the bucket, depend on every byte.
        let h = (first ^ last.rotate_left(29) ^ self.0.len() as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        state.write_u64(h ^ h >> 32);
    }
}

impl PartialEq for Name<'_> {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        a.len() == b.len()
            && (a.len() > 16 && a == b || a.len() <= 16 && self.words() == other.words())
    }
}

impl Eq for Name<'_> {}

/// A position in the document. Every method that returns `Option` returns `None` where the fast
/// path gives up, its position then unspecified.
struct Cursor<'a> {
    text: &'a str,
    bytes: &'a [u8],
    i: usize,
    /// The last module interned (consecutive frames mostly share it).
    module: Option<Arc<str>>,
    /// A stack's frames as they are read (reused from stack to stack).
    frames: Vec<Frame>,
    /// The function and file names interned so far, by their text in the document: a program's
    /// frames name few of either, but a frame's file is seldom the one before it.
    names: HashMap<Name<'a>, Arc<str>, BuildHasherDefault<Fx>>,
}

impl<'a> Cursor<'a> {
    fn new(text: &'a str) -> Self {
        Cursor {
            text,
            bytes: text.as_bytes(),
            i: 0,
            module: None,
            frames: Vec::new(),
            names: HashMap::default(),
        }
    }

    /// The whole document as an object: `member` reads the value of each member, the cursor
    /// after the whitespace that follows its key; only whitespace may follow the object.
    fn members_of_report(
        &mut self,
        mut member: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.ws();
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
        } else {
            loop {
                let key = self.plain_string()?;
                self.ws();
                self.eat(b':')?;
                self.ws();
                member(self, key)?;
                self.ws();
                match self.next()? {
                    b',' => self.ws(),
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        self.ws();
        (self.i == self.bytes.len()).then_some(())
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        Some(b)
    }

    /// Skips JSON whitespace.
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    /// A string without escapes or control characters, borrowed.
    fn plain_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        let end = self.string_end()?;
        let s = self.text.get(start..end)?;
        self.i = end + 1;
        Some(s)
    }

    /// Where the string that the cursor is in ends (its closing quote); `None` at an escape, a
    /// control character or the end of the text.
    fn string_end(&self) -> Option<usize> {
        let i = self.special(self.i)?;
        (self.bytes[i] == b'"').then_some(i)
    }

    /// The first quote, backslash or control character from `i` on, eight bytes at a time.
    fn special(&self, mut i: usize) -> Option<usize> {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let bytes = self.bytes;
        while let Some(chunk) = bytes.get(i..i + 8) {
            let w = u64::from_le_bytes(chunk.try_into().ok()?);
            // The lowest flagged byte of each mask is exact (a borrow only flags bytes above a
            // true one), so the lowest of their union is the first quote, backslash or control.
            let quote = w ^ (ONES * u64::from(b'"'));
            let backslash = w ^ (ONES * u64::from(b'\\'));
            let found = (quote.wrapping_sub(ONES) & !quote)
                | (backslash.wrapping_sub(ONES) & !backslash)
                | (w.wrapping_sub(ONES * 0x20) & !w);
            let found = found & HIGH;
            if found != 0 {
                return Some(i + (found.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        loop {
            match *bytes.get(i)? {
                b'"' | b'\\' | 0..=0x1f => return Some(i),
                _ => i += 1,
            }
        }
    }

    /// A key, its colon and the whitespace around it, as bytes.
    fn key(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let end = self.string_end()?;
        self.i = end + 1;
        self.ws();
        self.eat(b':')?;
        self.ws();
        Some(&self.bytes[start..end])
    }

    /// `null`.
    fn null(&mut self) -> Option<()> {
        if self.bytes.get(self.i..self.i + 4)? == b"null" {
            self.i += 4;
            Some(())
        } else {
            None
        }
    }

    fn is_null(&self) -> bool {
        self.peek() == Some(b'n')
    }

    /// A non-negative integer that fits a `u64`, written without fraction or exponent.
    fn u64(&mut self) -> Option<u64> {
        let first = self.peek()?;
        if !first.is_ascii_digit() {
            return None;
        }
        self.i += 1;
        let mut v = u64::from(first - b'0');
        if first != b'0' {
            while let Some(&d) = self.bytes.get(self.i) {
                if !d.is_ascii_digit() {
                    break;
                }
                v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
                self.i += 1;
            }
        }
        match self.peek() {
            Some(b'0'..=b'9' | b'.' | b'e' | b'E') => None,
            _ => Some(v),
        }
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    fn opt_u32(&mut self) -> Option<Option<u32>> {
        if self.is_null() {
            return self.null().map(|()| None);
        }
        self.u32().map(Some)
    }

    fn opt_u64(&mut self) -> Option<Option<u64>> {
        if self.is_null() {
            return self.null().map(|()| None);
        }
        self.u64().map(Some)
    }

    /// A device ordinal: `-1` (unknown) or one below [`UNKNOWN_DEVICE`].
    fn device(&mut self) -> Option<u32> {
        if self.peek()? == b'-' {
            if self.bytes.get(self.i + 1) != Some(&b'1') {
                return None;
            }
            self.i += 2;
            return match self.peek() {
                Some(b'0'..=b'9' | b'.' | b'e' | b'E') => None,
                _ => Some(UNKNOWN_DEVICE),
            };
        }
        self.u32().filter(|&d| d != UNKNOWN_DEVICE)
    }

    /// An address string, as [`Addr::parse`] reads it: `0x` or `0X`, then hex digits that fit
    /// 64 bits (leading zeros aside).
    fn addr(&mut self) -> Option<Addr> {
        self.eat(b'"')?;
        let bytes = self.bytes;
        let mut i = self.i;
        if bytes.get(i) != Some(&b'0') || !matches!(bytes.get(i + 1), Some(b'x' | b'X')) {
            return None;
        }
        i += 2;
        let digits = i;
        // The last sixteen digits, shifted in; whether the others are zeros is told after.
        let mut value = 0u64;
        loop {
            let d = HEX[usize::from(*bytes.get(i)?)];
            if d == NOT_HEX {
                break;
            }
            value = value << 4 | u64::from(d);
            i += 1;
        }
        if bytes[i] != b'"' || i == digits {
            return None;
        }
        if i - digits > 16 && bytes[digits..i - 16].iter().any(|&b| b != b'0') {
            return None;
        }
        self.i = i + 1;
        Some(Addr(value))
    }

    fn opt_addr(&mut self) -> Option<Option<Addr>> {
        if self.is_null() {
            return self.null().map(|()| None);
        }
        self.addr().map(Some)
    }

    fn opt_string(&mut self) -> Option<Option<&'a str>> {
        if self.is_null() {
            return self.null().map(|()| None);
        }
        self.plain_string().map(Some)
    }

    fn opt_bool(&mut self) -> Option<Option<bool>> {
        let rest = self.bytes.get(self.i..)?;
        let (v, n) = if rest.starts_with(b"null") {
            (None, 4)
        } else if rest.starts_with(b"true") {
            (Some(true), 4)
        } else if rest.starts_with(b"false") {
            (Some(false), 5)
        } else {
            return None;
        };
        self.i += n;
        Some(v)
    }

    /// An array, each element (after its leading whitespace) read by `element`.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            element(self)?;
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b']' => return Some(()),
                _ => return None,
            }
        }
    }

    /// An object whose keys are among `keys`, each at most once: `member` reads the value of
    /// key `keys[k]` (the cursor after its whitespace) for each member; gives the keys seen, as
    /// bits. The key after `keys[k]` is tried first as `keys[k + 1]`, the shim's order.
    fn members(
        &mut self,
        keys: &[Key],
        mut member: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<u32> {
        self.eat(b'{')?;
        self.ws();
        let mut seen = 0u32;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(seen);
        }
        let mut next = 0;
        loop {
            let k = match keys.get(next) {
                Some(key) if self.at(key) => next,
                _ => {
                    let name = self.key()?;
                    keys.iter().position(|k| k.name == name)?
                }
            };
            let bit = 1 << k;
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            member(self, k)?;
            next = k + 1;
            self.ws();
            match self.next()? {
                b',' => self.ws(),
                b'}' => return Some(seen),
                _ => return None,
            }
        }
    }

    /// Whether the text here is `key`, its quotes and colon; if so, steps past them and the
    /// whitespace after.
    fn at(&mut self, key: &Key) -> bool {
        let Some(chunk) = self.bytes.get(self.i..self.i + 16) else {
            return false;
        };
        let (lo, hi) = chunk.split_at(8);
        let lo = u64::from_le_bytes(lo.try_into().unwrap_or_default());
        let hi = u64::from_le_bytes(hi.try_into().unwrap_or_default());
        if (lo ^ key.lo) & key.lo_mask != 0 || (hi ^ key.hi) & key.hi_mask != 0 {
            return false;
        }
        self.i += key.len;
        self.ws();
        true
    }

    /// `leaks[]`: one leak: its core's fields read by the core ([`Fields`]), its own here.
    fn leak(&mut self) -> Option<LeakView<'a>> {
        let mut allocation = LeakCore::default();
        let mut state = LeakState::LiveAtExit;
        let mut handle = None;
        let mut owner = None;
        let core = <LeakCore<'_> as Fields>::KEYS.len();
        let seen = self.members(&LEAK_KEYS, |c, k| {
            match k.checked_sub(core) {
                None => allocation.read_field(k, c)?,
                Some(0) => state = LeakState::from_name(c.plain_string()?),
                Some(1) => handle = c.opt_addr()?,
                _ => owner = c.opt_string()?,
            }
            Some(())
        })?;
        if seen & LEAK_REQUIRED != LEAK_REQUIRED {
            return None;
        }
        Some(LeakView {
            allocation,
            state,
            handle,
            owner: owner.map(|o| Text(Cow::Borrowed(o))),
        })
    }

    /// One allocation core of any declaration ([`Fields`]), all its fields required.
    fn core<C: Fields<'a>>(&mut self) -> Option<C> {
        let keys: Vec<Key> = C::KEYS.iter().map(|k| Key::new(k)).collect();
        let mut core = C::default();
        let seen = self.members(&keys, |c, k| core.read_field(k, c))?;
        let required = !C::OPTIONAL & ((1u64 << keys.len()) - 1);
        (u64::from(seen) & required == required).then_some(core)
    }

    /// `stacks[]`: one stack, without `python` or `mixed`.
    fn stack(&mut self) -> Option<Stack> {
        let mut id = 0;
        let mut frames = Vec::new();
        let mut site = None;
        let mut owner = None;
        let seen = self.members(&STACK_KEYS, |c, k| {
            match k {
                0 => id = c.u64()?,
                1 => {
                    c.array(|c| {
                        let frame = c.frame()?;
                        c.frames.push(frame);
                        Some(())
                    })?;
                    frames = c.frames.drain(..).collect();
                }
                2 => {
                    site = if c.is_null() {
                        c.null().map(|()| None)?
                    } else {
                        Some(c.site()?)
                    }
                }
                _ => owner = c.opt_string()?.map(str::to_string),
            }
            Some(())
        })?;
        if seen & 0b11 != 0b11 {
            return None;
        }
        Some(Stack {
            id,
            frames,
            python: Vec::new(),
            site,
            owner,
            mixed: Vec::new(),
            origin: None,
        })
    }

    /// `stacks[].site`, an object.
    fn site(&mut self) -> Option<StackSite> {
        let mut in_ = "";
        let mut index = 0;
        let mut fingerprint = "";
        let mut kind = None;
        let seen = self.members(&SITE_KEYS, |c, k| {
            match k {
                0 => in_ = c.plain_string()?,
                1 => index = usize::try_from(c.u64()?).ok()?,
                2 => fingerprint = c.plain_string()?,
                _ => kind = c.opt_string()?,
            }
            Some(())
        })?;
        if seen & 0b111 != 0b111 {
            return None;
        }
        Some(StackSite {
            in_: in_.to_string(),
            index,
            fingerprint: fingerprint.to_string(),
            kind: kind.map(str::to_string),
        })
    }

    /// `stacks[].frames[]`: one frame.
    fn frame(&mut self) -> Option<Frame> {
        let (mut ip, mut offset) = (Addr(0), Addr(0));
        let mut module = None;
        let mut function = None;
        let mut file = None;
        let mut line = None;
        let mut inlined = None;
        let seen = self.members(&FRAME_KEYS, |c, k| {
            match k {
                0 => ip = c.addr()?,
                1 => {
                    let s = c.plain_string()?;
                    module = Some(Self::shared(&mut c.module, s));
                }
                2 => offset = c.addr()?,
                3 => function = c.opt_string()?.map(|s| c.name(s)),
                4 => file = c.opt_string()?.map(|s| c.name(s)),
                5 => line = c.opt_u32()?,
                _ => inlined = c.opt_bool()?,
            }
            Some(())
        })?;
        // `ip`, `module`, `offset` and `line` are required.
        if seen & 0b10_0111 != 0b10_0111 {
            return None;
        }
        Some(Frame {
            ip,
            module: module?,
            offset,
            function,
            file,
            line,
            inlined,
        })
    }

    /// The interned function or file name `s`, through the names seen in this document.
    fn name(&mut self, s: &'a str) -> Arc<str> {
        self.names
            .entry(Name(s))
            .or_insert_with(|| intern::intern(s))
            .clone()
    }

    /// The interned `s`, through `last` (the last one interned in this place).
    fn shared(last: &mut Option<Arc<str>>, s: &str) -> Arc<str> {
        match last {
            Some(a) if **a == *s => a.clone(),
            _ => {
                let a = intern::intern(s);
                *last = Some(a.clone());
                a
            }
        }
    }

    /// Steps over a JSON value that serde_json would accept, as long as it nests at most
    /// [`MAX_DEPTH`] deep (from `depth`) and has no `\\u` escape; `None` otherwise.
    fn valid_value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.i += 1;
                self.valid_string_rest()
            }
            open @ (b'{' | b'[') => {
                if depth >= MAX_DEPTH {
                    return None;
                }
                let close = if open == b'{' { b'}' } else { b']' };
                self.i += 1;
                self.ws();
                if self.peek()? == close {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    if open == b'{' {
                        self.eat(b'"')?;
                        self.valid_string_rest()?;
                        self.ws();
                        self.eat(b':')?;
                        self.ws();
                    }
                    self.valid_value(depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => self.ws(),
                        b if b == close => return Some(()),
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.valid_number(),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.bytes.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// The rest of a string whose opening quote was read: no control characters, and only the
    /// escapes `\\"`, `\\\\`, `\\/`, `\\b`, `\\f`, `\\n`, `\\r` and `\\t`.
    fn valid_string_rest(&mut self) -> Option<()> {
        loop {
            let i = self.special(self.i)?;
            match self.bytes[i] {
                b'"' => {
                    self.i = i + 1;
                    return Some(());
                }
                b'\\' => match self.bytes.get(i + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i = i + 2,
                    _ => return None,
                },
                _ => return None,
            }
        }
    }

    /// A number as JSON writes it: `-`, then `0` or digits not starting with `0`, then an
    /// optional fraction and exponent.
    fn valid_number(&mut self) -> Option<()> {
        if self.peek()? == b'-' {
            self.i += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.i;
        self.digits();
        (self.i > start).then_some(())
    }

    /// Skips a value of a member the fast path does not read: serde_json parses it later, so
    /// this only has to find where it ends in a valid document.
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => {
                self.i += 1;
                self.skip_string_rest()
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.next()? {
                        b'"' => self.skip_string_rest()?,
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {
                let start = self.i;
                while let Some(&b) = self.bytes.get(self.i) {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }

    /// Skips the rest of a string whose opening quote was read.
    fn skip_string_rest(&mut self) -> Option<()> {
        loop {
            let i = self.special(self.i)?;
            match self.bytes[i] {
                b'"' => {
                    self.i = i + 1;
                    return Some(());
                }
                b'\\' => self.i = i + 2,
                _ => self.i = i + 1,
            }
        }
    }
}

impl<'a> Values<'a> for Cursor<'a> {
    fn addr(&mut self) -> Option<Addr> {
        Cursor::addr(self)
    }
    fn u64(&mut self) -> Option<u64> {
        Cursor::u64(self)
    }
    fn opt_u32(&mut self) -> Option<Option<u32>> {
        Cursor::opt_u32(self)
    }
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        Cursor::opt_u64(self)
    }
    fn device(&mut self) -> Option<u32> {
        Cursor::device(self)
    }
    fn memory(&mut self) -> Option<Memory> {
        self.plain_string().map(Memory::from_name)
    }
    fn text(&mut self) -> Option<Text<'a>> {
        self.plain_string().map(|s| Text(Cow::Borrowed(s)))
    }

    fn opt_text(&mut self) -> Option<Option<Text<'a>>> {
        if self.is_null() {
            return self.null().map(|()| None);
        }
        self.text().map(Some)
    }
}

/// One allocation core read from `text` (a JSON object) by the fast path alone, as it reads a
/// leak's; `None` where the fast path would give the text to serde_json. For the core's own
/// test: a field added to a declaration is read here as in `leaks[]`.
#[doc(hidden)]
pub fn read_core<'a, C: Fields<'a>>(text: &'a str) -> Option<C> {
    let mut c = Cursor::new(text);
    c.ws();
    let core = c.core()?;
    c.ws();
    (c.i == text.len()).then_some(core)
}

mod keys;
#[cfg(test)]
mod tests;
