//! The timeline's tests: histories written here, their columns and bands read back.

use cuguard_history::{Action, Chunk, Header, Raw, VERSION, kind, write_chunk};

use super::*;

/// A history file's header and its clock pairs at 0 and `end`, 1 tsc tick = 1 ns.
fn opening(end: u64) -> Vec<u8> {
    let mut f = Header {
        version: VERSION,
        pid: 1,
        start_unix_ns: 0,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec();
    for t in [0, end] {
        write_chunk(
            &mut f,
            &Chunk::Clock {
                tsc: t,
                since_start_ns: t,
                unix_ns: t,
            },
        );
    }
    f
}

/// A history of `blocks` (start ns, end ns, bytes, stack), 1 tsc tick = 1 ns.
fn history(blocks: &[(u64, Option<u64>, u64, u32)], end: u64) -> History<Vec<u8>> {
    history_with(blocks, end, &[])
}

/// A history of `blocks` and of `step` phases pushed on thread 1 (begin ns, end ns).
fn history_with(
    blocks: &[(u64, Option<u64>, u64, u32)],
    end: u64,
    steps: &[(u64, Option<u64>)],
) -> History<Vec<u8>> {
    let mut f = opening(end);
    let mut events = Vec::new();
    for (i, &(start, stop, size, stack)) in blocks.iter().enumerate() {
        let addr = 0x7000_0000_0000 + i as u64 * 0x1000_0000;
        let ev = |tsc, action, size| Raw {
            tsc,
            addr,
            size,
            stack,
            context: 0,
            kind: kind(action, MemoryKind::Device),
            device: 1,
            stream: 0,
        };
        events.push(ev(start, Action::Alloc, size));
        if let Some(e) = stop {
            events.push(ev(e, Action::Free, 0));
        }
    }
    events.sort_by_key(|e| e.tsc);
    write_chunk(&mut f, &Chunk::Events { thread: 1, events });
    if !steps.is_empty() {
        let mark = |tsc, action, name| Raw {
            tsc,
            addr: cuguard_history::phases::PUSHED,
            size: name,
            stack: u32::MAX,
            context: u16::MAX,
            kind: kind(action, MemoryKind::Device),
            device: 0,
            stream: 0,
        };
        let mut events = Vec::new();
        for &(begin, stop) in steps {
            events.push(mark(begin, Action::PhaseBegin, 1));
            if let Some(e) = stop {
                events.push(mark(e, Action::PhaseEnd, 0));
            }
        }
        let text = "step".to_string();
        write_chunk(&mut f, &Chunk::Name { id: 1, text });
        write_chunk(&mut f, &Chunk::Phases { thread: 1, events });
    }
    write_chunk(&mut f, &Chunk::End { tsc: end });
    History::open(vec![f]).unwrap()
}

fn site(id: u32) -> SiteInfo {
    SiteInfo {
        label: format!("site_{id}"),
        stack: vec![format!("site_{id}"), "main".into()],
    }
}

/// A history of raw `events` on thread 1, 1 tsc tick = 1 ns.
fn history_of(events: Vec<Raw>, end: u64) -> History<Vec<u8>> {
    let mut f = opening(end);
    write_chunk(&mut f, &Chunk::Events { thread: 1, events });
    write_chunk(&mut f, &Chunk::End { tsc: end });
    History::open(vec![f]).unwrap()
}

#[test]
fn a_cache_s_segments_are_drawn_as_its_tensors_and_its_idle_bytes() {
    use MemoryKind::{CacheBlock, Device};
    const MS: u64 = 1_000_000;
    const MIB: u64 = 1 << 20;
    let ev = |ms: u64, action, memory, addr, size, stack| Raw {
        tsc: ms * MS,
        addr,
        size,
        stack,
        context: 0,
        kind: kind(action, memory),
        device: 1,
        stream: 0,
    };
    let (seg, big, plain) = (0x10_0000_0000, 0x20_0000_0000, 0x30_0000_0000);
    // An 8 MiB segment (made at stack 1) holding a 1 MiB tensor (stack 2) and a 3 MiB one
    // (stack 3); a 4 MiB segment for a 4 MiB temporary (stack 4) freed at 60 ms; a plain
    // 2 MiB allocation (stack 5) all along; the small segment given back at 80 ms with its
    // tensors still in it.
    let events = vec![
        ev(0, Action::Alloc, Device, plain, 2 * MIB, 5),
        ev(10, Action::Alloc, Device, seg, 8 * MIB, 1),
        ev(10, Action::Alloc, CacheBlock, seg, MIB, 2),
        ev(20, Action::Alloc, CacheBlock, seg + MIB, 3 * MIB, 3),
        ev(40, Action::Alloc, Device, big, 4 * MIB, 1),
        ev(40, Action::Alloc, CacheBlock, big, 4 * MIB, 4),
        ev(60, Action::Free, CacheBlock, big, 0, 4),
        ev(80, Action::Free, Device, seg, 0, 1),
    ];
    let h = history_of(events, 100 * MS);
    let t = timeline(&h, "p".into(), &site).unwrap();
    let labels: Vec<&str> = t.series.iter().map(|s| s.label.as_str()).collect();
    // By bytes × time; the segments' own stack (site_1) holds nothing once carved: their
    // bytes are the tensors' and the idle's (it stays a series: their bands' colour).
    assert_eq!(
        labels,
        [
            "site_5", "site_3", "site_4", "site_2", "site_1", IDLE, "other"
        ]
    );
    let of = |label: &str| labels.iter().position(|l| *l == label).unwrap();
    // What each series held at each moment asked: (ms, [(series, bytes)]).
    let level = &t.levels[0];
    let n = t.series.len();
    let at = |ms_at: f64| -> Vec<(usize, u64)> {
        let c = level
            .at
            .iter()
            .position(|&a| (a - ms_at).abs() < 1e-9)
            .unwrap();
        (0..n)
            .map(|k| (k, level.bytes[c * n + k]))
            .filter(|&(_, b)| b > 0)
            .collect()
    };
    let mut want = vec![
        (of("site_2"), MIB),
        (of("site_3"), 3 * MIB),
        (of("site_4"), 4 * MIB),
        (of("site_5"), 2 * MIB),
        (of(IDLE), 4 * MIB),
    ];
    want.sort();
    assert_eq!(at(40.0), want, "at the temporary's peak");
    let mut want = vec![
        (of("site_2"), MIB),
        (of("site_3"), 3 * MIB),
        (of("site_5"), 2 * MIB),
        (of(IDLE), 8 * MIB),
    ];
    want.sort();
    assert_eq!(at(60.0), want, "the temporary freed: its segment idle");
    assert_eq!(at(80.0), [(of("site_5"), 2 * MIB), (of(IDLE), 4 * MIB)]);
    // The totals are the driver's: the peak is the two segments and the plain block.
    assert_eq!(t.peak, (40.0, 14 * MIB));
}

#[test]
fn a_spike_between_calm_phases_is_drawn_at_its_height_and_as_a_band() {
    const MS: u64 = 1_000_000;
    // Calm: 1 MiB blocks all along; the spike: 512 MiB from 400 to 600 ms.
    let mut blocks: Vec<(u64, Option<u64>, u64, u32)> = (0..100)
        .map(|i| (i * 10 * MS, Some(i * 10 * MS + 5 * MS), 1 << 20, 1))
        .collect();
    blocks.push((400 * MS, Some(600 * MS), 512 << 20, 2));
    let t = timeline(&history(&blocks, 1000 * MS), "p[1]".into(), &site).unwrap();
    let spike = t.series.iter().position(|s| s.label == "site_2").unwrap();
    let n = t.series.len();
    let l0 = &t.levels[0];
    let at = |ms: f64| {
        let c = ((ms - l0.from_ms) / (l0.to_ms - l0.from_ms) * COLUMNS as f64) as usize;
        l0.bytes[c * n + spike]
    };
    assert_eq!(at(500.0), 512 << 20);
    assert_eq!(at(300.0), 0);
    assert_eq!(at(700.0), 0);
    // The largest allocation is a band, with its times and site.
    let band = t.bands.iter().find(|b| b.2 == 512 << 20).unwrap();
    assert_eq!((band.0, band.1, band.3), (400.0, 600.0, spike));
    assert_eq!(
        t.peak,
        (400.0, (512 << 20) + (1 << 20)),
        "with the calm block of 400 ms"
    );
    // Every level has its columns; the windows cover the run in order.
    assert_eq!(t.levels.len(), 1 + WINDOWS);
    assert!(t.levels.iter().all(|l| l.at.len() == COLUMNS));
    assert_eq!(t.levels[1].from_ms, 0.0);
    assert_eq!(t.levels[WINDOWS].to_ms, 1000.0);
    // In the window holding 500 ms, a column there has the spike too.
    let w = &t.levels[1 + 8];
    let c = ((500.0 - w.from_ms) / (w.to_ms - w.from_ms) * COLUMNS as f64) as usize;
    assert_eq!(w.bytes[c * n + spike], 512 << 20);
}

#[test]
fn phases_are_bands_with_their_spans_and_peaks_and_none_leave_the_page_as_it_was() {
    const MS: u64 = 1_000_000;
    const MIB: u64 = 1 << 20;
    let blocks = [
        (0, Some(1000 * MS), 100 * MIB, 1),
        (200 * MS, Some(400 * MS), 50 * MIB, 2),
        (600 * MS, Some(700 * MS), 30 * MIB, 2),
    ];
    let steps = [
        (150 * MS, Some(450 * MS)),
        (500 * MS, Some(800 * MS)),
        (850 * MS, None),
    ];
    let h = history_with(&blocks, 1000 * MS, &steps);
    let t = timeline(&h, "p[1]".into(), &site).unwrap();
    let got: Vec<_> = t
        .phases
        .iter()
        .map(|p| {
            (
                p.label.as_str(),
                p.start_ms,
                p.end_ms,
                p.lane,
                p.peak_bytes,
                p.peak_ms,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("step #1", 150.0, Some(450.0), 0, 150 * MIB, 200.0),
            ("step #2", 500.0, Some(800.0), 0, 130 * MIB, 600.0),
            ("step #3", 850.0, None, 0, 100 * MIB, 850.0),
        ]
    );
    assert_eq!(t.phases_omitted, 0);
    // Without phases, the page's data has no key for them.
    let t = timeline(&history(&blocks, 1000 * MS), "p[1]".into(), &site).unwrap();
    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(json.get("phases"), None);
    assert_eq!(json.get("phases_omitted"), None);
}

#[test]
fn a_million_allocations_make_a_page_of_bounded_size() {
    const US: u64 = 1_000;
    let blocks: Vec<(u64, Option<u64>, u64, u32)> = (0..1_000_000u64)
        .map(|i| {
            (
                i * US,
                Some(i * US + 50 * US),
                4096 + (i % 997) * 64,
                (i % 300) as u32,
            )
        })
        .collect();
    let t = timeline(&history(&blocks, 1_000_100 * US), "p[1]".into(), &site).unwrap();
    assert_eq!(t.allocations, 1_000_000);
    assert_eq!(t.series.len(), SERIES + 1);
    assert_eq!(t.bands.len(), BANDS);
    let json = serde_json::to_string(&t).unwrap();
    assert!(json.len() < 4 << 20, "{} bytes", json.len());
}

#[test]
fn a_million_phases_make_a_page_of_bounded_size() {
    const US: u64 = 1_000;
    let steps: Vec<(u64, Option<u64>)> = (0..1_000_000u64)
        .map(|i| (i * US, Some(i * US + US / 2)))
        .collect();
    let blocks = [(0, None, 1 << 20, 1)];
    let t = timeline(
        &history_with(&blocks, 1_000_000 * US, &steps),
        "p[1]".into(),
        &site,
    )
    .unwrap();
    assert_eq!(t.phases.len(), super::super::MAX_PHASES);
    assert_eq!(t.phases_omitted, 1_000_000 - super::super::MAX_PHASES);
    assert_eq!(t.phases[0].label, "step #1");
    let json = serde_json::to_string(&t.phases).unwrap();
    assert!(json.len() < 512 << 10, "{} bytes", json.len());
}

#[test]
fn bands_carry_their_tags_given_as_made_or_after_the_fact() {
    const MS: u64 = 1_000_000;
    let mut f = Header {
        version: VERSION,
        pid: 1,
        start_unix_ns: 0,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec();
    for t in [0, 100 * MS] {
        let clock = Chunk::Clock {
            tsc: t,
            since_start_ns: t,
            unix_ns: t,
        };
        write_chunk(&mut f, &clock);
    }
    for (id, text) in [(1, "kv_cache"), (2, "activations")] {
        let text = text.to_string();
        write_chunk(&mut f, &Chunk::Name { id, text });
    }
    let ev = |tsc, action, addr, size| Raw {
        tsc,
        addr,
        size,
        stack: 1,
        context: 0,
        kind: kind(action, MemoryKind::Device),
        device: 1,
        stream: 0,
    };
    let events = vec![
        // Tagged as it was made: its tag right after it, at its moment.
        ev(10 * MS, Action::Alloc, 0x1000_0000, 4 << 20),
        ev(10 * MS, Action::Tag, 0x1000_0000, 1),
        ev(20 * MS, Action::Alloc, 0x2000_0000, 2 << 20),
        ev(30 * MS, Action::Alloc, 0x3000_0000, 1 << 20),
        // Named after the fact, then freed.
        ev(40 * MS, Action::Tag, 0x2000_0000, 2),
        ev(50 * MS, Action::Free, 0x2000_0000, 0),
    ];
    write_chunk(&mut f, &Chunk::Events { thread: 1, events });
    write_chunk(&mut f, &Chunk::End { tsc: 100 * MS });
    let h = History::open(vec![f]).unwrap();
    let t = timeline(&h, "p[1]".into(), &site).unwrap();
    let bands: Vec<(u64, Option<&str>)> = t
        .bands
        .iter()
        .zip(&t.band_tags)
        .map(|(b, &k)| (b.2 >> 20, (k > 0).then(|| t.tags[k as usize - 1].as_str())))
        .collect();
    assert_eq!(
        bands,
        [(4, Some("kv_cache")), (2, Some("activations")), (1, None)]
    );
    assert_eq!(t.tags, ["kv_cache", "activations"]);
    // Without a tag, the page's data is as it was: neither key.
    let plain = history(&[(0, None, 1 << 20, 1)], 10 * MS);
    let json = serde_json::to_string(&timeline(&plain, "p[1]".into(), &site).unwrap()).unwrap();
    assert!(
        !json.contains("\"tags\"") && !json.contains("band_tags"),
        "{json}"
    );
}
