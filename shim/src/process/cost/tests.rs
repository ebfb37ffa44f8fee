//! Tests of the shim's bill: calls counted and sampled, parts timed within their whole,
//! one-time work billed apart, the estimate's scaling, the shim's own heap; an ignored timing
//! test.

use super::*;

#[test]
fn every_call_counted_first_ones_and_samples_timed() {
    // A thread of its own, so its slot starts empty.
    std::thread::spawn(|| {
        let n = FIRST_TIMED + 3 * sample_every();
        for _ in 0..n {
            let s = begin(Metric::Captures);
            std::hint::black_box(&s);
        }
        let (slot, own) = slot_of(my_slot());
        assert!(own);
        let t = estimates(&slot.load())[Metric::Captures as usize];
        assert_eq!(t.calls, n);
        assert_eq!(t.timed, FIRST_TIMED + 3);
        assert_eq!(t.first_calls, FIRST_TIMED);
        assert!(t.dropped <= 3);
        assert!(t.ns > 0 && t.first_ns <= t.ns);
    })
    .join()
    .unwrap();
    // The exited thread's figures are kept.
    assert!(totals(Metric::Captures).calls >= FIRST_TIMED + 3 * sample_every());
}

/// Calls that alternate in kind (PyTorch's blocks: an allocation, then its free) are timed
/// alike: the sampled turn moves through its window, so it falls on each kind in turn.
#[test]
fn alternating_calls_are_sampled_alike() {
    for every in [1u64, 2, 32, 64] {
        let timed: Vec<u64> = (0..every * 64)
            .filter(|&k| sampled_turn(k, every))
            .collect();
        // One a window, the first call of the first window.
        assert_eq!(timed.len() as u64, 64, "every {every}");
        assert_eq!(timed[0], 0);
        if every > 1 {
            let even = timed.iter().filter(|k| *k % 2 == 0).count();
            assert_eq!(even, 32, "every {every}: {timed:?}");
        }
    }
}

/// Hooks calls with a capture inside each (stacks, and Python frames in every other one):
/// the parts are timed in the same calls as their whole, and never add up to more.
#[test]
fn parts_are_timed_with_their_whole_and_stay_within_it() {
    std::thread::spawn(|| {
        let n = FIRST_TIMED + 5 * sample_every() + 3;
        for i in 0..n {
            let h = begin(Metric::Hooks);
            assert!(in_hooks());
            let py = part(Metric::Python);
            if i % 2 == 0 {
                drop(py);
            } else {
                py.cancel();
            }
            let st = part(Metric::Stacks);
            std::hint::black_box(&st);
            drop(st);
            h.pause();
            assert!(!in_hooks());
            // The accounting after the allocation was served: a capture there is a part too.
            let r = resume().expect("a paused call");
            assert!(in_hooks());
            drop(part(Metric::Stacks));
            drop(r);
            assert!(resume().is_none());
        }
        let (slot, _) = slot_of(my_slot());
        let t = estimates(&slot.load());
        let (hooks, stacks, python) = (
            t[Metric::Hooks as usize],
            t[Metric::Stacks as usize],
            t[Metric::Python as usize],
        );
        assert_eq!(hooks.calls, n);
        assert_eq!(stacks.calls, 2 * n);
        assert_eq!(python.calls, n.div_ceil(2));
        assert_eq!(stacks.first_calls, 2 * FIRST_TIMED);
        assert!(stacks.ns + python.ns <= hooks.ns, "{t:?}");
        assert!(stacks.first_ns + python.first_ns <= hooks.first_ns, "{t:?}");
        assert!(
            (stacks.ns - stacks.first_ns) + (python.ns - python.first_ns)
                <= hooks.ns - hooks.first_ns,
            "{t:?}"
        );
        // A capture outside an allocation is its own bill.
        drop(begin(Metric::Captures));
        assert_eq!(
            estimates(&slot.load())[Metric::Stacks as usize].calls,
            2 * n
        );
    })
    .join()
    .unwrap();
}

/// One-time work is timed whole, every time, and taken out of the span it falls in.
#[test]
fn one_time_work_is_billed_apart() {
    std::thread::spawn(|| {
        let h = begin(Metric::Hooks);
        let st = part(Metric::Stacks);
        let inner = one_time(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            one_time(|| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                7
            })
        });
        assert_eq!(inner, 7);
        drop(st);
        drop(h);
        let (slot, _) = slot_of(my_slot());
        let t = estimates(&slot.load());
        let once = t[Metric::OneTime as usize];
        assert_eq!((once.calls, once.timed), (2, 2));
        assert!(once.ns >= 30_000_000, "{once:?}");
        // Nested one-time work is not counted twice.
        assert!(once.ns < 60_000_000, "{once:?}");
        // Neither the hooks call nor its capture carries it.
        assert!(t[Metric::Hooks as usize].ns < 10_000_000, "{t:?}");
        assert!(t[Metric::Stacks as usize].ns <= t[Metric::Hooks as usize].ns);
    })
    .join()
    .unwrap();
}

