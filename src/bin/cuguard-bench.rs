//! `cuguard-bench`: generates synthetic reports and times `cuguard summary` and `cuguard check`
//! on them, with each run's peak resident memory.
//!
//! ```text
//! cuguard-bench [--cuguard PATH] [--before PATH] [--dir DIR] [--reports N] [--leaks N]
//!               [--stacks N] [--sites N] [--depth N]
//!               [--shapes many,merged,one,fleet,distinct,shared,ranks,functions,wide]
//!               [--rounds N] [--keep] [--reuse]
//! ```
//!
//! It runs three shapes by default, each with `--leaks` leaks in all (default 1,000,000):
//! `many` (`--reports` files, default 1,000), `merged` (the same processes in one merged report)
//! and `one` (a single report holding every leak). For each it prints the input size, the largest
//! single report, wall time and peak RSS of `summary` and `check`, and the memory goal
//! (2 × the largest report + 64 MiB). Reports are deterministic (a fixed pseudo-random sequence)
//! and written with the report crate's types.
//! The numbers for this repository's machine are in docs/cli.md (the three shapes) and
//! docs/benchmarks.md ("The command at scale", the fleet; "The command over many distinct
//! sites", `distinct` and `shared`).
//!
//! The fourth shape, `fleet`, is the command at scale (issue 14): `--reports` processes (give
//! 10,000) holding `--leaks` leaks (give 10,000,000), each process leaking from 48 of a fleet-wide
//! pool of `--stacks` stacks (default for this shape 400) charged to `--sites` distinct sites
//! (default 300), a tenth of the stacks held by PyTorch's caching allocator and a twentieth by
//! cuBLAS; one process in six is written into a merged report of eight processes. `distinct`
//! (issue 23) is the same but for its stacks: each process leaks from 50 stacks of its own, each
//! charged to a site of its own, so every process brings 50 new sites (500,000 at 10,000
//! processes); `shared` gives every process the same 50 stacks and sites. `ranks` (issue 40) is
//! a large training job: every process is its own rank (rank = its number, every report a file
//! of its own), leaking from 50 stacks of its own of 12 frames (unless `--depth` says), each
//! charged to a site `site_F (ranks.cc:L)` with `F` drawn from [`RANK_FUNCTIONS`] names and `L`
//! from [`RANK_LINES`] lines, so that sites repeat across ranks now and then: about 400,000 are
//! distinct at 10,000 processes (give `--leaks` 1,000 per process).
//!
//! `functions` and `wide` (issue 56) are a training job as a program makes it: every process
//! its own rank, every frame of a stack past the shim's (12, unless `--depth` says) a function
//! drawn from the program's 200 (see [`program`]), so that sites recur across stacks and ranks
//! along differing call paths. `functions` gives each process 50 stacks of its own; `wide`
//! `--stacks` (default 2,000; the report keeps them all) with sites from 200 functions × 100
//! lines: thousands of distinct sites per rank.
//!
//! For these shapes the table gives, per build: `cat` of the same files (output
//! discarded, as the commands' is; once untimed first, so that every timed read finds the files
//! cached), then summary's and check's wall time, CPU time and peak RSS (the child's
//! `ru_maxrss`), and each one's wall time as a multiple of that `cat`'s, against the goals; for
//! `--cuguard` and, with `--before`, for another build beside it on the same files, `--rounds`
//! times, the builds interleaved. The load average is printed when each shape begins.
//! `--reuse` keeps the files of an earlier `--keep` run when their shape and counts match.
//!
//! ```sh
//! cargo build --release -p cuguard
//! target/release/cuguard-bench --shapes distinct,shared --reports 10000 --leaks 10000000 \
//!     --before /tmp/cuguard-before --rounds 2 --keep --reuse
//! target/release/cuguard-bench --shapes ranks --reports 10000 --leaks 10000000 \
//!     --before /tmp/cuguard-before --dir /tmp/cuguard-bench --keep --reuse
//! target/release/cuguard-bench --shapes functions,wide --reports 10000 --leaks 10000000 \
//!     --before /tmp/cuguard-before --dir /tmp/cuguard-bench --keep --reuse
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

#[path = "cuguard-bench/program.rs"]
mod program;

