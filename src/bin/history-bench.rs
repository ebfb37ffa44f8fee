//! `history-bench`: writes a synthetic history of N events, then times what the command does
//! with it against reading the file: `cuguard view` (and the page's size, and Chromium's time to
//! draw it), `cuguard export --format memory-viz`, `cuguard summary --at peak` and
//! `cuguard replay` (every allocator at one capacity, and `--find-capacity`); each command's
//! wall time and peak memory (its own, from `wait4`), side by side in one run. `--only replay`
//! times `cuguard replay` alone.
//!
//! ```text
//! history-bench [--cuguard PATH] [--before PATH] [--dir DIR] [--events N] [--chromium PATH] [--only replay]
//! target/release/history-bench --events 10000000
//! ```
//!
//! The history: 8 threads; each step of a "training loop" allocates a few temporaries from 200
//! call paths and frees them, keeps one buffer every 50 steps, and every 10,000 steps makes a
//! spike of 4 GiB for a while; about 9 bytes an event on disk, as the shim writes them.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use cuguard_format::MemoryKind;

use cuguard_history::live::Follow;
use cuguard_history::{Action, Chunk, Header, Raw, VERSION, kind, write_chunk_of};

/// What the command line asks.
struct Args {
    /// The command to time.
    cuguard: PathBuf,
    /// A build before, timed on the same events first.
    before: Option<PathBuf>,
    /// Where the histories and what is made of them go.
    dir: PathBuf,
    /// How many events the history holds.
    events: u64,
    /// The browser that draws the page, when there is one.
    chromium: Option<PathBuf>,
    /// `cuguard replay` alone.
    only_replay: bool,
}

/// Reads the command line; exits 2 on a word it does not know.
fn args() -> Args {
    let mut a = Args {
        cuguard: PathBuf::from("target/release/cuguard"),
        before: None,
        dir: PathBuf::from("target/history-bench"),
        events: 10_000_000,
        chromium: which("chromium"),
        only_replay: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--cuguard" => a.cuguard = PathBuf::from(v),
            "--before" => a.before = Some(PathBuf::from(v)),
            "--dir" => a.dir = PathBuf::from(v),
            "--events" => a.events = v.parse().expect("--events N"),
            "--chromium" => a.chromium = Some(PathBuf::from(v)),
            "--only" if v == "replay" => a.only_replay = true,
            _ => {
                eprintln!(
                    "usage: history-bench [--cuguard PATH] [--before PATH] [--dir DIR] [--events N] [--chromium PATH] [--only replay]"
                );
                std::process::exit(2);
            }
        }
        i += 2;
    }
    a
}

fn main() {
    let Args {
        cuguard,
        before,
        dir,
        events,
        chromium,
        only_replay,
    } = args();
    std::fs::create_dir_all(&dir).unwrap();
    // The build before reads layout 1 (no checkpoints): the same events, written as it wrote them.
    let mut runs = vec![("now", cuguard.clone(), VERSION)];
    if let Some(b) = before {
        runs.insert(0, ("before", b, 1));
    }
    for (name, cuguard, version) in runs {
        let file = dir.join(format!("bench-{name}.history"));
        let started = Instant::now();
        let (written, end_ns) = generate(&file, events, version);
        let size = std::fs::metadata(&file).unwrap().len();
        println!(
            "\n{name}: {} (layout {version}): {written} events, {size} bytes ({:.2} bytes an event), written in {:.1} s",
            cuguard.display(),
            size as f64 / written as f64,
            started.elapsed().as_secs_f64()
        );
        if only_replay {
            replay_table(&cuguard, &file);
            continue;
        }
        let (page, pickle) = commands_table(&cuguard, &file, &dir, name, end_ns);
        println!(
            "page: {} bytes; memory-viz pickle of the window: {} bytes",
            std::fs::metadata(&page).unwrap().len(),
            std::fs::metadata(&pickle).unwrap().len()
        );
        if let Some(chromium) = &chromium {
            match drawn_ms(chromium, &page, &dir) {
                Some(ms) => println!("Chromium: the page drawn {ms} ms after navigation started"),
                None => println!("Chromium: the page did not say it was drawn"),
            }
        }
    }
}

