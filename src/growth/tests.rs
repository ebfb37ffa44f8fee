//! Growth's unit tests: set-up and plateaus against steady rises, noise, and a Python
//! program's end and its caches.

use super::*;

const MIB: u64 = 1 << 20;

fn times(n: usize) -> Vec<u64> {
    (0..n as u64).map(|i| i * 100).collect()
}

/// A small deterministic generator (xorshift), for noise.
struct Noise(u64);
impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn grows(bytes: &[u64]) -> Option<Growth> {
    growth(&times(bytes.len()), bytes, &Criterion::default())
}

#[test]
fn a_list_that_gains_a_buffer_per_iteration_grows_even_when_freed_at_shutdown() {
    // Nothing for 10 samples (start-up), then a buffer of 4 MiB per sample for 100 samples,
    // then everything freed at shutdown.
    let mut v = vec![0; 10];
    v.extend((1..=100).map(|i| i * 4 * MIB));
    v.extend([0, 0]);
    let g = grows(&v).expect("grows");
    assert_eq!(
        (g.from_bytes, g.to_bytes, g.grown_bytes),
        (0, 400 * MIB, 400 * MIB)
    );
    assert_eq!((g.from_ms, g.to_ms), (900, 10_900));
    assert!(g.trend > 0.99, "{g:?}");
    assert_eq!(g.increases, 100);
}

#[test]
fn a_temporary_allocated_and_freed_in_every_iteration_does_not_grow() {
    // Sampled at random moments: either the temporary is live (64 MiB) or it is not.
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let v: Vec<u64> = (0..200)
        .map(|_| {
            if noise.next().is_multiple_of(2) {
                64 * MIB
            } else {
                0
            }
        })
        .collect();
    assert_eq!(grows(&v), None);
    // Live at nearly every sample.
    let mut v = vec![64 * MIB; 200];
    v[0] = 0;
    v[57] = 0;
    assert_eq!(grows(&v), None);
}

#[test]
fn growth_under_noise_still_grows_and_noise_alone_does_not() {
    let mut noise = Noise(42);
    let v: Vec<u64> = (0..150)
        .map(|i| 100 * MIB + i * MIB + noise.next() % (3 * MIB))
        .collect();
    let g = grows(&v).expect("a rising trend under noise");
    assert!(
        g.grown_bytes >= 140 * MIB && g.grown_bytes <= 152 * MIB,
        "{g:?}"
    );
    assert!(g.trend > 0.8, "{g:?}");
    let mut noise = Noise(7);
    let flat: Vec<u64> = (0..150)
        .map(|_| 100 * MIB + noise.next() % (30 * MIB))
        .collect();
    assert_eq!(grows(&flat), None, "noise around a level");
}

/// What the criterion says with the last-part condition left out (the rise alone), to show
/// that a series it rejects is rejected by that condition only.
fn rises(bytes: &[u64]) -> bool {
    let lenient = Criterion {
        min_last_rise: 0.0,
        ..Criterion::default()
    };
    // Read only up to the first maximum: what the rise looks like on its own.
    let max = bytes.iter().max().copied().unwrap_or(0);
    let first_max = bytes.iter().position(|&b| b == max).unwrap_or(0);
    growth(&times(first_max + 1), &bytes[..=first_max], &lenient).is_some()
}

#[test]
fn set_up_then_a_long_plateau_does_not_grow() {
    // Weights, then optimizer state, then steady work.
    let mut v = vec![0; 5];
    v.extend(vec![500 * MIB; 20]);
    v.extend(vec![1000 * MIB; 200]);
    assert_eq!(grows(&v), None);
    // A framework's cache filled in the first step (6 samples of 150), then flat: GPT-2's
    // 1.5 GiB in 616 ms, then 14 s flat, sampled every 100 ms.
    let mut v = vec![0; 2];
    v.extend((1..=6).map(|i| i * 256 * MIB));
    v.extend(vec![1536 * MIB; 142]);
    assert!(rises(&v), "the rise alone is a trend");
    assert_eq!(grows(&v), None);
    // A rise over the first tenth, then a long plateau at the top, freed at shutdown.
    let mut v: Vec<u64> = (0..=20).map(|i| i * 10 * MIB).collect();
    v.extend(vec![200 * MIB; 200]);
    v.push(0);
    assert_eq!(grows(&v), None);
    // Flat all along.
    assert_eq!(grows(&vec![300 * MIB; 100]), None);
}

