//! Records the commands write to a [`crate::spill::Spill`] and read back: numbers as LEB128
//! varints, strings as a length and their bytes, each record prefixed by its length.
//!
//! What `cuguard check` and `cuguard summary` gather per process, and need again only at the
//! end (a process's totals per site, its events, who it was), is written this way instead of
//! kept, so their memory does not grow with the number of reports. Only this program reads
//! these records, in the same run: the format is not a contract.
//!
//! ```
//! use cuguard::record::{Dec, Enc};
//! let mut e = Enc::new();
//! e.u64(300).str("rank 3").opt_u32(None).opt_u32(Some(7));
//! let bytes = e.record();
//! let mut read = &bytes[..];
//! let record = cuguard::record::next(&mut read).unwrap().unwrap();
//! let mut d = Dec::new(&record);
//! assert_eq!(d.u64().unwrap(), 300);
//! assert_eq!(d.str().unwrap(), "rank 3");
//! assert_eq!((d.opt_u32().unwrap(), d.opt_u32().unwrap()), (None, Some(7)));
//! assert!(cuguard::record::next(&mut read).unwrap().is_none());
//! ```

use std::io::{self, BufRead};

/// A record being written.
#[derive(Debug, Default)]
pub struct Enc {
    bytes: Vec<u8>,
}

impl Enc {
    /// An empty record.
    pub fn new() -> Enc {
        Enc::default()
    }

    /// Empties it, keeping its buffer.
    pub fn clear(&mut self) -> &mut Enc {
        self.bytes.clear();
        self
    }

    /// Adds a number.
    pub fn u64(&mut self, mut n: u64) -> &mut Enc {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.bytes.push(byte);
                return self;
            }
            self.bytes.push(byte | 0x80);
        }
    }

    /// Adds a flag.
    pub fn bool(&mut self, b: bool) -> &mut Enc {
        self.u64(u64::from(b))
    }

    /// Adds a number that may be absent.
    pub fn opt_u32(&mut self, n: Option<u32>) -> &mut Enc {
        match n {
            None => self.u64(0),
            Some(n) => self.u64(u64::from(n) + 1),
        }
    }

    /// Adds a string.
    pub fn str(&mut self, s: &str) -> &mut Enc {
        self.u64(s.len() as u64);
        self.bytes.extend_from_slice(s.as_bytes());
        self
    }

    /// Adds a string that may be absent.
    pub fn opt_str(&mut self, s: Option<&str>) -> &mut Enc {
        match s {
            None => self.u64(0),
            Some(s) => {
                self.u64(1);
                self.str(s)
            }
        }
    }

    /// The record as written to a spill: its length, then its bytes.
    pub fn record(&self) -> Vec<u8> {
        let mut out = Enc::new();
        out.u64(self.bytes.len() as u64);
        out.bytes.extend_from_slice(&self.bytes);
        out.bytes
    }

    /// Writes the record (its length, then its bytes) to `out`.
    pub fn write_to(&self, out: &mut impl io::Write) -> io::Result<()> {
        let mut head = Enc::new();
        head.u64(self.bytes.len() as u64);
        out.write_all(&head.bytes)?;
        out.write_all(&self.bytes)
    }
}

/// The next record of `input` (its bytes, without the length), `None` at its end.
pub fn next(input: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    if input.fill_buf()?.is_empty() {
        return Ok(None);
    }
    let mut len = 0u64;
    let mut shift = 0;
    loop {
        let mut byte = [0u8];
        input.read_exact(&mut byte)?;
        if shift > 63 {
            return Err(corrupt());
        }
        len |= u64::from(byte[0] & 0x7f) << shift;
        if byte[0] < 0x80 {
            break;
        }
        shift += 7;
    }
    let mut bytes = vec![0u8; usize::try_from(len).map_err(|_| corrupt())?];
    input.read_exact(&mut bytes)?;
    Ok(Some(bytes))
}

/// A record being read.
#[derive(Debug)]
pub struct Dec<'a> {
    bytes: &'a [u8],
}

impl<'a> Dec<'a> {
    /// Reads `bytes`, one record's.
    pub fn new(bytes: &'a [u8]) -> Dec<'a> {
        Dec { bytes }
    }

    /// The next number.
    pub fn u64(&mut self) -> io::Result<u64> {
        let mut n = 0u64;
        let mut shift = 0;
        loop {
            let (&byte, rest) = self.bytes.split_first().ok_or_else(corrupt)?;
            self.bytes = rest;
            if shift > 63 {
                return Err(corrupt());
            }
            n |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(n);
            }
            shift += 7;
        }
    }

    /// The next number, which must fit a `u32`.
    pub fn u32(&mut self) -> io::Result<u32> {
        u32::try_from(self.u64()?).map_err(|_| corrupt())
    }

    /// The next flag.
    pub fn bool(&mut self) -> io::Result<bool> {
        Ok(self.u64()? != 0)
    }

    /// The next number that may be absent.
    pub fn opt_u32(&mut self) -> io::Result<Option<u32>> {
        match self.u64()? {
            0 => Ok(None),
            n => u32::try_from(n - 1).map(Some).map_err(|_| corrupt()),
        }
    }

    /// The next string.
    pub fn str(&mut self) -> io::Result<&'a str> {
        let len = usize::try_from(self.u64()?).map_err(|_| corrupt())?;
        if len > self.bytes.len() {
            return Err(corrupt());
        }
        let (s, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        std::str::from_utf8(s).map_err(|_| corrupt())
    }

    /// The next string that may be absent.
    pub fn opt_str(&mut self) -> io::Result<Option<&'a str>> {
        match self.u64()? {
            0 => Ok(None),
            _ => self.str().map(Some),
        }
    }

    /// Whether the record is read to its end.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

fn corrupt() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "a temporary file of this run was changed while it ran",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let mut out = Vec::new();
        let mut e = Enc::new();
        for i in 0..1000u64 {
            e.clear()
                .u64(i * 1_000_003)
                .u64(u64::MAX - i)
                .str(&"x".repeat(i as usize % 300))
                .opt_str((i % 2 == 0).then_some("é"))
                .bool(i % 3 == 0);
            e.write_to(&mut out).unwrap();
        }
        let mut input = &out[..];
        for i in 0..1000u64 {
            let r = next(&mut input).unwrap().unwrap();
            let mut d = Dec::new(&r);
            assert_eq!(d.u64().unwrap(), i * 1_000_003);
            assert_eq!(d.u64().unwrap(), u64::MAX - i);
            assert_eq!(d.str().unwrap().len(), i as usize % 300);
            assert_eq!(d.opt_str().unwrap(), (i % 2 == 0).then_some("é"));
            assert_eq!(d.bool().unwrap(), i % 3 == 0);
            assert!(d.is_empty());
            assert!(d.u64().is_err());
        }
        assert!(next(&mut input).unwrap().is_none());
        // Cut short.
        let mut cut = &out[..out.len() - 1];
        let mut last = None;
        while let Ok(Some(r)) = next(&mut cut) {
            last = Some(r);
        }
        assert!(last.is_some());
    }
}