/// Times each command on the history `file` (of the run `name`, ending at `end_ns`) against
/// reading it, a row each; gives the page and the pickle it made.
fn commands_table(
    cuguard: &Path,
    file: &Path,
    dir: &Path,
    name: &str,
    end_ns: u64,
) -> (PathBuf, PathBuf) {
    let page = dir.join(format!("bench-{name}.html"));
    let pickle = dir.join(format!("bench-{name}.pickle"));
    let (from, to) = (end_ns / 1_000_000 * 9 / 10, end_ns / 1_000_000);
    let middle = format!("{}ms", end_ns / 2_000_000);
    let row = table_against_cat(file);
    for at in ["peak", middle.as_str(), "end"] {
        row(
            &format!("cuguard summary --at {at}"),
            timed(
                Command::new(cuguard)
                    .args(["summary", "--at", at])
                    .arg(file)
                    .stdout(std::process::Stdio::null()),
            ),
        );
    }
    row(
        &format!("cuguard summary --between {from}ms {to}ms"),
        timed(
            Command::new(cuguard)
                .args([
                    "summary",
                    "--between",
                    &format!("{from}ms"),
                    &format!("{to}ms"),
                ])
                .arg(file)
                .stdout(std::process::Stdio::null()),
        ),
    );
    row(
        "cuguard view",
        timed(
            Command::new(cuguard)
                .arg("view")
                .arg(file)
                .arg("-o")
                .arg(&page),
        ),
    );
    row(
        &format!("cuguard export --format memory-viz --between {from}ms {to}ms"),
        timed(
            Command::new(cuguard)
                .args(["export", "--format", "memory-viz", "--between"])
                .args([format!("{from}ms"), format!("{to}ms")])
                .arg(file)
                .arg("-o")
                .arg(&pickle),
        ),
    );
    row(
        "cuguard export --format pprof --at end",
        timed(
            Command::new(cuguard)
                .args(["export", "--format", "pprof", "--at", "end"])
                .arg(file)
                .arg("-o")
                .arg(dir.join(format!("bench-{name}.pb.gz")))
                .stderr(std::process::Stdio::null()),
        ),
    );
    // The build before has no `cuguard replay`.
    if name == "now" {
        replay_rows(cuguard, file, &row);
    }
    (page, pickle)
}

/// The capacity `cuguard replay` is timed at: the history's peak (about 100 GiB at 10 million
/// events: a kept buffer every 50 steps, and a spike) fits in it, so every model replays it all.
const REPLAY_CAPACITY: &str = "160GiB";

/// Times `cuguard replay` on the history `file` against reading it, a row each.
fn replay_table(cuguard: &Path, file: &Path) {
    let row = table_against_cat(file);
    replay_rows(cuguard, file, &row);
}

