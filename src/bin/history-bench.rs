//! `history-bench`: writes a synthetic history of N events, then times what the command does
//! with it against reading the file: `cuguard view` (and the page's size, and Chromium's time to
//! draw it), `cuguard export --format memory-viz`, and `cuguard summary --at peak`; each command's
//! wall time and peak memory (its own, from `wait4`), side by side in one run.
//!
//! ```text
//! history-bench [--cuguard PATH] [--dir DIR] [--events N] [--chromium PATH]
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

use cuguard_history::{Action, Chunk, Header, Memory, Raw, VERSION, kind, write_chunk};

fn main() {
    let mut cuguard = PathBuf::from("target/release/cuguard");
    let mut dir = PathBuf::from("target/history-bench");
    let mut events: u64 = 10_000_000;
    let mut chromium: Option<PathBuf> = which("chromium");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--cuguard" => cuguard = PathBuf::from(v),
            "--dir" => dir = PathBuf::from(v),
            "--events" => events = v.parse().expect("--events N"),
            "--chromium" => chromium = Some(PathBuf::from(v)),
            _ => {
                eprintln!(
                    "usage: history-bench [--cuguard PATH] [--dir DIR] [--events N] [--chromium PATH]"
                );
                std::process::exit(2);
            }
        }
        i += 2;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bench.history");
    let started = Instant::now();
    let written = generate(&file, events);
    let size = std::fs::metadata(&file).unwrap().len();
    println!(
        "history: {written} events, {} bytes ({:.2} bytes an event), written in {:.1} s",
        size,
        size as f64 / written as f64,
        started.elapsed().as_secs_f64()
    );
    let page = dir.join("bench.html");
    let pickle = dir.join("bench.pickle");
    println!("| command | wall s | peak MiB | / cat |");
    println!("|---|---:|---:|---:|");
    let cat = timed(
        Command::new("cat")
            .arg(&file)
            .stdout(std::process::Stdio::null()),
    );
    let row = |name: &str, t: (f64, f64)| {
        println!(
            "| {name} | {:.2} | {:.1} | {:.1}x |",
            t.0,
            t.1,
            t.0 / cat.0.max(1e-3)
        );
    };
    row("cat (reading the file)", cat);
    row(
        "cuguard summary --at peak",
        timed(
            Command::new(&cuguard)
                .args(["summary", "--at", "peak"])
                .arg(&file)
                .stdout(std::process::Stdio::null()),
        ),
    );
    row(
        "cuguard view",
        timed(
            Command::new(&cuguard)
                .arg("view")
                .arg(&file)
                .arg("-o")
                .arg(&page),
        ),
    );
    row(
        "cuguard export --format memory-viz",
        timed(
            Command::new(&cuguard)
                .args(["export", "--format", "memory-viz"])
                .arg(&file)
                .arg("-o")
                .arg(&pickle),
        ),
    );
    println!(
        "page: {} bytes; memory-viz pickle: {} bytes",
        std::fs::metadata(&page).unwrap().len(),
        std::fs::metadata(&pickle).unwrap().len()
    );
    if let Some(chromium) = chromium {
        match drawn_ms(&chromium, &page, &dir) {
            Some(ms) => println!("Chromium: the page drawn {ms} ms after navigation started"),
            None => println!("Chromium: the page did not say it was drawn"),
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs `cmd`; its wall seconds and its peak resident MiB (`wait4`'s `ru_maxrss`).
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

/// Writes a history of about `events` events to `path`; the count written.
fn generate(path: &Path, events: u64) -> u64 {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut buf = Header {
        version: VERSION,
        pid: 4242,
        start_unix_ns: 1_800_000_000_000_000_000,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec();
    // 1 tsc tick = 1 ns; one step every 50 µs.
    write_chunk(
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
        write_chunk(&mut buf, &Chunk::Stack { id, frames });
    }
    let threads = 8u32;
    let mut written = 0u64;
    let mut t = 1_000u64;
    let mut step = 0u64;
    let mut kept = 0u64;
    let mut per_thread: Vec<Vec<Raw>> = vec![Vec::new(); threads as usize];
    let ev = |tsc, addr, size, stack, action| Raw {
        tsc,
        addr,
        size,
        stack,
        context: 0,
        kind: kind(action, Memory::PoolBlock),
        device: 1,
    };
    while written < events {
        let th = (step % u64::from(threads)) as usize;
        let base = 0x7f00_0000_0000u64 + (th as u64) * 0x10_0000_0000;
        // Four temporaries made and freed.
        for k in 0..4u64 {
            let stack = ((step * 7 + k * 13) % 200) as u32;
            let addr = base + k * 0x100_0000;
            per_thread[th].push(ev(t, addr, (1 + k) << 20, stack, Action::Alloc));
            per_thread[th].push(ev(t + 20_000, addr, 0, cuguard_history::NONE, Action::Free));
            written += 2;
        }
        if step.is_multiple_of(50) {
            let addr = 0x7e00_0000_0000 + kept * 0x40_0000;
            per_thread[th].push(ev(t + 1_000, addr, 4 << 20, 199, Action::Alloc));
            kept += 1;
            written += 1;
        }
        if step % 10_000 == 5_000 {
            let addr = 0x7d00_0000_0000 + step * 0x1000;
            per_thread[th].push(ev(t + 2_000, addr, 4 << 30, 198, Action::Alloc));
            per_thread[th].push(ev(
                t + 30_000_000,
                addr,
                0,
                cuguard_history::NONE,
                Action::Free,
            ));
            written += 2;
        }
        t += 50_000;
        step += 1;
        if step.is_multiple_of(4096) {
            flush(&mut buf, &mut per_thread, t);
            out.write_all(&buf).unwrap();
            buf.clear();
        }
    }
    flush(&mut buf, &mut per_thread, t);
    write_chunk(
        &mut buf,
        &Chunk::End {
            tsc: t + 40_000_000,
        },
    );
    out.write_all(&buf).unwrap();
    out.flush().unwrap();
    written
}

fn flush(buf: &mut Vec<u8>, per_thread: &mut [Vec<Raw>], t: u64) {
    for (thread, events) in per_thread.iter_mut().enumerate() {
        if !events.is_empty() {
            events.sort_by_key(|e| e.tsc);
            write_chunk(
                buf,
                &Chunk::Events {
                    thread: 100 + thread as u32,
                    events: std::mem::take(events),
                },
            );
        }
    }
    write_chunk(
        buf,
        &Chunk::Clock {
            tsc: t,
            since_start_ns: t,
            unix_ns: 1_800_000_000_000_000_000 + t,
        },
    );
}
