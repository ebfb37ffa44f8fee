//! `cuguard-bench`: generates synthetic reports and times `cuguard summary` and `cuguard check`
//! on them, with each run's peak resident memory.
//!
//! ```text
//! cuguard-bench [--cuguard PATH] [--dir DIR] [--reports N] [--leaks N] [--stacks N] [--depth N]
//!               [--shapes many,merged,one] [--keep]
//! ```
//!
//! It runs three shapes, each with `--leaks` leaks in all (default 1,000,000):
//! `many` (`--reports` files, default 1,000), `merged` (the same processes in one merged report)
//! and `one` (a single report holding every leak). For each it prints the input size, the largest
//! single report, wall time and peak RSS of `summary` and `check`, and the memory goal
//! (2 × the largest report + 64 MiB). Reports are deterministic (a fixed pseudo-random sequence)
//! and written with the report crate's types.
//! The numbers for this repository's machine are in docs/cli.md.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

use cuguard::report::{
    Addr, Context, Device, DeviceStats, Driver, Event, EventKind, Frame, Leak, LeakState, Memory,
    Process, Reason, Report, Stack,
};

struct Options {
    cuguard: PathBuf,
    dir: PathBuf,
    reports: usize,
    leaks: usize,
    stacks: usize,
    depth: usize,
    shapes: Vec<String>,
    keep: bool,
}

fn parse() -> Result<Options, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut o = Options {
        cuguard: exe.with_file_name("cuguard"),
        dir: PathBuf::from("target/cuguard-bench"),
        reports: 1000,
        leaks: 1_000_000,
        stacks: 64,
        depth: 16,
        shapes: vec!["many".into(), "merged".into(), "one".into()],
        keep: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--cuguard" => o.cuguard = value()?.into(),
            "--dir" => o.dir = value()?.into(),
            "--reports" => o.reports = value()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--leaks" => o.leaks = value()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--stacks" => o.stacks = value()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--depth" => o.depth = value()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--shapes" => o.shapes = value()?.split(',').map(String::from).collect(),
            "--keep" => o.keep = true,
            "-h" | "--help" => {
                return Err("usage: cuguard-bench [--cuguard PATH] [--dir DIR] [--reports N] \
                            [--leaks N] [--stacks N] [--depth N] [--shapes many,merged,one] [--keep]"
                    .into());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if o.reports == 0 || o.stacks == 0 {
        return Err("--reports and --stacks must be positive".into());
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
    let mut r = Report::new(true, Reason::Exit, process);
    r.tool.version = "bench".into();
    r.driver = Driver {
        version: 13000,
        path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
    };
    r.devices.push(Device {
        ordinal: 0,
        name: "NVIDIA H200".into(),
        total_bytes: 150_754_820_096,
        limit_bytes: None,
    });
    r.contexts.push(Context {
        id: 1,
        handle: Addr(0x55d0_c0a1_b2c0),
        device: 0,
        primary: true,
        destroyed: false,
        destroyed_by: None,
        created_ms: None,
        destroyed_ms: None,
        stack: None,
        overhead_bytes: None,
    });
    let api: Arc<str> = "cuMemAlloc_v2".into();
    let mut total = 0u64;
    r.leaks.reserve(leaks);
    for i in 0..leaks {
        let size = 256 << (rng.next() % 16);
        total += size;
        let stack = rng.next() % o.stacks as u64 + 1;
        let requested = size - rng.next() % 256;
        let thread = u64::from(pid) + rng.next() % 4;
        let time_ms = rng.next() % 100_000;
        r.leaks.push(Leak {
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
            state: LeakState::LiveAtExit,
            handle: None,
            owner: None,
        });
    }
    r.events.push(Event {
        kind: EventKind::DoubleFree,
        address: Some(Addr(0x7f00_0000_0000)),
        api: Some("cuMemFree_v2".into()),
        seq: 1,
        thread: 1,
        stack: Some(1),
        result: Some(1),
        size: None,
        context: None,
        time_ms: None,
        message: None,
        device: None,
    });
    let shim: Arc<str> = "/opt/cuguard/lib/libcuguard.so".into();
    let worker: Arc<str> = "/opt/bench/worker".into();
    let file: Arc<str> = "worker.cc".into();
    for id in 1..=o.stacks {
        let frames = (0..o.depth)
            .map(|d| {
                let (module, function) = if d == 0 {
                    (shim.clone(), "cuMemAlloc_v2".to_string())
                } else {
                    (
                        worker.clone(),
                        format!("fn_{}_{d}", (id * 7 + d) % (o.stacks / 2 + 1)),
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
        });
    }
    r.stats.devices.push(DeviceStats {
        device: 0,
        live_bytes: total,
        peak_live_bytes: total,
        total_allocated_bytes: total,
        allocations: leaks as u64,
        frees: 0,
        released_bytes: None,
        host_pinned_live_bytes: None,
        pool: None,
    });
    r
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
        cuguard_report::write(&report, &mut out)?;
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

fn run() -> Result<(), String> {
    let o = parse()?;
    if !o.cuguard.is_file() {
        return Err(format!(
            "{}: not found (build it, or pass --cuguard)",
            o.cuguard.display()
        ));
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
    for shape in o.shapes.iter().map(String::as_str) {
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
