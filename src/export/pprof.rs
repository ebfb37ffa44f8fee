//! pprof's `profile.proto` (<https://github.com/google/pprof/blob/main/proto/profile.proto>),
//! gzipped, as `go tool pprof` and every pprof reader takes it: a [`Profile`] written with a
//! small protobuf writer of its own (varints, length-delimited fields, packed repeated numbers;
//! the messages are few and flat, so no generated code).
//!
//! What it holds, in pprof's terms: `sample_type` Go's heap profile's (`inuse_objects`,
//! `inuse_space`, and `alloc_objects`, `alloc_space` when the run's history was read), the
//! default `inuse_space`; `period_type` `space`/`bytes` with period 1 (every allocation is
//! counted, none sampled); one `mapping` per module and process, its functions, files and lines
//! already known (`has_functions`…, so that pprof does not look for the binaries); one
//! `location` per native frame (its address, with the frames inlined into it as further lines) or
//! Python frame (no mapping, address 0: a function with file and line); string labels
//! `device`, `owner`, `process` and `rank`.

use std::collections::HashMap;
use std::io::Write as _;

use super::profile::Profile;

/// The profile as a gzipped `profile.proto`.
pub fn pprof(profile: &Profile) -> Vec<u8> {
    let raw = encode(profile);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&raw).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

/// The profile's `profile.proto` bytes, not compressed.
pub fn encode(profile: &Profile) -> Vec<u8> {
    let mut strings = Strings::default();
    strings.of("");
    let mut out = Message::default();
    for t in &profile.types {
        out.message(1, &value_type(&mut strings, t.kind, t.unit));
    }
    // Functions, by name and file.
    let mut functions: HashMap<(&str, &str), u64> = HashMap::new();
    let mut function_messages = Vec::new();
    let mut location_messages = Vec::new();
    for (i, loc) in profile.locations.iter().enumerate() {
        let mut l = Message::default();
        l.uint(1, i as u64 + 1);
        if let Some(m) = loc.mapping {
            l.uint(2, m as u64 + 1);
        }
        l.uint(3, loc.address);
        for line in &loc.lines {
            let next = functions.len() as u64 + 1;
            let id = *functions
                .entry((&line.function, &line.file))
                .or_insert_with(|| {
                    let mut f = Message::default();
                    f.uint(1, next);
                    f.uint(2, strings.of(&line.function));
                    // pprof shortens a name equal to its system name when it looks like
                    // C++ (`<…>` and `(…)` dropped): right for a native frame, not for Python's
                    // `<module>` or `<lambda>`, which keep no system name.
                    if loc.mapping.is_some() {
                        f.uint(3, strings.of(&line.function));
                    }
                    f.uint(4, strings.of(&line.file));
                    function_messages.push(f);
                    next
                });
            let mut ln = Message::default();
            ln.uint(1, id);
            ln.uint(2, u64::from(line.line));
            l.message(4, &ln);
        }
        location_messages.push(l);
    }
    for s in &profile.samples {
        let mut m = Message::default();
        m.packed(1, s.locations.iter().map(|&l| l as u64 + 1));
        m.packed(2, s.values.iter().map(|&v| v as u64));
        for (key, value) in &s.labels {
            let mut label = Message::default();
            label.uint(1, strings.of(key));
            label.uint(2, strings.of(value));
            m.message(3, &label);
        }
        out.message(2, &m);
    }
    for (i, mapping) in profile.mappings.iter().enumerate() {
        let mut m = Message::default();
        m.uint(1, i as u64 + 1);
        m.uint(2, mapping.start);
        m.uint(3, mapping.limit);
        m.uint(5, strings.of(&mapping.file));
        m.uint(6, strings.of(&mapping.build_id));
        for field in 7..=10 {
            m.uint(field, 1);
        }
        out.message(3, &m);
    }
    for l in &location_messages {
        out.message(4, l);
    }
    for f in &function_messages {
        out.message(5, f);
    }
    let time = profile.time_unix_ns;
    let duration = profile.duration_ns;
    let period = value_type(&mut strings, "space", "bytes");
    let comments: Vec<u64> = profile.comments.iter().map(|c| strings.of(c)).collect();
    let default = strings.of(profile.default_type);
    for s in &strings.list {
        out.bytes(6, s.as_bytes());
    }
    out.uint(9, time);
    out.uint(10, duration);
    out.message(11, &period);
    out.uint(12, 1);
    for c in comments {
        out.uint(13, c);
    }
    out.uint(14, default);
    out.buf
}

fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> Message {
    let mut m = Message::default();
    m.uint(1, strings.of(kind));
    m.uint(2, strings.of(unit));
    m
}

/// The string table: each string once, `""` first.
#[derive(Default)]
struct Strings {
    list: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn of(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// One protobuf message being written: fields in the order given.
#[derive(Default)]
struct Message {
    buf: Vec<u8>,
}

/// Wire types.
const VARINT: u64 = 0;
const LEN: u64 = 2;

impl Message {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u64, wire: u64) {
        self.varint(field << 3 | wire);
    }

    /// A varint field; zero is the default and is left out, as protobuf writers do.
    fn uint(&mut self, field: u64, v: u64) {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v);
        }
    }

    fn bytes(&mut self, field: u64, b: &[u8]) {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    fn message(&mut self, field: u64, m: &Message) {
        self.bytes(field, &m.buf);
    }

    /// A packed repeated varint field (negative `int64`s as their two's complement).
    fn packed(&mut self, field: u64, values: impl Iterator<Item = u64>) {
        let mut inner = Message::default();
        for v in values {
            inner.varint(v);
        }
        if !inner.buf.is_empty() {
            self.bytes(field, &inner.buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_protobufs() {
        let mut m = Message::default();
        m.uint(1, 150);
        assert_eq!(m.buf, [0x08, 0x96, 0x01]);
        let mut m = Message::default();
        m.packed(4, [3u64, 270, 86942].into_iter());
        assert_eq!(m.buf, [0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05]);
        let mut m = Message::default();
        m.bytes(2, b"testing");
        assert_eq!(&m.buf[..2], &[0x12, 0x07]);
        let mut m = Message::default();
        m.uint(3, u64::MAX);
        assert_eq!(m.buf.len(), 11);
    }
}
