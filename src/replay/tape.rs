//! The requests of a history kept for replaying them again ([`Tape`]): written once as they are
//! read, into a temporary file ([`crate::spill`]), then played back as often as the search for
//! the smallest capacity needs, in memory that does not grow with the history.
//!
//! Each [`Op`] is a tag byte and varints: the id (by its difference from the previous one),
//! the size, and for a request its stream, thread, moment (by its difference from the previous
//! request's) and stack.

use std::io::{self, Read, Write};

use super::model::Request;
use super::requests::{Asked, Op};
use crate::spill::{Log, Spill};

const ALLOC: u8 = 1;
const FREE: u8 = 2;
const REFUSED: u8 = 3;
/// The longest record: a tag and six varints.
const MAX_RECORD: usize = 1 + 6 * 10;

/// Requests written down, then played back.
pub struct Tape {
    spill: Spill,
    buf: Vec<u8>,
    last_id: u64,
    last_ns: u64,
}

impl Default for Tape {
    fn default() -> Self {
        Tape::new()
    }
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The difference `b - a` as a zigzag number.
fn zigzag(a: u64, b: u64) -> u64 {
    let d = b.wrapping_sub(a) as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(a: u64, z: u64) -> u64 {
    let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
    a.wrapping_add(d as u64)
}

impl Tape {
    pub fn new() -> Tape {
        Tape {
            spill: Spill::new(),
            buf: Vec::with_capacity(1 << 16),
            last_id: 0,
            last_ns: 0,
        }
    }

    /// Writes one request down.
    pub fn write(&mut self, op: &Op) -> io::Result<()> {
        let b = &mut self.buf;
        match op {
            Op::Alloc(a) | Op::Refused(a) => {
                b.push(if matches!(op, Op::Alloc(_)) {
                    ALLOC
                } else {
                    REFUSED
                });
                varint(b, zigzag(self.last_id, a.request.id));
                self.last_id = a.request.id;
                varint(b, a.request.size);
                varint(b, a.request.stream);
                varint(b, u64::from(a.request.thread));
                varint(b, zigzag(self.last_ns, a.time_ns));
                self.last_ns = a.time_ns;
                varint(b, u64::from(a.stack));
            }
            Op::Free { id, size } => {
                b.push(FREE);
                varint(b, zigzag(self.last_id, *id));
                self.last_id = *id;
                varint(b, *size);
            }
        }
        if self.buf.len() >= 1 << 16 {
            self.spill.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Ends writing: the requests, to play back.
    pub fn finish(mut self) -> io::Result<Log> {
        self.spill.write_all(&self.buf)?;
        self.spill.flush()?;
        self.spill.into_log()
    }
}

/// Plays a finished tape back, calling `f` with each request in order.
pub fn play(log: &Log, f: &mut dyn FnMut(&Op)) -> io::Result<()> {
    let mut reader = log.reader();
    let mut buf = vec![0u8; 1 << 16];
    let (mut at, mut end) = (0usize, 0usize);
    let (mut last_id, mut last_ns) = (0u64, 0u64);
    loop {
        if end - at < MAX_RECORD {
            buf.copy_within(at..end, 0);
            end -= at;
            at = 0;
            loop {
                let n = reader.read(&mut buf[end..])?;
                end += n;
                if n == 0 || end == buf.len() {
                    break;
                }
            }
            if end == 0 {
                return Ok(());
            }
        }
        let mut cur = Cursor {
            bytes: &buf[..end],
            at,
        };
        let tag = cur.byte()?;
        let id = unzigzag(last_id, cur.varint()?);
        last_id = id;
        let size = cur.varint()?;
        let op = if tag == FREE {
            Op::Free { id, size }
        } else {
            let stream = cur.varint()?;
            let thread = cur.varint()? as u32;
            last_ns = unzigzag(last_ns, cur.varint()?);
            let asked = Asked {
                request: Request {
                    id,
                    size,
                    stream,
                    thread,
                },
                time_ns: last_ns,
                stack: cur.varint()? as u32,
            };
            match tag {
                ALLOC => Op::Alloc(asked),
                REFUSED => Op::Refused(asked),
                _ => return Err(io::Error::other("a replay tape is damaged")),
            }
        };
        at = cur.at;
        f(&op);
    }
}

/// Bytes read from a position.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> io::Result<u8> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| io::Error::other("a replay tape ends inside a record"))?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> io::Result<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            n |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(io::Error::other("a replay tape is damaged"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plays_back_what_was_written() {
        let mut ops = Vec::new();
        for i in 0..50_000u64 {
            let asked = Asked {
                request: Request {
                    id: i + 1,
                    size: i * 4097,
                    stream: i % 3 * 0x5000,
                    thread: (i % 7) as u32,
                },
                time_ns: i * 1000 + (i % 5) * 7,
                stack: u32::MAX - (i % 2) as u32,
            };
            ops.push(if i % 10 == 9 {
                Op::Refused(asked)
            } else {
                Op::Alloc(asked)
            });
            if i % 3 == 0 {
                ops.push(Op::Free {
                    id: i / 2 + 1,
                    size: u64::MAX - i,
                });
            }
        }
        let mut tape = Tape::new();
        for op in &ops {
            tape.write(op).unwrap();
        }
        let log = tape.finish().unwrap();
        for _ in 0..2 {
            let mut got = Vec::new();
            play(&log, &mut |op| got.push(*op)).unwrap();
            assert_eq!(got, ops);
        }
    }
}