use cuguard_format::merged::{Merged, MergedWriter};
use cuguard_format::{
    Addr, Context, Device, DeviceStats, Driver, Event, EventKind, Frame, Leak, LeakState, Memory,
    OwnerInfo, Process, Reason, Report, Stack, StackSite,
};

struct Options {
    cuguard: PathBuf,
    before: Option<PathBuf>,
    dir: PathBuf,
    reports: usize,
    leaks: usize,
    stacks: Option<usize>,
    sites: usize,
    /// Frames per stack; `None`: 12 for `ranks`, else 16.
    depth: Option<usize>,
    shapes: Vec<String>,
    keep: bool,
    reuse: bool,
    rounds: usize,
}

fn parse() -> Result<Options, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut o = Options {
        cuguard: exe.with_file_name("cuguard"),
        before: None,
        dir: PathBuf::from("target/cuguard-bench"),
        reports: 1000,
        leaks: 1_000_000,
        stacks: None,
        sites: 300,
        depth: None,
        shapes: vec!["many".into(), "merged".into(), "one".into()],
        keep: false,
        reuse: false,
        rounds: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--cuguard" => o.cuguard = value()?.into(),
            "--before" => o.before = Some(value()?.into()),
            "--dir" => o.dir = value()?.into(),
            "--reports" => o.reports = value()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--leaks" => o.leaks = value()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--stacks" => o.stacks = Some(value()?.parse().map_err(|e| format!("{a}: {e}"))?),
            "--sites" => o.sites = value()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--depth" => o.depth = Some(value()?.parse().map_err(|e| format!("{a}: {e}"))?),
            "--shapes" => o.shapes = value()?.split(',').map(String::from).collect(),
            "--rounds" => o.rounds = value()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--keep" => o.keep = true,
            "--reuse" => o.reuse = true,
            "-h" | "--help" => {
                return Err(
                    "usage: cuguard-bench [--cuguard PATH] [--before PATH] [--dir DIR] \
                            [--reports N] [--leaks N] [--stacks N] [--sites N] [--depth N] \
                            [--shapes many,merged,one,fleet,distinct,shared,ranks,functions,\
                            wide] [--rounds N] [--keep] [--reuse]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.reports == 0 || o.stacks == Some(0) || o.sites == 0 || o.rounds == 0 {
        return Err("--reports, --stacks, --sites and --rounds must be positive".into());
    }
    Ok(o)
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// One synthetic report: `leaks` leaks spread over `stacks` stacks of `depth` frames.
fn report(pid: u32, leaks: usize, o: &Options, rng: &mut Rng) -> Report {
    let stacks = o.stacks.unwrap_or(64);
    let process = Process {
        pid,
        ppid: 1,
        exe: "/opt/bench/worker".into(),
        argv: vec!["worker".into(), "--id".into(), pid.to_string()],
        hostname: "bench".into(),
        rank: Some(pid % 8),
        start_unix_ms: 1_764_460_800_000,
        end_unix_ms: 1_764_460_900_000,
        labels: None,
    };
    let mut r = base_report(process, 0);
    let api: Arc<str> = "cuMemAlloc_v2".into();
    let mut total = 0u64;
    r.leaks.reserve(leaks);
    for i in 0..leaks {
        let size = 256 << (rng.next() % 16);
        total += size;
        let stack = rng.next() % stacks as u64 + 1;
        let requested = size - rng.next() % 256;
        let thread = u64::from(pid) + rng.next() % 4;
        let time_ms = rng.next() % 100_000;
        r.leaks.push(Leak {
            allocation: cuguard_format::Allocation {
                address: Addr(0x7f00_0000_0000u64 + (i as u64) * 0x10_0000),
                size,
                requested,
                api: api.clone(),
                memory: Memory::Device,
                device: 0,
                context: Some(1),
                thread,
                seq: i as u64,
                time_ms,
                stack: Some(stack),
                tag: None,
            },
            state: LeakState::LiveAtExit,
            handle: None,
            owner: None,
        });
    }
    r.events.push(double_free(1, Some(1)));
    let shim: Arc<str> = "/opt/cuguard/lib/libcuguard.so".into();
    let worker: Arc<str> = "/opt/bench/worker".into();
    let file: Arc<str> = "worker.cc".into();
    for id in 1..=stacks {
        let frames = (0..o.depth.unwrap_or(16))
            .map(|d| {
                let (module, function) = if d == 0 {
                    (shim.clone(), "cuMemAlloc_v2".to_string())
                } else {
                    (
                        worker.clone(),
                        format!("fn_{}_{d}", (id * 7 + d) % (stacks / 2 + 1)),
                    )
                };
                Frame {
                    ip: Addr(0x5500_0000_0000u64 + (id * 64 + d) as u64 * 16),
                    module,
                    offset: Addr(((id * 64 + d) * 16) as u64),
                    function: Some(function.into()),
                    file: Some(file.clone()),
                    line: Some(d as u32 + 10),
                    inlined: None,
                }
            })
            .collect();
        r.stacks.push(Stack {
            id: id as u64,
            frames,
            python: Vec::new(),
            site: None,
            owner: None,
            mixed: Vec::new(),
            origin: None,
        });
    }
    r.stats.devices.push(all_live(0, total, leaks));
    r
}

/// A complete report of `process`, written at its exit, on one H200 (`device`) with its primary
/// context: what every synthetic report starts from.
fn base_report(process: Process, device: u32) -> Report {
    let mut r = Report::new(true, Reason::Exit, process);
    r.tool.version = "bench".into();
    r.driver = Driver {
        version: 13000,
        path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
    };
    r.devices.push(Device {
        ordinal: device,
        name: "NVIDIA H200".into(),
        total_bytes: 150_754_820_096,
        limit_bytes: None,
    });
    r.contexts.push(Context {
        id: 1,
        handle: Addr(0x55d0_c0a1_b2c0),
        device,
        primary: true,
        destroyed: false,
        destroyed_by: None,
        created_ms: None,
        destroyed_ms: None,
        stack: None,
        overhead_bytes: None,
    });
    r
}

/// A double free of the first leak's address, on `thread` from `stack`.
fn double_free(thread: u64, stack: Option<u64>) -> Event {
    Event {
        kind: EventKind::DoubleFree,
        address: Some(Addr(0x7f00_0000_0000)),
        api: Some("cuMemFree_v2".into()),
        seq: 1,
        thread,
        stack,
        result: Some(1),
        size: None,
        context: None,
        time_ms: None,
        message: None,
        device: None,
    }
}

/// The counters of `device` when its `leaks` allocations, `total` bytes, are all still live.
fn all_live(device: u32, total: u64, leaks: usize) -> DeviceStats {
    DeviceStats {
        device,
        live_bytes: total,
        peak_live_bytes: total,
        total_allocated_bytes: total,
        allocations: leaks as u64,
        frees: 0,
        released_bytes: None,
        host_pinned_live_bytes: None,
        pool: None,
    }
}

fn generate(dir: &Path, files: usize, o: &Options) -> std::io::Result<(u64, u64)> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut total, mut largest) = (0u64, 0u64);
    for i in 0..files {
        let leaks = o.leaks / files + usize::from(i < o.leaks % files);
        let report = report(10_000 + i as u32, leaks, o, &mut rng);
        let path = dir.join(format!("cuguard.worker.{}.json", 10_000 + i));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        cuguard_format::write(&report, &mut out)?;
        out.flush()?;
        let size = std::fs::metadata(&path)?.len();
        total += size;
        largest = largest.max(size);
    }
    Ok((total, largest))
}

