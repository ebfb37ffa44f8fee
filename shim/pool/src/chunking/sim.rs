//! RMM's `random_allocations` benchmark, replayed against the sub-allocator and the growth
//! policy, with a fake driver that hands out address ranges.

use super::{GrowthPolicy, Route, SizeRepeats};
use crate::tlsf::{AllocError, ChunkInfo, SubAllocator};

const MIB: u64 = 1 << 20;

/// splitmix64: a small, fixed, seedable generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Which idle dedicated chunks go back to the driver before a new dedicated chunk is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// None: idle dedicated chunks stay until the owner trims.
    Never,
    /// The policy's own rule ([`GrowthPolicy::dedicated_release`]).
    Policy,
    /// The rule before sizes asked for again were kept: largest first, until at least the new
    /// chunk's size is given back.
    LargestFirst,
    /// All of them.
    All,
    /// Largest first, until the idle dedicated bytes are at most live bytes / the divisor.
    Budget(u64),
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SimResult {
    /// Peak of the chunks' total size.
    pub peak_reserved: u64,
    /// Peak of the bytes requested and not yet freed (RMM's `allocation_size`).
    pub peak_live: u64,
    pub allocs: u64,
    /// Chunks asked from the driver, and given back.
    pub driver_allocs: u64,
    pub driver_frees: u64,
}

impl SimResult {
    pub fn ratio(&self) -> f64 {
        self.peak_reserved as f64 / self.peak_live as f64
    }
}

/// The driver side in miniature: route, alloc, grow on `NoFit`, free.
struct SimPool {
    a: SubAllocator,
    policy: GrowthPolicy,
    release: Release,
    next_base: u64,
    r: SimResult,
    /// The exact sizes of dedicated requests, as the pool counts them.
    repeats: SizeRepeats,
}

impl SimPool {
    fn new(policy: GrowthPolicy, release: Release) -> SimPool {
        SimPool {
            a: SubAllocator::with_capacity(256, 4096),
            policy,
            release,
            next_base: 1 << 40,
            r: SimResult::default(),
            repeats: SizeRepeats::default(),
        }
    }

    fn alloc(&mut self, size: u64) -> u64 {
        let route = self.policy.route(size);
        if matches!(route, Route::Dedicated { .. }) {
            self.repeats.note(size);
        }
        let try_alloc = |a: &mut SubAllocator| match route {
            Route::Shared => a.alloc(size, 0),
            Route::Dedicated { max_block } => a.alloc_dedicated(size, 0, max_block),
        };
        match try_alloc(&mut self.a) {
            Ok(g) => return g.addr,
            Err(AllocError::NoFit) => {}
            Err(e) => panic!("alloc({size}): {e}"),
        }
        let chunk = match route {
            Route::Shared => {
                let fp = self.a.footprint(size, 0).unwrap();
                let shared = self.a.stats().reserved_bytes - self.a.stats().dedicated_bytes;
                self.policy.shared_chunk_size(fp, shared).unwrap()
            }
            Route::Dedicated { .. } => {
                let chunk = self.policy.dedicated_chunk_size(size).unwrap();
                self.release_dedicated(chunk);
                chunk
            }
        };
        let base = self.next_base;
        self.next_base += chunk + 2 * MIB;
        match route {
            Route::Shared => self.a.add_chunk(base, chunk).unwrap(),
            Route::Dedicated { .. } => self.a.add_dedicated_chunk(base, chunk).unwrap(),
        };
        self.r.driver_allocs += 1;
        self.r.peak_reserved = self.r.peak_reserved.max(self.a.stats().reserved_bytes);
        try_alloc(&mut self.a)
            .expect("a fresh chunk serves its request")
            .addr
    }

    fn release_dedicated(&mut self, wanted: u64) {
        let live = self.a.stats().live_bytes;
        let idle_bytes = self.a.stats().dedicated_idle_bytes;
        let idle = || self.a.idle_chunks();
        let victims: Vec<ChunkInfo> = match self.release {
            Release::Never => Vec::new(),
            Release::Policy => self.policy.dedicated_release(idle(), wanted, &self.repeats),
            Release::LargestFirst => {
                self.policy
                    .dedicated_release(idle(), wanted, &SizeRepeats::default())
            }
            Release::All => {
                self.policy
                    .dedicated_release(idle(), u64::MAX, &SizeRepeats::default())
            }
            Release::Budget(d) => {
                let budget = live / d;
                let excess = idle_bytes.saturating_sub(budget);
                self.policy
                    .dedicated_release(idle(), excess, &SizeRepeats::default())
            }
        };
        for c in victims {
            self.a.remove_chunk(c.id).unwrap();
            self.r.driver_frees += 1;
        }
    }
}

