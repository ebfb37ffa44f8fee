//! A minimal pickle writer: protocol 4, and only the opcodes that both Python's unpickler and the
//! JavaScript unpickler of PyTorch's memory viewer (`unpickle` in `torch/utils/viz/MemoryViz.js`)
//! read.
//!
//! That unpickler accepts protocol 2 to 4 (it refuses 5) and knows these opcodes among others:
//! `PROTO`, `STOP`, `EMPTY_DICT`, `EMPTY_LIST`, `MARK`, `SETITEMS`, `APPENDS`, `BININT1`,
//! `BININT2`, `BININT`, `LONG1` (at most 8 bytes, read as a signed 64-bit integer and then a
//! JavaScript number), `SHORT_BINUNICODE`, `BINUNICODE` (not `BINUNICODE8`), `NEWTRUE`,
//! `NEWFALSE`, `TUPLE2`, `MEMOIZE`, `BINGET`, `LONG_BINGET`. This writer uses those and no
//! other; it writes no `FRAME` (optional in protocol 4). Containers are filled in batches of at
//! most [`BATCH`] items, as Python's pickler does: the viewer spreads a batch into a function
//! call's arguments, which a JavaScript engine limits.
//!
//! The caller writes the value depth-first: open a container, write its items, close it.
//!
//! ```ignore
//! let mut p = Pickler::new();
//! p.begin_dict();
//! p.str("a");
//! p.int(1);
//! p.end();
//! let bytes = p.finish(); // pickle.loads(bytes) == {"a": 1}
//! ```

use std::collections::HashMap;

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const EMPTY_DICT: u8 = b'}';
const EMPTY_LIST: u8 = b']';
const MARK: u8 = b'(';
const SETITEMS: u8 = b'u';
const APPENDS: u8 = b'e';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BININT: u8 = b'J';
const LONG1: u8 = 0x8a;
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const TUPLE2: u8 = 0x86;
const MEMOIZE: u8 = 0x94;
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';

/// The most items one `MARK … APPENDS` or `MARK … SETITEMS` holds (Python's `_BATCHSIZE`).
pub const BATCH: usize = 1000;

/// A value kept in the memo by [`Pickler::memoize`], written again by [`Pickler::get`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memo(u32);

/// Writes one pickled value.
pub struct Pickler {
    out: Vec<u8>,
    /// The memo's size: `MEMOIZE` stores at this index, in Python and in the viewer alike.
    memo_len: u32,
    /// Strings memoized by [`Pickler::key`].
    keys: HashMap<&'static str, Memo>,
    /// The containers open, innermost last.
    open: Vec<Open>,
}

/// A container being written.
struct Open {
    /// `APPENDS` or `SETITEMS`.
    fill: u8,
    /// Values an item takes: 1 in a list, 2 (key and value) in a dict.
    per: usize,
    /// Values in the current batch (since its `MARK`).
    n: usize,
}

impl Default for Pickler {
    fn default() -> Self {
        Pickler::new()
    }
}

impl Pickler {
    /// Starts a pickle: `PROTO 4`.
    pub fn new() -> Pickler {
        Pickler {
            out: vec![PROTO, 4],
            memo_len: 0,
            keys: HashMap::new(),
            open: Vec::new(),
        }
    }

    /// Ends the pickle (`STOP`) and gives its bytes.
    ///
    /// # Panics
    /// When a container is still open.
    pub fn finish(mut self) -> Vec<u8> {
        assert!(self.open.is_empty(), "a pickled container left open");
        self.out.push(STOP);
        self.out
    }

    /// An integer: `BININT1`, `BININT2`, `BININT` or `LONG1` (its shortest two's-complement
    /// bytes, at most 8), as Python's pickler chooses.
    pub fn int(&mut self, v: i64) {
        self.item();
        self.int_raw(v);
    }