/// Runs a command with output discarded; returns (wall seconds, CPU seconds, peak RSS in bytes,
/// exit code).
fn measure(cmd: &mut Command) -> std::io::Result<(f64, f64, u64, i32)> {
    let start = Instant::now();
    let child = cmd.stdout(Stdio::null()).spawn()?;
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it for our own child, which nothing else
    // waits for (the Child handle is dropped without waiting).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above: our own child, a valid status and rusage to fill.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let seconds = start.elapsed().as_secs_f64();
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    let cpu = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = cpu(usage.ru_utime) + cpu(usage.ru_stime);
    Ok((seconds, cpu, usage.ru_maxrss as u64 * 1024, code))
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// The fleet's owners: who holds the leaks of stack `g` of the fleet-wide pool.
fn fleet_owner(g: u64) -> &'static str {
    if g.is_multiple_of(10) {
        "pytorch_caching_allocator"
    } else if g % 20 == 5 {
        "cublas"
    } else {
        "program"
    }
}

/// Which stacks a process of a fleet-like shape allocates from, and the site each is charged
/// to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// The fleet: 48 stacks drawn from a fleet-wide pool of `stacks`, charged to `o.sites`
    /// sites.
    Fleet { stacks: usize },
    /// [`PER_REPORT`] stacks of its own, each its own site: every process brings new sites.
    Distinct,
    /// The same [`PER_REPORT`] stacks and sites in every process.
    Shared,
    /// A training job, every process its own rank: [`PER_REPORT`] stacks of its own, each
    /// charged to a site drawn from [`RANK_FUNCTIONS`] × [`RANK_LINES`] (see [`rank_site`]).
    Ranks,
    /// A training job, every process its own rank (issue 56): [`PER_REPORT`] stacks of its own,
    /// of the program's functions ([`program::stack`]).
    Functions,
    /// As [`Layout::Functions`], with `stacks` stacks per process and sites from
    /// [`program::WIDE_LINES`] lines per function: thousands of distinct sites per rank.
    Wide { stacks: usize },
}