#[test]
fn a_rise_that_gives_a_little_back_then_holds_does_not_grow() {
    // The simulated driver's case: 10 buffers of 4 MiB over 1 s, one given back, 8 s flat.
    // Cut at the last maximum, the series is nothing but the rise.
    let mut v = vec![0];
    v.extend((1..=10).map(|i| i * 4 * MIB));
    v.extend(vec![36 * MIB; 80]);
    assert!(rises(&v));
    assert_eq!(grows(&v), None);
    // Gives back a little at a time while it holds.
    let mut v: Vec<u64> = (0..=10).map(|i| i * 40 * MIB).collect();
    v.extend((0..90).map(|i| 400 * MIB - (i / 10) * MIB));
    assert_eq!(grows(&v), None);
    // Gives back most of it, then holds the rest for long.
    let mut v: Vec<u64> = (0..=10).map(|i| i * 40 * MIB).collect();
    v.extend(vec![100 * MIB; 90]);
    assert_eq!(grows(&v), None);
}

#[test]
fn a_steady_rise_grows_and_says_when_its_last_part_began() {
    // The seed's loop: an allocation kept in every iteration, for the whole run (leaked at
    // exit, so no drop at the end). 61 samples 100 ms apart: the last third is 2 s.
    let v: Vec<u64> = (0..=60).map(|i| i * 2 * MIB).collect();
    let g = grows(&v).expect("grows");
    assert_eq!(
        (g.from_bytes, g.to_bytes, g.from_ms, g.to_ms),
        (0, 120 * MIB, 0, 6000)
    );
    assert_eq!(g.last_part_ms, 4000);
    assert_eq!(g.last_part_grown_bytes, 42 * MIB, "from 78 MiB to 120 MiB");
    assert_eq!(g.increases, 60);
    assert_eq!(g.trend, 1.0);
}

#[test]
fn where_the_line_falls_for_a_rise_that_stops() {
    // 211 samples (21 s); a steady rise over the first k samples, then held; or then freed
    // (a list torn down at shutdown, zeros after). It grows when the rise went on over at
    // least 16/21 of the time (160 of the 210 intervals).
    let shape = |k: u64, after: u64| -> Vec<u64> {
        (0..=210)
            .map(|i| if i <= k { i * MIB } else { after.min(k * MIB) })
            .collect()
    };
    for (k, want) in [
        (210, true),
        (175, true),
        (162, true),
        (158, false),
        (140, false),
    ] {
        assert_eq!(grows(&shape(k, u64::MAX)).is_some(), want, "held after {k}");
        assert_eq!(grows(&shape(k, 0)).is_some(), want, "freed after {k}");
    }
    // Freed on the last sample only: as a rise all along.
    let mut v = shape(210, 0);
    v.push(0);
    assert!(grows(&v).is_some());
}

#[test]
fn staircases() {
    // Steps of 4 samples (short pauses): growth.
    let v: Vec<u64> = (0..120).map(|i| (i / 4) * 8 * MIB).collect();
    let g = grows(&v).expect("a staircase that keeps climbing");
    assert_eq!(g.grown_bytes, 29 * 8 * MIB);
    // Five steps over the run, each a fifth of it: the last one falls in the last third.
    let v: Vec<u64> = (0..100).map(|i| (i / 20 + 1) * 16 * MIB).collect();
    assert!(grows(&v).is_some(), "steps of a fifth");
    // Six steps, the last held for 40% of the run: bounded so far.
    let v: Vec<u64> = (0..100).map(|i| ((i / 12).min(5) + 1) * 16 * MIB).collect();
    assert!(rises(&v));
    assert_eq!(grows(&v), None, "last step held for 40%");
}

#[test]
fn sawtooths_do_not_grow() {
    // Keeps going back down to the same low, up to the same height.
    let v: Vec<u64> = (0..200).map(|i| (i % 20) * 10 * MIB).collect();
    assert_eq!(grows(&v), None);
    // Teeth that shrink: the highest is the first, whose rise alone is a trend.
    let v: Vec<u64> = (0..200u64)
        .map(|i| (i % 20) * (20 - i / 20) * MIB)
        .collect();
    assert!(rises(&v));
    assert_eq!(grows(&v), None);
    // Teeth that climb: each falls back a little and then rises higher than the last.
    let v: Vec<u64> = (0..200u64)
        .map(|i| (i / 20) * 10 * MIB + (i % 20) * MIB)
        .collect();
    assert!(grows(&v).is_some());
}