/// One run of RMM's `random_allocation_free` (benchmarks/random_allocations): `2 ×
/// num_allocations` steps; each allocates (size uniform in `[1, max_size]`) with probability
/// 0.73 while fewer than `num_allocations` have been made and the live total stays under
/// `max_usage`, and otherwise frees a random live block.
pub(crate) fn simulate(
    max_size: u64,
    num_allocations: u64,
    max_usage: u64,
    seed: u64,
    policy: GrowthPolicy,
    release: Release,
) -> SimResult {
    let mut rng = Rng(seed);
    let mut pool = SimPool::new(policy, release);
    let mut live: Vec<(u64, u64)> = Vec::new();
    let (mut live_bytes, mut count) = (0u64, 0u64);
    for _ in 0..num_allocations * 2 {
        let size = 1 + rng.next() % max_size;
        let do_alloc = live.is_empty()
            || (rng.next() % 100 < 73 && count < num_allocations && live_bytes + size < max_usage);
        if do_alloc {
            live.push((pool.alloc(size), size));
            count += 1;
            live_bytes += size;
            pool.r.allocs += 1;
            pool.r.peak_live = pool.r.peak_live.max(live_bytes);
        } else if !live.is_empty() {
            let (addr, size) =
                live.swap_remove((rng.next() % num_allocations) as usize % live.len());
            pool.a.free(addr).unwrap();
            live_bytes -= size;
        }
    }
    if let Err(e) = pool.a.check_invariants() {
        panic!("{e}");
    }
    pool.r
}

/// RMM's settings: `max_usage` 16,000 MiB.
const RMM_MAX_USAGE: u64 = 16_000 * MIB;

/// The bound the pool promises for this pattern, checked on the three sizes with RMM's smallest
/// count, for three seeds (about a second in debug builds).
#[test]
fn rmm_random_allocations_stay_within_bound() {
    for max in [1, 64, 256] {
        for seed in 0..3 {
            let r = simulate(
                max * MIB,
                1000,
                RMM_MAX_USAGE,
                seed,
                GrowthPolicy::default(),
                Release::Policy,
            );
            assert!(
                r.ratio() <= 1.15,
                "max {max} MiB seed {seed}: {r:?} ratio {:.3}",
                r.ratio()
            );
        }
    }
}

/// Prints peak reserved / peak live for the RMM pattern. Run with
/// `cargo test -p cuguard-shim --release -- --ignored --nocapture rmm_random_allocations_report`.
#[test]
#[ignore = "report; run in release mode"]
fn rmm_random_allocations_report() {
    let policy = GrowthPolicy::default();
    println!("{policy:?}");
    for max in [1, 64, 256] {
        for n in [1000, 10_000, 100_000] {
            let (mut worst, mut sum, mut calls, mut frees, mut allocs) = (0f64, 0f64, 0, 0, 0);
            const SEEDS: u64 = 5;
            for seed in 0..SEEDS {
                let r = simulate(max * MIB, n, RMM_MAX_USAGE, seed, policy, Release::Policy);
                worst = worst.max(r.ratio());
                sum += r.ratio();
                calls += r.driver_allocs;
                frees += r.driver_frees;
                allocs += r.allocs;
            }
            println!(
                "max {max:3} MiB, {n:6} allocations: peak reserved / peak live mean {:.3} worst {worst:.3}; \
                 driver allocs per alloc {:.3}, driver frees per alloc {:.3}",
                sum / SEEDS as f64,
                calls as f64 / allocs as f64,
                frees as f64 / allocs as f64,
            );
        }
    }
}

/// Compares policy variants (for tuning; prints a table).
#[test]
#[ignore = "exploration"]
fn rmm_random_allocations_explore() {
    let base = GrowthPolicy::default();
    let mut variants = vec![("default", base, Release::Policy)];
    variants.push(("largest first", base, Release::LargestFirst));
    variants.push(("release all", base, Release::All));
    variants.push(("release never", base, Release::Never));
    variants.push(("budget 1/16", base, Release::Budget(16)));
    variants.push(("budget 1/8", base, Release::Budget(8)));
    variants.push(("budget 1/4", base, Release::Budget(4)));
    for t in [2, 8, 16, 64] {
        variants.push((
            "threshold",
            GrowthPolicy {
                dedicated_threshold: t * MIB,
                ..base
            },
            Release::Policy,
        ));
    }
    for d in [4, 16] {
        variants.push((
            "waste 1/d",
            GrowthPolicy {
                dedicated_waste_divisor: d,
                ..base
            },
            Release::Policy,
        ));
    }
    for (g, m) in [(8, 20), (32, 20), (16, 64)] {
        variants.push((
            "shared growth",
            GrowthPolicy {
                growth_divisor: g,
                min_shared_chunk: m * MIB,
                ..base
            },
            Release::Policy,
        ));
    }
    for (name, p, release) in variants {
        let mut line = format!(
            "{name:14} T {:3} w 1/{:2} g 1/{:2} min {:2} {release:?}:",
            p.dedicated_threshold / MIB,
            p.dedicated_waste_divisor,
            p.growth_divisor,
            p.min_shared_chunk / MIB
        );
        for max in [1, 64, 256] {
            for n in [1000, 10_000, 100_000] {
                let (mut worst, mut calls, mut allocs) = (0f64, 0, 0);
                for seed in 0..3 {
                    let r = simulate(max * MIB, n, RMM_MAX_USAGE, seed, p, release);
                    worst = worst.max(r.ratio());
                    calls += r.driver_allocs;
                    allocs += r.allocs;
                }
                line += &format!(
                    " {max}/{n}: {worst:.3} ({:.2})",
                    calls as f64 / allocs as f64
                );
            }
        }
        println!("{line}");
    }
}