/// How many stacks (and sites) each process of the `distinct`, `shared` and `ranks` shapes has.
const PER_REPORT: u64 = 50;

/// How many function names the sites of `ranks` are drawn from.
const RANK_FUNCTIONS: u64 = 400;

/// How many lines the sites of `ranks` are drawn from: with [`RANK_FUNCTIONS`], a million
/// places, of which 500,000 draws (10,000 processes) hit about 393,000.
const RANK_LINES: u64 = 2500;

/// The site of stack `g` of `ranks`: (function number, line), the same for the same `g`
/// (a splitmix64 of it).
fn rank_site(g: u64) -> (u64, u32) {
    let z = program::splitmix(g);
    (z % RANK_FUNCTIONS, ((z >> 32) % RANK_LINES) as u32 + 1)
}

impl Layout {
    /// The fleet-like shape called `name`, if there is one.
    fn of(name: &str, o: &Options) -> Option<Layout> {
        let stacks = |default| o.stacks.unwrap_or(default);
        Some(match name {
            "fleet" => Layout::Fleet {
                stacks: stacks(400),
            },
            "distinct" => Layout::Distinct,
            "shared" => Layout::Shared,
            "ranks" => Layout::Ranks,
            "functions" => Layout::Functions,
            "wide" => Layout::Wide {
                stacks: stacks(2000),
            },
            _ => return None,
        })
    }

    /// The shape's name on the command line and in its stamp.
    fn name(self) -> &'static str {
        match self {
            Layout::Fleet { .. } => "fleet",
            Layout::Distinct => "distinct",
            Layout::Shared => "shared",
            Layout::Ranks => "ranks",
            Layout::Functions => "functions",
            Layout::Wide { .. } => "wide",
        }
    }

    /// Whether every process is its own rank, in a file of its own.
    fn ranked(self) -> bool {
        matches!(
            self,
            Layout::Ranks | Layout::Functions | Layout::Wide { .. }
        )
    }

    /// Frames per stack: `--depth`, else 12 for a ranked shape and 16 for the others.
    fn depth(self, o: &Options) -> usize {
        o.depth.unwrap_or(if self.ranked() { 12 } else { 16 })
    }

    /// The rank of process `pid` (the `i`-th has pid 20,000 + `i`): its number for `ranks`, else
    /// one of 8.
    fn rank(self, pid: u32) -> u32 {
        if self.ranked() { pid - 20_000 } else { pid % 8 }
    }

    /// The stacks process number `i` allocates from (ids from 1), maybe repeated.
    fn stacks(self, i: usize, rng: &mut Rng) -> Vec<u64> {
        match self {
            Layout::Fleet { stacks } => (0..48).map(|_| rng.next() % stacks as u64 + 1).collect(),
            Layout::Distinct | Layout::Ranks | Layout::Functions => (1..=PER_REPORT)
                .map(|k| i as u64 * PER_REPORT + k)
                .collect(),
            Layout::Wide { stacks } => (1..=stacks as u64)
                .map(|k| i as u64 * stacks as u64 + k)
                .collect(),
            Layout::Shared => (1..=PER_REPORT).collect(),
        }
    }

    /// The site stack `g` is charged to.
    fn site(self, g: u64, o: &Options) -> u64 {
        match self {
            Layout::Fleet { .. } => g % o.sites as u64,
            Layout::Distinct
            | Layout::Shared
            | Layout::Ranks
            | Layout::Functions
            | Layout::Wide { .. } => g,
        }
    }
}