#[test]
fn a_rise_at_the_very_end_grows() {
    // Flat for 90 samples, then 10 MiB more in each of the last 10.
    let mut v = vec![50 * MIB; 90];
    v.extend((1..=10).map(|i| 50 * MIB + i * 10 * MIB));
    let g = grows(&v).expect("grows");
    assert_eq!((g.from_ms, g.to_ms), (8900, 9900));
    assert_eq!((g.grown_bytes, g.increases), (100 * MIB, 10));
    // Then freed at shutdown.
    v.push(0);
    assert!(grows(&v).is_some());
    // Only two steps at the end: too few to tell.
    let mut v = vec![0; 90];
    v.extend([10 * MIB, 20 * MIB]);
    assert_eq!(grows(&v), None);
}

#[test]
fn few_samples() {
    assert_eq!(grows(&[0, 10 * MIB, 20 * MIB, 30 * MIB]), None, "4 samples");
    // 5 rising samples: the fewest that can grow; the last part is the last 3.
    let g = grows(&[0, 10 * MIB, 20 * MIB, 30 * MIB, 40 * MIB]).expect("grows");
    assert_eq!((g.last_part_ms, g.last_part_grown_bytes), (200, 30 * MIB));
    // So few samples cannot tell a rise that holds from one that goes on: the last part is
    // at least the last 3 samples, and these rose above the first two.
    assert!(grows(&[0, 10 * MIB, 20 * MIB, 30 * MIB, 30 * MIB]).is_some());
    // Held for the last 6 of 9: the last part (the last 3) gains nothing.
    let mut v = vec![0, 10 * MIB, 20 * MIB];
    v.extend([30 * MIB; 6]);
    assert_eq!(grows(&v), None);
    // All at one time (a hand-made report): every sample after the low is the last part.
    let v = [0, MIB, 2 * MIB, 3 * MIB, 4 * MIB, 5 * MIB];
    assert!(growth(&[7; 6], &v, &Criterion::default()).is_some());
    // Times out of order do not panic.
    let t = [500, 100, 400, 200, 300, 0];
    let _ = growth(&t, &v, &Criterion::default());
}

#[test]
fn a_single_spike_does_not_grow() {
    let mut v = vec![MIB; 100];
    v[50] = 900 * MIB;
    assert_eq!(grows(&v), None);
    let mut v = vec![0; 100];
    v[99] = 900 * MIB;
    assert_eq!(grows(&v), None, "at the very end");
}

#[test]
fn small_rises_do_not_count() {
    // Below 1 MiB.
    let v: Vec<u64> = (0..100).map(|i| i * 1000).collect();
    assert_eq!(grows(&v), None);
    // Below 10% of the maximum.
    let v: Vec<u64> = (0..100).map(|i| 1000 * MIB + i * MIB / 2).collect();
    assert_eq!(grows(&v), None);
}

#[test]
fn short_or_odd_series() {
    assert_eq!(grows(&[]), None);
    assert_eq!(grows(&[0, 10 * MIB, 20 * MIB, 30 * MIB]), None, "4 samples");
    let t = times(3);
    let v: Vec<u64> = (0..100).map(|i| i * MIB).collect();
    assert_eq!(
        growth(&t, &v, &Criterion::default()),
        None,
        "extra values ignored"
    );
    let big = vec![
        u64::MAX - 5,
        u64::MAX - 4,
        u64::MAX - 3,
        u64::MAX - 2,
        u64::MAX,
    ];
    assert_eq!(grows(&big), None, "no overflow");
}

#[test]
fn tau_b() {
    assert_eq!(kendall_tau_b(&[1, 2, 3, 4]), 1.0);
    assert_eq!(kendall_tau_b(&[4, 3, 2, 1]), -1.0);
    assert_eq!(kendall_tau_b(&[5, 5, 5]), 0.0);
    assert_eq!(kendall_tau_b(&[]), 0.0);
    let t = kendall_tau_b(&[1, 1, 2, 2]);
    assert!((t - (4.0 / (6.0f64 * 4.0).sqrt())).abs() < 1e-12, "{t}");
}