    fn int_raw(&mut self, v: i64) {
        if (0..=0xff).contains(&v) {
            self.out.extend([BININT1, v as u8]);
        } else if (0..=0xffff).contains(&v) {
            self.out.push(BININT2);
            self.out.extend((v as u16).to_le_bytes());
        } else if let Ok(v) = i32::try_from(v) {
            self.out.push(BININT);
            self.out.extend(v.to_le_bytes());
        } else {
            let b = v.to_le_bytes();
            let mut n = 8;
            // Drop a top byte that only repeats the sign of the byte below it.
            while n > 1 {
                let (top, below) = (b[n - 1], b[n - 2]);
                if (top == 0 && below < 0x80) || (top == 0xff && below >= 0x80) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.out.extend([LONG1, n as u8]);
            self.out.extend(&b[..n]);
        }
    }

    /// A string, UTF-8: `SHORT_BINUNICODE` under 256 bytes, else `BINUNICODE` (a string of 4 GiB
    /// or more is cut there, at a character's boundary).
    pub fn str(&mut self, s: &str) {
        self.item();
        let mut s = s;
        if s.len() > u32::MAX as usize {
            let mut end = u32::MAX as usize;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s = &s[..end];
        }
        if s.len() < 256 {
            self.out.extend([SHORT_BINUNICODE, s.len() as u8]);
        } else {
            self.out.push(BINUNICODE);
            self.out.extend((s.len() as u32).to_le_bytes());
        }
        self.out.extend_from_slice(s.as_bytes());
    }

    /// A string written once and fetched from the memo after: for dict keys and other words
    /// that repeat.
    pub fn key(&mut self, s: &'static str) {
        match self.keys.get(s) {
            Some(&m) => self.get(m),
            None => {
                self.str(s);
                let m = self.memoize();
                self.keys.insert(s, m);
            }
        }
    }

    pub fn bool(&mut self, v: bool) {
        self.item();
        self.out.push(if v { NEWTRUE } else { NEWFALSE });
    }

    /// A tuple of two integers.
    pub fn tuple2(&mut self, a: i64, b: i64) {
        self.item();
        self.int_raw(a);
        self.int_raw(b);
        self.out.push(TUPLE2);
    }

    /// Keeps the value just written in the memo (`MEMOIZE`).
    pub fn memoize(&mut self) -> Memo {
        self.out.push(MEMOIZE);
        let m = Memo(self.memo_len);
        self.memo_len += 1;
        m
    }

    /// The memoized value again (`BINGET`, or `LONG_BINGET` from index 256).
    pub fn get(&mut self, m: Memo) {
        self.item();
        if m.0 < 256 {
            self.out.extend([BINGET, m.0 as u8]);
        } else {
            self.out.push(LONG_BINGET);
            self.out.extend(m.0.to_le_bytes());
        }
    }

    /// Opens a list: the values written until [`Pickler::end`] are its items.
    pub fn begin_list(&mut self) {
        self.begin(EMPTY_LIST, APPENDS, 1);
    }

    /// Opens a dict: the values written until [`Pickler::end`] are its keys and values,
    /// alternately.
    pub fn begin_dict(&mut self) {
        self.begin(EMPTY_DICT, SETITEMS, 2);
    }

    /// Closes the innermost list or dict.
    ///
    /// # Panics
    /// When none is open, or a dict has a key without a value.
    pub fn end(&mut self) {
        let open = self.open.pop().expect("no pickled container is open");
        assert!(
            open.n.is_multiple_of(open.per),
            "a pickled dict with a key and no value"
        );
        if open.n > 0 {
            self.out.push(open.fill);
        }
    }

    fn begin(&mut self, empty: u8, fill: u8, per: usize) {
        self.item();
        self.out.push(empty);
        self.open.push(Open { fill, per, n: 0 });
    }

    /// Before each value: into the innermost container's batch, closing a full batch and
    /// opening the next with a `MARK`.
    fn item(&mut self) {
        let Some(open) = self.open.last_mut() else {
            return;
        };
        if open.n == BATCH * open.per {
            self.out.push(open.fill);
            open.n = 0;
        }
        if open.n == 0 {
            self.out.push(MARK);
        }
        open.n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_take_the_opcodes_python_chooses() {
        let bytes = |v: i64| {
            let mut p = Pickler::new();
            p.int(v);
            p.finish()[2..].to_vec()
        };
        assert_eq!(bytes(7), [BININT1, 7, STOP]);
        assert_eq!(bytes(0x1234), [BININT2, 0x34, 0x12, STOP]);
        assert_eq!(bytes(-1), [BININT, 0xff, 0xff, 0xff, 0xff, STOP]);
        assert_eq!(bytes(1 << 31), [LONG1, 5, 0, 0, 0, 0x80, 0, STOP]);
        assert_eq!(
            bytes(0x7f00_0000_0000),
            [LONG1, 6, 0, 0, 0, 0, 0, 0x7f, STOP]
        );
        assert_eq!(
            bytes(i64::MAX),
            [
                LONG1, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, STOP
            ]
        );
        assert_eq!(bytes(-(1 << 40)), [LONG1, 6, 0, 0, 0, 0, 0, 0xff, STOP]);
    }

    #[test]
    fn python_reads_what_it_writes() {
        let mut p = Pickler::new();
        p.begin_dict();
        p.key("list");
        p.begin_list();
        (0..2500).for_each(|i| p.int(i * 1_000_003 - 7));
        p.end();
        p.key("pool");
        p.tuple2(0, 1 << 40);
        p.key("text");
        p.str(&"é".repeat(300));
        p.key("flags");
        p.begin_list();
        p.bool(true);
        p.bool(false);
        p.key("list");
        p.end();
        p.key("empty");
        p.begin_dict();
        p.end();
        p.end();
        let b = p.finish();
        let got = crate::export::testing::python(
            &b,
            "d = pickle.loads(data); \
             assert d['list'] == [i * 1_000_003 - 7 for i in range(2500)], d['list'][:5]; \
             assert d['pool'] == (0, 1 << 40); assert d['text'] == 'é' * 300; \
             assert d['flags'] == [True, False, 'list']; assert d['empty'] == {}; \
             ops = [op.name for op, _, _ in pickletools.genops(data)]; \
             print(ops.count('MARK'), ops.count('APPENDS'), ops[0], data[1])",
        );
        // 2500 items: three batches in the long list, one in the short one; the dict's.
        assert_eq!(got.trim(), "5 4 PROTO 4");
    }
}