/// One process of a fleet-like shape (see [`Layout`]): `leaks` leaks from the stacks `mine`,
/// with owners.
fn fleet_report(
    pid: u32,
    leaks: usize,
    mine: &[u64],
    layout: Layout,
    o: &Options,
    rng: &mut Rng,
) -> Report {
    let process = Process {
        pid,
        ppid: 1,
        exe: "/opt/fleet/bin/trainer".into(),
        argv: vec![
            "trainer".into(),
            "--rank".into(),
            layout.rank(pid).to_string(),
        ],
        hostname: format!("node{:04}", pid / 8),
        rank: Some(layout.rank(pid)),
        start_unix_ms: 1_764_460_800_000,
        end_unix_ms: 1_764_460_900_000,
        labels: None,
    };
    let device = pid % 8;
    let mut r = base_report(process, device);
    for (id, kind, label) in [
        ("program", "program", "the program"),
        (
            "pytorch_caching_allocator",
            "framework_cache",
            "PyTorch's caching allocator",
        ),
        ("cublas", "library", "cuBLAS workspace"),
    ] {
        r.owners.push(OwnerInfo {
            id: id.into(),
            kind: kind.into(),
            label: label.into(),
            hint: None,
        });
    }
    let total = fleet_leaks(&mut r, leaks, mine, rng);
    r.events
        .push(double_free(u64::from(pid), mine.first().copied()));
    let mut ids = mine.to_vec();
    ids.sort_unstable();
    ids.dedup();
    for g in ids {
        r.stacks.push(match layout {
            Layout::Functions => program::stack(g, layout.depth(o), false),
            Layout::Wide { .. } => program::stack(g, layout.depth(o), true),
            _ => fleet_stack(g, layout, o),
        });
    }
    r.stats.devices.push(all_live(device, total, leaks));
    r
}

/// Adds `leaks` leaks to `r` (its process's device), each from one of the stacks `mine` and
/// owned as [`fleet_owner`] says; gives their bytes.
fn fleet_leaks(r: &mut Report, leaks: usize, mine: &[u64], rng: &mut Rng) -> u64 {
    let (pid, device) = (r.process.pid, r.devices[0].ordinal);
    let apis: [Arc<str>; 2] = ["cuMemAlloc_v2".into(), "cuMemAllocAsync".into()];
    let mut total = 0u64;
    r.leaks.reserve(leaks);
    for i in 0..leaks {
        let size = 256 << (rng.next() % 16);
        total += size;
        let stack = mine[(rng.next() % mine.len() as u64) as usize];
        let requested = size - rng.next() % 256;
        let thread = u64::from(pid) + rng.next() % 4;
        let time_ms = rng.next() % 100_000;
        let api = apis[usize::from(stack % 7 == 3)].clone();
        let memory = if api.ends_with("Async") {
            Memory::Async
        } else {
            Memory::Device
        };
        r.leaks.push(Leak {
            allocation: cuguard_format::Allocation {
                address: Addr(0x7f00_0000_0000u64 + (i as u64) * 0x10_0000),
                size,
                requested,
                memory,
                api,
                device,
                context: Some(1),
                thread,
                seq: i as u64,
                time_ms,
                stack: Some(stack),
                tag: None,
            },
            state: LeakState::LiveAtExit,
            handle: None,
            owner: Some(fleet_owner(stack).into()),
        });
    }
    total
}