fn report_with(times: Vec<u64>, series: Vec<(u64, Vec<u64>)>) -> Report {
    let process = cuguard_format::Process {
        pid: 1,
        ppid: 0,
        exe: "/x".into(),
        argv: vec![],
        hostname: "h".into(),
        rank: None,
        start_unix_ms: 0,
        end_unix_ms: 0,
        labels: None,
    };
    let mut r = Report::new(true, cuguard_format::Reason::Exit, process);
    let frame = |function: &str, line| cuguard_format::Frame {
        ip: cuguard_format::Addr(1),
        module: "/opt/app/train".into(),
        offset: cuguard_format::Addr(1),
        function: Some(function.into()),
        file: Some("/src/train.c".into()),
        line: Some(line),
        inlined: None,
    };
    for (id, _) in &series {
        // Stacks 1 and 2 share a site (same function and line); 3 is elsewhere.
        let (function, line) = if *id < 3 { ("keep", 10) } else { ("other", 20) };
        r.stacks.push(cuguard_format::Stack {
            id: *id,
            frames: vec![frame(function, line)],
            python: vec![],
            site: Some(cuguard_format::StackSite {
                in_: "frames".into(),
                index: 0,
                fingerprint: "f".into(),
                kind: Some("user".into()),
            }),
            owner: None,
            mixed: vec![],
            origin: None,
        });
    }
    r.stack_samples = Some(cuguard_format::StackSamples {
        interval_ms: 100,
        times_ms: times,
        series: series
            .into_iter()
            .map(|(id, bytes)| cuguard_format::StackSeries {
                stack: Some(id),
                device: 0,
                bytes,
                cache_blocks: false,
            })
            .collect(),
    });
    r
}

#[test]
fn a_run_with_too_few_samples_is_not_told() {
    let c = Criterion::default();
    assert_eq!(c.fewest_samples(), 5);
    let mut r = report_with(
        vec![100, 200, 300, 400],
        vec![(1, vec![0, MIB, 2 * MIB, 3 * MIB])],
    );
    r.process.end_unix_ms = 450;
    // Nothing allocated: nothing could grow.
    assert_eq!(not_told(&r, &c), None);
    r.stats.devices.push(cuguard_format::DeviceStats {
        device: 0,
        live_bytes: 0,
        peak_live_bytes: 3 * MIB,
        total_allocated_bytes: 3 * MIB,
        allocations: 3,
        frees: 0,
        released_bytes: None,
        host_pinned_live_bytes: None,
        pool: None,
    });
    let four = NotTold {
        samples: 4,
        needed: 5,
        end_ms: 450,
        span_ms: Some(350),
        code_end: false,
        interval_ms: Some(100),
    };
    assert_eq!(not_told(&r, &c), Some(four));
    assert_eq!(
        four.why(),
        "4 samples in the 350 ms from the first to the end (at 450 ms); 5 are needed, one every 100 ms"
    );
    // A fifth sample: told (here, it grew).
    let samples = r.stack_samples.as_mut().unwrap();
    samples.times_ms.push(500);
    samples.series[0].bytes.push(4 * MIB);
    assert_eq!(not_told(&r, &c), None);
    // A report older than sampling: nothing is said.
    r.stack_samples = None;
    assert_eq!(not_told(&r, &c), None);
    // Sampling off.
    r.config = Some(cuguard_format::Config {
        timeline_ms: Some(0),
        ..Default::default()
    });
    let none = NotTold {
        samples: 0,
        span_ms: None,
        interval_ms: None,
        ..four
    };
    assert_eq!(not_told(&r, &c), Some(none));
    assert_eq!(
        none.why(),
        "no samples: sampling was off (CUGUARD_TIMELINE_MS=0)"
    );
    // Samples only after the end (a program whose first allocation came late).
    let late = NotTold {
        samples: 0,
        span_ms: None,
        code_end: true,
        ..four
    };
    assert_eq!(
        late.why(),
        "no sample before the end of the code (at 450 ms); 5 are needed, one every 100 ms from the first allocation"
    );
}

fn sites_of(r: &Report) -> Vec<(String, u64)> {
    let sites = SiteIndex::new(r);
    let mut owners = OwnerIndex::new(r);
    growing_sites(r, &sites, &mut owners, |_| true, &Criterion::default())
        .into_iter()
        .map(|g| (g.label, g.growth.grown_bytes))
        .collect()
}

