//! The layout's round trip, its size per event, and what a reader says of damaged files.

use proptest::prelude::*;

use super::*;

fn header() -> Vec<u8> {
    Header {
        version: VERSION,
        pid: 9,
        start_unix_ns: 1_700_000_000_000_000_000,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec()
}

fn read_all(bytes: &[u8]) -> Result<Vec<Chunk>, Error> {
    Reader::new(bytes)?.collect()
}

fn raw() -> impl Strategy<Value = Raw> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u16>(),
        (1u8..=6, 0u8..=7),
        any::<u8>(),
        any::<u64>(),
    )
        .prop_map(
            |(tsc, addr, size, stack, context, (a, m), device, stream)| {
                let kind = a | m << 4;
                let size = if Action::of(kind).unwrap().sized() {
                    size
                } else {
                    0
                };
                Raw {
                    tsc,
                    addr,
                    size,
                    stack,
                    context,
                    kind,
                    device,
                    stream,
                }
            },
        )
}

fn chunk() -> impl Strategy<Value = Chunk> {
    prop_oneof![
        (any::<u32>(), proptest::collection::vec(raw(), 0..40))
            .prop_map(|(thread, events)| Chunk::Events { thread, events }),
        (any::<u32>(), proptest::collection::vec(any::<u64>(), 0..40))
            .prop_map(|(id, frames)| Chunk::Stack { id, frames }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(tsc, since_start_ns, unix_ns)| {
            Chunk::Clock {
                tsc,
                since_start_ns,
                unix_ns,
            }
        }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(count, first_tsc, last_tsc)| {
            Chunk::Dropped {
                count,
                first_tsc,
                last_tsc,
            }
        }),
        proptest::collection::vec((any::<u32>(), raw()), 0..40)
            .prop_map(|events| Chunk::Live { events }),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            ".{0,40}",
            "[0-9a-f]{0,40}"
        )
            .prop_map(|(start, end, bias, path, build_id)| Chunk::Module {
                start,
                end,
                bias,
                path,
                build_id
            }),
        (any::<u32>(), ".{0,40}", ".{0,20}").prop_map(|(id, file, function)| Chunk::Code {
            id,
            file,
            function
        }),
        any::<u64>().prop_map(|tsc| Chunk::End { tsc }),
        (
            proptest::array::uniform6(any::<u64>()),
            proptest::collection::vec((any::<u32>(), raw()), 0..20)
        )
            .prop_map(|(f, live)| Chunk::Checkpoint(Checkpoint {
                tsc: f[0],
                events: f[1],
                allocations: f[2],
                peak_bytes: f[3],
                peak_tsc: f[4],
                ooms: f[5],
                live,
            })),
    ]
}

proptest! {
    #[test]
    fn every_chunk_reads_back_as_written(chunks in proptest::collection::vec(chunk(), 0..12)) {
        let mut file = header();
        for c in &chunks {
            write_chunk(&mut file, c);
        }
        prop_assert_eq!(read_all(&file).unwrap(), chunks);
    }

    /// Any cut inside a chunk is said as a cut, at the file's end; any flipped byte after the
    /// header is caught (by the checksum, or as a value out of bounds), never read as other
    /// events without a word.
    #[test]
    fn cut_and_flipped_files_are_said(chunks in proptest::collection::vec(chunk(), 1..6), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut file = header();
        let mut ends = vec![];
        for c in &chunks {
            write_chunk(&mut file, c);
            ends.push(file.len());
        }
        let at = HEADER_LEN + cut.index(file.len() - HEADER_LEN);
        let got = read_all(&file[..at]);
        if ends.contains(&at) || at == HEADER_LEN {
            prop_assert!(got.is_ok());
        } else {
            prop_assert_eq!(got, Err(Error::Truncated { at: at as u64 }));
        }
        let mut bad = file.clone();
        let i = HEADER_LEN + flip.index(file.len() - HEADER_LEN);
        bad[i] ^= 1 << bit;
        let got = read_all(&bad);
        prop_assert!(got.is_err(), "{:?}", got);
    }
}

#[test]
fn a_training_loop_costs_under_16_bytes_an_event() {
    // Steps of 60 allocations from a handful of sites, each freed in the same step, addresses of
    // a pool's chunk, sizes of a model's tensors, a few thousand ticks apart.
    let mut events = vec![];
    let mut tsc = 1u64 << 40;
    let base = 0x7f3a_0000_0000u64;
    for step in 0..200u64 {
        let mut live = vec![];
        for i in 0..60u64 {
            tsc += 2_000 + (i * 37 + step) % 900;
            let addr = base + ((i * 7 + step) % 64) * (1 << 20);
            let size = 4096 << (i % 9);
            events.push(Raw {
                tsc,
                addr,
                size,
                stack: (i % 12) as u32,
                context: 0,
                kind: kind(Action::Alloc, MemoryKind::PoolBlock),
                device: 1,
                stream: 0,
            });
            live.push(addr);
        }
        for addr in live {
            tsc += 1_500;
            events.push(Raw {
                tsc,
                addr,
                size: 0,
                stack: NONE,
                context: 0,
                kind: kind(Action::Free, MemoryKind::PoolBlock),
                device: 1,
                stream: 0,
            });
        }
    }
    let mut file = vec![];
    for part in events.chunks(4096) {
        write_chunk(
            &mut file,
            &Chunk::Events {
                thread: 4242,
                events: part.to_vec(),
            },
        );
    }
    let per_event = file.len() as f64 / events.len() as f64;
    eprintln!("{per_event:.2} bytes an event ({} events)", events.len());
    assert!(per_event <= 16.0, "{per_event:.1} bytes an event");
    assert!(per_event >= 4.0, "{per_event:.1} bytes an event");
}

#[test]
fn headers_of_other_files_and_newer_versions_are_refused() {
    assert_eq!(read_all(b"{\"schema\":").unwrap_err(), Error::NotHistory);
    assert_eq!(read_all(b"").unwrap_err(), Error::NotHistory);
    assert_eq!(
        read_all(&header()[..20]).unwrap_err(),
        Error::Truncated { at: 20 }
    );
    let mut newer = header();
    newer[8] = 3;
    let e = read_all(&newer).unwrap_err();
    assert_eq!(e, Error::NewerVersion(3));
    assert_eq!(
        e.to_string(),
        "a history of layout version 3, written by a newer cuguard (this one reads version 2)"
    );
    assert_eq!(read_all(&header()).unwrap(), vec![]);
}

#[test]
fn kinds_of_a_newer_writer_are_skipped() {
    let mut file = header();
    write_chunk(&mut file, &Chunk::End { tsc: 5 });
    // Rewrite the kind to one this reader does not know (with its checksum, as a newer writer
    // would): it is passed over.
    file[HEADER_LEN] = 200;
    let sum = checksum(200, &file[HEADER_LEN + 9..]);
    file[HEADER_LEN + 5..HEADER_LEN + 9].copy_from_slice(&sum.to_le_bytes());
    write_chunk(&mut file, &Chunk::End { tsc: 6 });
    assert_eq!(read_all(&file).unwrap(), vec![Chunk::End { tsc: 6 }]);
}