/// The stack `g` of a fleet-like shape: the shim's frame, the site's (a layer, the caching
/// allocator's, or a rank's), then the training loop's.
fn fleet_stack(g: u64, layout: Layout, o: &Options) -> Stack {
    let shim: Arc<str> = "/opt/cuguard/lib/libcuguard.so".into();
    let trainer: Arc<str> = "/opt/fleet/bin/trainer".into();
    let torch: Arc<str> = "/opt/fleet/lib/libtorch_cuda.so".into();
    let site = layout.site(g, o);
    let (rank_function, rank_line) = rank_site(g);
    let frames = (0..layout.depth(o))
        .map(|d| {
            let (module, function, file) = match d {
                0 => (shim.clone(), "cuMemAlloc_v2".to_string(), None),
                1 if layout == Layout::Ranks => (
                    trainer.clone(),
                    format!("site_{rank_function}"),
                    Some("ranks.cc"),
                ),
                1 if fleet_owner(g) != "program" => (
                    torch.clone(),
                    format!("c10::cuda::alloc_{site}"),
                    Some("CUDACachingAllocator.cpp"),
                ),
                1 => (
                    trainer.clone(),
                    format!("trainer::layer_{site}::forward"),
                    Some("layers.cc"),
                ),
                _ => (
                    trainer.clone(),
                    format!("trainer::step_{}", (g as usize + d) % 40),
                    Some("train.cc"),
                ),
            };
            Frame {
                ip: Addr(0x5500_0000_0000u64 + (g * 64 + d as u64) * 16),
                module,
                offset: Addr((g * 64 + d as u64) * 16),
                function: Some(function.into()),
                file: file.map(Into::into),
                line: Some(if layout == Layout::Ranks && d == 1 {
                    rank_line
                } else {
                    d as u32 * 3 + (site % 50) as u32 + 10
                }),
                inlined: None,
            }
        })
        .collect();
    // The shim's choice, so that the site is keyed `function (file:line)` (without it, by the
    // function alone).
    let site = (layout == Layout::Ranks).then(|| StackSite {
        in_: "frames".into(),
        index: 1,
        fingerprint: format!("{rank_function:03}{rank_line:04}"),
        kind: Some("user".into()),
    });
    Stack {
        id: g,
        frames,
        python: Vec::new(),
        site,
        owner: Some(fleet_owner(g).into()),
        mixed: Vec::new(),
        origin: None,
    }
}

/// Writes a fleet-like shape into `dir`: `o.reports` processes, one in six of them (the first
/// eight of every 48 ranks) in merged reports of eight, but for a ranked shape (each a file); gives
/// (files, total bytes, largest file).
fn generate_fleet(dir: &Path, layout: Layout, o: &Options) -> std::io::Result<(usize, u64, u64)> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut files, mut total, mut largest) = (0usize, 0u64, 0u64);
    let mut merged: Option<(PathBuf, MergedWriter<std::io::BufWriter<std::fs::File>>)> = None;
    for i in 0..o.reports {
        let leaks = o.leaks / o.reports + usize::from(i < o.leaks % o.reports);
        let pid = 20_000 + i as u32;
        let mine = layout.stacks(i, &mut rng);
        let report = fleet_report(pid, leaks, &mine, layout, o, &mut rng);
        if i % 48 < 8 && !layout.ranked() {
            if merged.is_none() {
                let path = dir.join(format!("cuguard.merged.{pid}.json"));
                let out = std::io::BufWriter::new(std::fs::File::create(&path)?);
                let head = Merged {
                    created_unix_ms: 1_764_460_950_000,
                    inputs: (0..8)
                        .map(|k| format!("cuguard.trainer.{}.json", pid + k))
                        .collect(),
                    by: None,
                };
                merged = Some((path, MergedWriter::begin(out, &head)?));
            }
            if let Some((_, w)) = merged.as_mut() {
                w.process(&cuguard_format::to_vec(&report))?;
            }
            if (i % 48 == 7 || i + 1 == o.reports)
                && let Some((path, w)) = merged.take()
            {
                w.finish()?;
                let size = std::fs::metadata(&path)?.len();
                files += 1;
                total += size;
                largest = largest.max(size);
            }
            continue;
        }
        let path = dir.join(format!("cuguard.trainer.{pid}.json"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        cuguard_format::write(&report, &mut out)?;
        out.flush()?;
        let size = std::fs::metadata(&path)?.len();
        files += 1;
        total += size;
        largest = largest.max(size);
    }
    Ok((files, total, largest))
}

/// A fleet-like shape's files, written anew unless `--reuse` finds those of an earlier `--keep`
/// run.
fn fleet_files(dir: &Path, layout: Layout, o: &Options) -> Result<(usize, u64, u64), String> {
    let stamp = dir.join("fleet.stamp");
    let want = match layout {
        Layout::Fleet { stacks } => format!(
            "reports {} leaks {} stacks {stacks} sites {} depth {}\n",
            o.reports,
            o.leaks,
            o.sites,
            layout.depth(o)
        ),
        Layout::Wide { stacks } => format!(
            "wide reports {} leaks {} stacks {stacks} depth {}\n",
            o.reports,
            o.leaks,
            layout.depth(o)
        ),
        _ => format!(
            "{} reports {} leaks {} depth {}\n",
            layout.name(),
            o.reports,
            o.leaks,
            layout.depth(o)
        ),
    };
    if o.reuse && std::fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        let (mut files, mut total, mut largest) = (0usize, 0u64, 0u64);
        for e in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            if e.path().extension().is_some_and(|x| x == "json") {
                let size = e.metadata().map_err(|e| e.to_string())?.len();
                files += 1;
                total += size;
                largest = largest.max(size);
            }
        }
        return Ok((files, total, largest));
    }
    let got = generate_fleet(dir, layout, o).map_err(|e| e.to_string())?;
    // Outside the reports' `*.json`, so the commands do not read it.
    std::fs::write(&stamp, want).map_err(|e| e.to_string())?;
    Ok(got)
}