#[test]
fn a_long_sampled_call_is_dropped_with_its_parts() {
    std::thread::spawn(|| {
        // The call after the first ones is the first sampled.
        for i in 0..FIRST_TIMED + 1 {
            let h = begin(Metric::Hooks);
            let st = part(Metric::Stacks);
            if i == FIRST_TIMED {
                // The first sampled call: descheduled, in its capture.
                std::thread::sleep(std::time::Duration::from_millis(3));
            }
            drop(st);
            drop(h);
        }
        let (slot, _) = slot_of(my_slot());
        let raw = slot.load();
        assert_eq!(raw[Metric::Hooks as usize].dropped, 1);
        assert_eq!(raw[Metric::Stacks as usize].timed_ns, 0, "{raw:?}");
        let t = estimates(&raw);
        assert!(t[Metric::Stacks as usize].ns <= t[Metric::Hooks as usize].ns);
    })
    .join()
    .unwrap();
}

#[test]
fn the_estimate_scales_later_samples() {
    let mut raw = [Raw::default(); METRICS];
    raw[Metric::Hooks as usize] = Raw {
        calls: FIRST_TIMED + 100,
        first: 0,
        first_ns: 800,
        timed: 4,
        timed_ns: 40,
        dropped: 0,
    };
    raw[Metric::Stacks as usize] = Raw {
        calls: FIRST_TIMED + 100,
        first: FIRST_TIMED,
        first_ns: 400,
        timed: 4,
        timed_ns: 20,
        dropped: 0,
    };
    let t = estimates(&raw);
    assert_eq!(
        t[Metric::Hooks as usize],
        Totals {
            calls: FIRST_TIMED + 100,
            timed: FIRST_TIMED + 4,
            dropped: 0,
            ns: 800 + 1000,
            first_calls: FIRST_TIMED,
            first_ns: 800,
        }
    );
    // The part is scaled by its whole's factor (100 later calls, 4 kept).
    assert_eq!(t[Metric::Stacks as usize].ns, 400 + 500);
    // A dropped sample is left out of the mean: the other four give 10 ns each.
    raw[Metric::Hooks as usize].timed = 5;
    raw[Metric::Hooks as usize].dropped = 1;
    let t = estimates(&raw);
    assert_eq!(t[Metric::Hooks as usize].ns, 800 + 1000);
    assert_eq!(t[Metric::Hooks as usize].dropped, 1);
    assert_eq!(t[Metric::Stacks as usize].ns, 400 + 500);
}

/// What the bill adds to one call: a span counted but not timed, a span timed, and an
/// allocation through the counting allocator against the system allocator.
/// `cargo test -p cuguard-shim --release --lib -- --ignored bench_bill --nocapture`
#[test]
#[ignore]
fn bench_bill() {
    std::thread::spawn(|| {
        const N: u32 = 10_000_000;
        let time = |f: &dyn Fn()| {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                for _ in 0..N {
                    f();
                }
                best = best.min(t.elapsed().as_nanos() as f64 / f64::from(N));
            }
            best
        };
        configure(1 << 20);
        let untimed = time(&|| drop(std::hint::black_box(begin(Metric::Captures))));
        configure(1);
        let timed = time(&|| drop(std::hint::black_box(begin(Metric::Captures))));
        configure(DEFAULT_SAMPLE_EVERY);
        let layout = Layout::from_size_align(64, 8).unwrap();
        // SAFETY: each block is freed with the layout it was allocated with.
        let counted = time(&|| unsafe {
            Counting.dealloc(std::hint::black_box(Counting.alloc(layout)), layout)
        });
        // SAFETY: as above.
        let plain =
            time(&|| unsafe { System.dealloc(std::hint::black_box(System.alloc(layout)), layout) });
        println!(
            "span counted, not timed: {untimed:.1} ns; timed: {timed:.1} ns; \
             64-byte alloc+free counted {counted:.1} ns, plain {plain:.1} ns"
        );
    })
    .join()
    .unwrap();
}

#[test]
fn heap_counts_own_allocations() {
    let before = heap_bytes();
    let v: Vec<u8> = Vec::with_capacity(1 << 20);
    assert!(heap_bytes() >= before + (1 << 20) - (64 << 10));
    drop(v);
}