#[test]
fn the_stacks_of_a_site_are_added_up() {
    // Stack 1 rises over the first half and holds; stack 2 rises over the second half; the
    // site of both rose all along, by both. Stack 3, alone at its site, is stack 1 again:
    // a rise over the first half, then held, is set-up.
    let half: Vec<u64> = (0..50).map(|i| i * MIB).collect();
    let a: Vec<u64> = half.iter().copied().chain(vec![49 * MIB; 50]).collect();
    let b: Vec<u64> = vec![0; 50]
        .into_iter()
        .chain(half.iter().copied())
        .collect();
    let r = report_with(times(100), vec![(1, a.clone()), (2, b), (3, a)]);
    assert_eq!(sites_of(&r), [("keep (train.c:10)".to_string(), 98 * MIB)]);
}

#[test]
fn oversized_samples_are_read_within_bounds() {
    let n = 20_000;
    let ramp: Vec<u64> = (0..n as u64).map(|i| i * 1024).collect();
    let mut series = vec![(1, ramp)];
    series.extend((4..3000).map(|id| (id, vec![MIB; 10])));
    let r = report_with(times(n), series);
    let started = std::time::Instant::now();
    let got = sites_of(&r);
    assert_eq!(got.len(), 1);
    assert!(got[0].1 > 19_000 * 1024, "{got:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

/// A caching allocator whose segments grew at the line that needed a new one ("other",
/// stack 3) while the program kept a tensor per step at another: with the cache's history,
/// the kept line grows and the segments' line does not; without it, the segments' line.
#[test]
fn growth_inside_a_cache_follows_its_lines() {
    let n = 60usize;
    // The segments: a new 8 MiB segment every 10 samples, charged to stack 3.
    let segments: Vec<u64> = (0..n as u64).map(|i| (i / 10 + 1) * 8 * MIB).collect();
    let mut r = report_with(times(n), vec![(3, segments)]);
    r.stacks[0].owner = Some("pytorch_caching_allocator".into());
    // A tensor kept per step (1 MiB each, one per 100 ms), and a temporary made and freed in
    // every step at another line.
    let kept: Vec<(u64, u64)> = (0..n as u64)
        .map(|i| (i * 100 + 5, (i + 1) * MIB))
        .collect();
    let temporary: Vec<(u64, u64)> = (0..2 * n as u64)
        .map(|i| (i * 50 + 10, if i % 2 == 0 { 4 * MIB } else { 0 }))
        .collect();
    let frame = |line: u32| {
        serde_json::json!([{"file": "/src/train.py", "line": line, "function": "step"},
                           {"file": "/src/train.py", "line": 30, "function": "<module>"}])
    };
    let python = serde_json::json!({
        "end": {"recorded": true, "how": "finished", "time_ms": 6000},
        "view": {"at": "end", "time_ms": 6000, "complete": true, "allocations": [],
            "caches": [{"owner": "pytorch_caching_allocator", "framework": "pytorch",
                "source": "history", "segment_bytes": 48 * MIB, "live_bytes": 60 * MIB,
                "idle_bytes": 0,
                "lines": [{"device": 0, "frames": frame(7), "samples": kept},
                          {"device": 0, "frames": frame(8), "samples": temporary}]}]}
    });
    r.python = Some(serde_json::from_value(python).unwrap());
    let sites = SiteIndex::new(&r);
    let mut owners = OwnerIndex::new(&r);
    let got = growing_sites(&r, &sites, &mut owners, |_| true, &Criterion::default());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].label, "step (train.py:7)");
    assert_eq!(got[0].owner, "program");
    assert_eq!(
        got[0].stack,
        ["step (train.py:7)", "<module> (train.py:30)"]
    );
    assert_eq!(got[0].growth.grown_bytes, 59 * MIB);
    // Only the cache's lines are the program's: a check of the cache's owner alone sees no
    // growth inside it.
    let mut owners = OwnerIndex::new(&r);
    let cache_only = growing_sites(
        &r,
        &sites,
        &mut owners,
        |o| o.id == "pytorch_caching_allocator",
        &Criterion::default(),
    );
    assert!(cache_only.is_empty(), "{cache_only:?}");

    // Without the history's lines, the segments' line is what grew.
    r.python = None;
    assert_eq!(sites_of(&r), [("other (train.c:20)".to_string(), 40 * MIB)]);
}