/// `cuguard replay`'s rows: every allocator at [`REPLAY_CAPACITY`], each alone, and the search
/// for the smallest capacity, the driver's and every allocator's.
fn replay_rows(cuguard: &Path, file: &Path, row: &dyn Fn(&str, (f64, f64))) {
    let mut runs: Vec<Vec<String>> = vec![vec![
        "--capacity".into(),
        REPLAY_CAPACITY.into(),
        "--allocator".into(),
        "all".into(),
    ]];
    for a in [
        "driver",
        "async",
        "cuguard",
        "rmm-pool",
        "torch",
        "torch-expandable",
    ] {
        runs.push(vec![
            "--capacity".into(),
            REPLAY_CAPACITY.into(),
            "--allocator".into(),
            a.into(),
        ]);
    }
    for a in ["driver", "all"] {
        runs.push(vec![
            "--find-capacity".into(),
            "--allocator".into(),
            a.into(),
        ]);
    }
    for args in runs {
        row(
            &format!("cuguard replay {}", args.join(" ")),
            timed(
                Command::new(cuguard)
                    .arg("replay")
                    .arg(file)
                    .args(&args)
                    .stdout(std::process::Stdio::null()),
            ),
        );
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs `cmd`; its wall seconds and its peak resident MiB (`wait4`'s `ru_maxrss`).
/// Starts a table of commands timed against reading `file` with `cat` (its first row), and
/// gives the writer of the rows that follow: `row(what, (wall s, peak MiB))`.
fn table_against_cat(file: &Path) -> impl Fn(&str, (f64, f64)) {
    println!("| command | wall s | peak MiB | / cat |");
    println!("|---|---:|---:|---:|");
    let cat = timed(
        Command::new("cat")
            .arg(file)
            .stdout(std::process::Stdio::null()),
    );
    let row = move |what: &str, t: (f64, f64)| {
        println!(
            "| {what} | {:.2} | {:.1} | {:.1}x |",
            t.0,
            t.1,
            t.0 / cat.0.max(1e-3)
        );
    };
    row("cat (reading the file)", cat);
    row
}

fn timed(cmd: &mut Command) -> (f64, f64) {
    let start = Instant::now();
    let child = cmd.spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data written by wait4 for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child; status and usage are valid out-parameters.
    unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    std::mem::forget(child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed"
    );
    (
        start.elapsed().as_secs_f64(),
        usage.ru_maxrss as f64 / 1024.0,
    )
}

/// When the page says it was drawn (`data-drawn-ms` on its body), by Chromium's clock.
fn drawn_ms(chromium: &Path, page: &Path, dir: &Path) -> Option<u64> {
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!(
            "file://{}",
            std::fs::canonicalize(page).ok()?.display()
        ))
        .output()
        .ok()?;
    let dom = String::from_utf8_lossy(&out.stdout);
    let at = dom.find("data-drawn-ms=\"")? + "data-drawn-ms=\"".len();
    dom[at..].split('"').next()?.parse().ok()
}

/// Writes a history of about `events` events to `path` in layout `version`, as the shim's
/// writer does: drains every 4096 steps, each a clock and then the events made by then in time
/// order (a free made later waits for its drain), a checkpoint when one is due; the count
/// written.
fn generate(path: &Path, events: u64, version: u32) -> (u64, u64) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut buf = Header {
        version,
        pid: 4242,
        start_unix_ns: 1_800_000_000_000_000_000,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec();
    let chunk = |buf: &mut Vec<u8>, c: &Chunk| write_chunk_of(buf, c, version);
    chunk(
        &mut buf,
        &Chunk::Clock {
            tsc: 0,
            since_start_ns: 0,
            unix_ns: 1_800_000_000_000_000_000,
        },
    );
    for id in 0..200u32 {
        let frames: Vec<u64> = (0..12)
            .map(|f| 0x5555_0000_0000 + u64::from(id % 40) * 0x1000 + f * 0x40)
            .collect();
        chunk(&mut buf, &Chunk::Stack { id, frames });
    }
    let threads = 8u32;
    let mut written = 0u64;
    let mut t = 1_000u64;
    let mut step = 0u64;
    let mut kept = 0u64;
    let mut follow = Follow::default();
    // Events made, by when: a drain writes those made by its moment.
    let mut pending: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32, RawKey)>> =
        Default::default();
    let ev = |tsc, addr, size, stack, action| Raw {
        tsc,
        addr,
        size,
        stack,
        context: 0,
        kind: kind(action, MemoryKind::PoolBlock),
        device: 1,
        stream: 0,
    };
    let push = |pending: &mut std::collections::BinaryHeap<_>, thread: u32, r: Raw| {
        pending.push(std::cmp::Reverse((r.tsc, thread, RawKey(r))))
    };
    while written < events {
        let th = (step % u64::from(threads)) as u32;
        let base = 0x7f00_0000_0000u64 + u64::from(th) * 0x10_0000_0000;
        // Four temporaries made and freed.
        for k in 0..4u64 {
            let stack = ((step * 7 + k * 13) % 200) as u32;
            let addr = base + k * 0x100_0000;
            push(
                &mut pending,
                100 + th,
                ev(t, addr, (1 + k) << 20, stack, Action::Alloc),
            );
            push(
                &mut pending,
                100 + th,
                ev(t + 20_000, addr, 0, cuguard_history::NONE, Action::Free),
            );
            written += 2;
        }
        if step.is_multiple_of(50) {
            let addr = 0x7e00_0000_0000 + kept * 0x40_0000;
            push(
                &mut pending,
                100 + th,
                ev(t + 1_000, addr, 4 << 20, 199, Action::Alloc),
            );
            kept += 1;
            written += 1;
        }
        if step % 10_000 == 5_000 {
            let addr = 0x7d00_0000_0000 + step * 0x1000;
            push(
                &mut pending,
                100 + th,
                ev(t + 2_000, addr, 4 << 30, 198, Action::Alloc),
            );
            push(
                &mut pending,
                100 + th,
                ev(t + 30_000_000, addr, 0, cuguard_history::NONE, Action::Free),
            );
            written += 2;
        }
        t += 50_000;
        step += 1;
        if step.is_multiple_of(4096) {
            drain(&mut buf, &mut pending, &mut follow, t, version);
            out.write_all(&buf).unwrap();
            buf.clear();
        }
    }
    drain(&mut buf, &mut pending, &mut follow, u64::MAX, version);
    chunk(
        &mut buf,
        &Chunk::End {
            tsc: t + 40_000_000,
        },
    );
    out.write_all(&buf).unwrap();
    out.flush().unwrap();
    (written, t + 40_000_000)
}

/// A record ordered by nothing but its place in the heap's key.
#[derive(Clone, Copy)]
struct RawKey(Raw);

impl PartialEq for RawKey {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for RawKey {}
impl PartialOrd for RawKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for RawKey {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// One drain at `t`: its clock, then the events made by then, in time order, a chunk per
/// thread; a checkpoint when due.
fn drain(
    buf: &mut Vec<u8>,
    pending: &mut std::collections::BinaryHeap<std::cmp::Reverse<(u64, u32, RawKey)>>,
    follow: &mut Follow,
    t: u64,
    version: u32,
) {
    let mut now: Vec<(u32, Raw)> = Vec::new();
    let mut last = 0;
    while let Some(std::cmp::Reverse((tsc, thread, RawKey(r)))) = pending.peek().copied() {
        if tsc > t {
            break;
        }
        pending.pop();
        last = tsc;
        now.push((thread, r));
    }
    let clock = if t == u64::MAX { last } else { t };
    write_chunk_of(
        buf,
        &Chunk::Clock {
            tsc: clock,
            since_start_ns: clock,
            unix_ns: 1_800_000_000_000_000_000 + clock,
        },
        version,
    );
    for piece in now.chunks(1 << 16) {
        let mut by_thread: Vec<(u32, Vec<Raw>)> = Vec::new();
        for (thread, r) in piece {
            follow.follow(*thread, r);
            match by_thread.iter_mut().find(|(t, _)| t == thread) {
                Some((_, v)) => v.push(*r),
                None => by_thread.push((*thread, vec![*r])),
            }
        }
        for (thread, events) in by_thread {
            write_chunk_of(buf, &Chunk::Events { thread, events }, version);
        }
    }
    if follow.due() {
        write_chunk_of(buf, &follow.checkpoint(), version);
        follow.checkpointed();
    }
}