/// A training loop in miniature, as PyTorch without its caching allocator asks for memory: every
/// step allocates the same sequence of tensors (activations forward, each kept until the
/// backward pass frees it; temporaries freed a few allocations later), then frees the rest.
/// Returns the driver allocations of each step.
/// One step of a training loop in miniature: `per_step` allocations of 24 sizes in
/// [2 MiB, 2 MiB + `spread`) (a network's few shapes, with many repeats, some within 1/8 of each
/// other), each with its lifetime in allocations (`usize::MAX`: until the step's end; else 1-6).
/// The same every step; also run through the whole context pool (`ctxpool/tests.rs`).
pub(crate) fn loop_plan(seed: u64, per_step: usize, spread: u64) -> Vec<(u64, usize)> {
    let mut rng = Rng(seed);
    let shapes: Vec<u64> = (0..24).map(|_| 2 * MIB + rng.next() % spread).collect();
    (0..per_step)
        .map(|_| {
            let size = shapes[(rng.next() % shapes.len() as u64) as usize];
            let life = if rng.next().is_multiple_of(2) {
                usize::MAX
            } else {
                1 + (rng.next() % 6) as usize
            };
            (size, life)
        })
        .collect()
}

pub(crate) fn simulate_steps(
    steps: usize,
    per_step: usize,
    seed: u64,
    policy: GrowthPolicy,
    release: Release,
) -> (Vec<u64>, SimResult) {
    let plan = loop_plan(seed, per_step, 126 * MIB);
    let mut pool = SimPool::new(policy, release);
    let mut per = Vec::new();
    for _ in 0..steps {
        let before = pool.r.driver_allocs;
        let mut live: Vec<(u64, u64, usize)> = Vec::new(); // (addr, size, free after this index)
        let mut live_bytes = 0u64;
        for (i, &(size, life)) in plan.iter().enumerate() {
            live.retain(|&(addr, size, until)| {
                let keep = until > i;
                if !keep {
                    pool.a.free(addr).unwrap();
                    live_bytes -= size;
                }
                keep
            });
            let addr = pool.alloc(size);
            live.push((addr, size, i.saturating_add(life)));
            live_bytes += size;
            pool.r.allocs += 1;
            pool.r.peak_live = pool.r.peak_live.max(live_bytes);
        }
        // The backward pass: what is left goes, latest first.
        for (addr, _, _) in live.into_iter().rev() {
            pool.a.free(addr).unwrap();
        }
        per.push(pool.r.driver_allocs - before);
    }
    if let Err(e) = pool.a.check_invariants() {
        panic!("{e}");
    }
    (per, pool.r)
}

/// A training loop asks the driver for nothing once it has run a few steps, and holds little
/// more than it uses; the rule before (largest first, whatever the size) asked for 20 to 30
/// chunks every step, forever.
#[test]
fn a_repeating_loop_stops_asking_the_driver() {
    for seed in 0..4 {
        let (per, r) = simulate_steps(10, 200, seed, GrowthPolicy::default(), Release::Policy);
        assert_eq!(
            per[3..],
            [0; 7],
            "seed {seed}: chunks added per step {per:?}"
        );
        assert!(
            r.ratio() <= 1.15,
            "seed {seed}: {r:?} ratio {:.3}",
            r.ratio()
        );
        let (before, _) = simulate_steps(
            10,
            200,
            seed,
            GrowthPolicy::default(),
            Release::LargestFirst,
        );
        assert!(
            before[3..].iter().all(|&n| n >= 15),
            "seed {seed}: the old rule {before:?}"
        );
    }
}

/// The training loop under each release rule: chunks added per step, peak reserved / peak live.
/// Run with `cargo test -p cuguard-pool --release -- --ignored --nocapture a_repeating_loop_explore`.
#[test]
#[ignore = "exploration"]
fn a_repeating_loop_explore() {
    for release in [
        Release::Policy,
        Release::LargestFirst,
        Release::Never,
        Release::Budget(8),
    ] {
        let mut line = format!("{release:?}:");
        for seed in 0..4 {
            let (per, r) = simulate_steps(10, 200, seed, GrowthPolicy::default(), release);
            line += &format!(" {per:?} {:.3};", r.ratio());
        }
        println!("{line}");
    }
}
