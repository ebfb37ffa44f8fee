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
//! (2 × the largest report + 64 MiB). Reports are deterministic (a fixed pseudo-random sequence).
//! The numbers for this repository's machine are in docs/cli.md.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

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
fn report(pid: u32, leaks: usize, o: &Options, rng: &mut Rng) -> String {
    let mut s = String::with_capacity(leaks * 300 + o.stacks * o.depth * 160 + 4096);
    let _ = write!(
        s,
        r#"{{"schema":"cuguard-report","schema_version":1,"tool":{{"name":"cuguard","version":"bench"}},"complete":true,"reason":"exit","process":{{"pid":{pid},"ppid":1,"exe":"/opt/bench/worker","argv":["worker","--id","{pid}"],"hostname":"bench","rank":{rank},"start_unix_ms":1764460800000,"end_unix_ms":1764460900000}},"driver":{{"version":13000,"path":"/usr/lib/x86_64-linux-gnu/libcuda.so.1"}},"devices":[{{"ordinal":0,"name":"NVIDIA H200","total_bytes":150754820096}}],"contexts":[{{"id":1,"handle":"0x55d0c0a1b2c0","device":0,"primary":true,"destroyed":false,"stack":null}}],"leaks":["#,
        rank = pid % 8
    );
    let mut total = 0u64;
    for i in 0..leaks {
        let size = 256 << (rng.next() % 16);
        total += size;
        let stack = rng.next() % o.stacks as u64 + 1;
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            r#"{{"address":"{:#x}","size":{size},"requested":{},"api":"cuMemAlloc_v2","memory":"device","device":0,"context":1,"thread":{},"seq":{i},"time_ms":{},"stack":{stack},"state":"live_at_exit"}}"#,
            0x7f00_0000_0000u64 + (i as u64) * 0x10_0000,
            size - rng.next() % 256,
            pid + (rng.next() % 4) as u32,
            rng.next() % 100_000,
        );
    }
    s.push_str(r#"],"events":[{"kind":"double_free","address":"0x7f0000000000","api":"cuMemFree_v2","seq":1,"thread":1,"stack":1,"result":1}],"stacks":["#);
    for id in 1..=o.stacks {
        if id > 1 {
            s.push(',');
        }
        let _ = write!(s, r#"{{"id":{id},"frames":["#);
        for d in 0..o.depth {
            if d > 0 {
                s.push(',');
            }
            let (module, function) = if d == 0 {
                (
                    "/opt/cuguard/lib/libcuguard.so",
                    "cuMemAlloc_v2".to_string(),
                )
            } else {
                (
                    "/opt/bench/worker",
                    format!("fn_{}_{d}", (id * 7 + d) % (o.stacks / 2 + 1)),
                )
            };
            let _ = write!(
                s,
                r#"{{"ip":"{:#x}","module":"{module}","offset":"{:#x}","function":"{function}","file":"worker.cc","line":{}}}"#,
                0x5500_0000_0000u64 + (id * 64 + d) as u64 * 16,
                (id * 64 + d) * 16,
                d + 10
            );
        }
        s.push_str("]}");
    }
    let _ = write!(
        s,
        r#"],"stats":{{"devices":[{{"device":0,"live_bytes":{total},"peak_live_bytes":{total},"total_allocated_bytes":{total},"allocations":{leaks},"frees":0,"pool":null}}]}}}}"#
    );
    s
}

fn generate(dir: &Path, files: usize, o: &Options) -> std::io::Result<(u64, u64)> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut total, mut largest) = (0u64, 0u64);
    for i in 0..files {
        let leaks = o.leaks / files + usize::from(i < o.leaks % files);
        let text = report(10_000 + i as u32, leaks, o, &mut rng);
        std::fs::write(
            dir.join(format!("cuguard.worker.{}.json", 10_000 + i)),
            &text,
        )?;
        total += text.len() as u64;
        largest = largest.max(text.len() as u64);
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