/// The report files of a shape's directory, sorted (the order `cuguard` reads them in).
fn json_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let path = e.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|x| x == "json") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Times `cat` of `files` (output discarded, as the commands' is): (wall, CPU) seconds.
fn cat(files: &[PathBuf]) -> Result<(f64, f64), String> {
    let (t, u, _, code) = measure(Command::new("cat").args(files)).map_err(|e| e.to_string())?;
    if code != 0 {
        return Err(format!("cat exited with {code}"));
    }
    Ok((t, u))
}

/// Times `cat` of the shape's files, then `summary` and `check --format json` of one build on
/// them; prints a row, with each command's wall time as a multiple of `cat`'s just before.
fn fleet_row(
    label: &str,
    cuguard: &Path,
    dir: &Path,
    input: u64,
    goal: &str,
    o: &Options,
) -> Result<(), String> {
    let files = json_files(dir)?;
    let (tcat, _) = cat(&files)?;
    let (ts, us, rs, cs) =
        measure(Command::new(cuguard).arg("summary").arg(dir)).map_err(|e| e.to_string())?;
    let (tc, uc, rc, cc) = measure(
        Command::new(cuguard)
            .args(["check", "--format", "json"])
            .arg(dir),
    )
    .map_err(|e| e.to_string())?;
    if cs != 0 || cc != 1 {
        return Err(format!(
            "{label}: unexpected exit codes: summary {cs}, check {cc} (want 0, 1)"
        ));
    }
    println!(
        "{label:<8} {:>6} {:>9} {:>9} {:>10.1} {:>6.2}s {:>7.2}s {:>7.2}s {:>8.1} {:>5.1}× {:>7.2}s {:>7.2}s {:>8.1} {:>5.1}×   {goal}",
        files.len(),
        o.reports,
        o.leaks,
        mib(input),
        tcat,
        ts,
        us,
        mib(rs),
        ts / tcat,
        tc,
        uc,
        mib(rc),
        tc / tcat,
    );
    let _ = std::io::stdout().flush();
    Ok(())
}

/// A fleet-like shape (`fleet`, `distinct`, `shared`), measured for `--cuguard` and `--before`,
/// `--rounds` times, the builds interleaved.
fn fleet(layout: Layout, o: &Options) -> Result<(), String> {
    let dir = o.dir.join(layout.name());
    let (_, input, _) = fleet_files(&dir, layout, o)?;
    let goal = match layout {
        Layout::Fleet { .. } => "≤ 3 s, ≤ 64 MiB",
        Layout::Distinct | Layout::Ranks | Layout::Functions | Layout::Wide { .. } => {
            "≤ 4.5× cat, ≤ 64 MiB"
        }
        Layout::Shared => "RSS flat in reports",
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    let what = match layout {
        Layout::Fleet { stacks } => format!(
            "48 stacks per process from a shared pool of {stacks}, charged to {} sites",
            o.sites
        ),
        Layout::Distinct => format!("{PER_REPORT} sites per process, each process's its own"),
        Layout::Shared => format!("{PER_REPORT} sites per process, the same in every process"),
        Layout::Ranks => format!(
            "each process its own rank, {PER_REPORT} stacks of {} frames each, sites from \
             {RANK_FUNCTIONS} functions × {RANK_LINES} lines",
            layout.depth(o)
        ),
        Layout::Functions => program::what(PER_REPORT, layout.depth(o), false),
        Layout::Wide { stacks } => program::what(stacks as u64, layout.depth(o), true),
    };
    println!("{}: {what}; load average {}", layout.name(), load.join(" "));
    println!(
        "{:<8} {:>6} {:>9} {:>9} {:>10} {:>7} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>8} {:>6}   goal",
        "build",
        "files",
        "processes",
        "leaks",
        "input MiB",
        "cat",
        "summary",
        "cpu",
        "RSS MiB",
        "/cat",
        "check",
        "cpu",
        "RSS MiB",
        "/cat"
    );
    // Once untimed, so that every timed read finds the files in the page cache.
    cat(&json_files(&dir)?)?;
    for _ in 0..o.rounds {
        if let Some(before) = &o.before {
            fleet_row("before", before, &dir, input, goal, o)?;
        }
        fleet_row("after", &o.cuguard, &dir, input, goal, o)?;
    }
    if !o.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let o = parse()?;
    if !o.cuguard.is_file() {
        return Err(format!(
            "{}: not found (build it, or pass --cuguard)",
            o.cuguard.display()
        ));
    }
    if let Some(before) = &o.before
        && !before.is_file()
    {
        return Err(format!("{}: not found", before.display()));
    }
    let (fleet_shapes, shapes): (Vec<&str>, Vec<&str>) = o
        .shapes
        .iter()
        .map(String::as_str)
        .partition(|s| Layout::of(s, &o).is_some());
    for (i, layout) in fleet_shapes
        .iter()
        .filter_map(|s| Layout::of(s, &o))
        .enumerate()
    {
        if i > 0 {
            println!();
        }
        fleet(layout, &o)?;
    }
    if !fleet_shapes.is_empty() {
        if shapes.is_empty() {
            return Ok(());
        }
        println!();
    }
    println!(
        "{:<7} {:>6} {:>9} {:>10} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "shape",
        "files",
        "leaks",
        "input MiB",
        "largest MiB",
        "summary",
        "cpu",
        "RSS MiB",
        "check",
        "cpu",
        "RSS MiB",
        "goal MiB"
    );
    for shape in shapes {
        let dir = o.dir.join(shape);
        let (files, input, largest) = match shape {
            "many" | "merged" => {
                let src = o.dir.join("many-src");
                let (total, largest) = if shape == "many" {
                    generate(&dir, o.reports, &o).map_err(|e| e.to_string())?
                } else {
                    generate(&src, o.reports, &o).map_err(|e| e.to_string())?;
                    let _ = std::fs::remove_dir_all(&dir);
                    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                    let out = dir.join("merged.json");
                    let status = Command::new(&o.cuguard)
                        .arg("merge")
                        .arg("-o")
                        .arg(&out)
                        .arg(&src)
                        .status()
                        .map_err(|e| e.to_string())?;
                    if !status.success() {
                        return Err("cuguard merge failed".into());
                    }
                    let _ = std::fs::remove_dir_all(&src);
                    let size = std::fs::metadata(&out).map_err(|e| e.to_string())?.len();
                    (size, size)
                };
                (if shape == "many" { o.reports } else { 1 }, total, largest)
            }
            _ => {
                let (total, largest) = generate(&dir, 1, &o).map_err(|e| e.to_string())?;
                (1, total, largest)
            }
        };
        let (ts, us, rs, cs) = measure(Command::new(&o.cuguard).arg("summary").arg(&dir))
            .map_err(|e| e.to_string())?;
        let (tc, uc, rc, cc) = measure(
            Command::new(&o.cuguard)
                .args(["check", "--format", "json"])
                .arg(&dir),
        )
        .map_err(|e| e.to_string())?;
        if cs != 0 || cc != 1 {
            return Err(format!(
                "unexpected exit codes: summary {cs}, check {cc} (want 0, 1)"
            ));
        }
        println!(
            "{shape:<7} {files:>6} {:>9} {:>10.1} {:>11.2} {:>7.2}s {:>7.2}s {:>8.1} {:>7.2}s {:>7.2}s {:>8.1} {:>9.1}",
            o.leaks,
            mib(input),
            mib(largest),
            ts,
            us,
            mib(rs),
            tc,
            uc,
            mib(rc),
            mib(2 * largest) + 64.0,
        );
        let _ = std::io::stdout().flush();
        if !o.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cuguard-bench: {e}");
            ExitCode::from(2)
        }
    }
}
