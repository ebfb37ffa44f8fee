//! The race-detector run (issue 6), as an ignored test because it needs the nightly toolchain and
//! builds the shim a second time (minutes):
//!
//! ```text
//! cargo test --test it reliability_race -- --ignored --nocapture
//! ```
//!
//! ThreadSanitizer over the real multi-threaded stress (tracker shards, events, contexts, pool,
//! stack table, and the cuguard thread writing a checkpoint every second): the shim is built by
//! `cargo +nightly` with `-Zsanitizer=thread`, the stress program by `gcc -fsanitize=thread`
//! (whose libtsan is the runtime; the shim, a cdylib, only carries the instrumentation). std is not
//! rebuilt with the sanitizer (no rust-src on these machines), so a lock's contended path inside
//! precompiled std is invisible to it: read each report before believing it. The result is
//! recorded in docs/reliability.md. `CUGUARD_TSAN_SECS` sets the stress's length (default 5).
//!
//! gcc's libtsan lacks a few entry points rustc's instrumentation calls; `stress_tsan_glue.c`
//! provides them, and libtsan is preloaded ahead of the shim so that it initializes first.
//! Status (see docs/reliability.md): the run stops at start-up, because libtsan resolves its
//! interceptors with `dlsym`, which the shim exports (the dlsym door), instrumented, before the
//! runtime is up. It needs that export built without instrumentation
//! (`#[cfg_attr(sanitize = "thread", no_sanitize(thread))]`, nightly) or clang's runtime.

use std::process::Command;

use crate::support;

#[test]
#[ignore = "needs the nightly toolchain and gcc's ThreadSanitizer; run with --ignored"]
fn thread_sanitizer_finds_no_race_in_the_shim() {
    let a = support::artifacts();
    let out = a.root.join("target/tsan");
    std::fs::create_dir_all(&out).unwrap();
    let status = Command::new("cargo")
        .current_dir(&a.root)
        .env(
            "RUSTFLAGS",
            "-Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer -Cforce-frame-pointers=yes",
        )
        .args([
            "+nightly",
            "build",
            "-q",
            "-p",
            "cuguard-shim",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--target-dir",
        ])
        .arg(out.join("build"))
        .status()
        .expect("cargo +nightly");
    assert!(
        status.success(),
        "building the shim with ThreadSanitizer failed"
    );
    let shim = out.join("build/x86_64-unknown-linux-gnu/debug/libcuguard.so");
    let exe = out.join("stress_threads");
    let glue = out.join("glue.o");
    let status = Command::new("gcc")
        .args(["-g", "-O1", "-c", "-o"])
        .arg(&glue)
        .arg(a.root.join("harness/workloads/c/stress_tsan_glue.c"))
        .status()
        .expect("gcc");
    assert!(status.success());
    let libtsan = Command::new("gcc")
        .arg("-print-file-name=libtsan.so")
        .output()
        .expect("gcc");
    let libtsan = String::from_utf8_lossy(&libtsan.stdout).trim().to_string();
    let status = Command::new("gcc")
        .args(["-fsanitize=thread", "-g", "-O1", "-o"])
        .arg(&exe)
        .arg(a.root.join("harness/workloads/c/stress_threads.c"))
        .arg(&glue)
        .arg("-I")
        .arg(a.root.join("harness/workloads/c"))
        .arg("-L")
        .arg(&a.sim_dir)
        .args(["-lcuda", "-lpthread", "-ldl"])
        .status()
        .expect("gcc");
    assert!(status.success(), "gcc -fsanitize=thread failed");
    let log = out.join("tsan");
    let _ = std::fs::remove_dir_all(&log);
    std::fs::create_dir_all(&log).unwrap();
    let secs = std::env::var("CUGUARD_TSAN_SECS").unwrap_or_else(|_| "5".into());
    let run = Command::new(&exe)
        .args(["8", &secs])
        .env("LD_LIBRARY_PATH", &a.sim_dir)
        .env("LD_PRELOAD", format!("{libtsan} {}", shim.display()))
        .env("CUGUARD_REPORT", out.join("r.json"))
        .env("CUGUARD_CHECKPOINT_SECS", "1")
        .env(
            "TSAN_OPTIONS",
            format!(
                "halt_on_error=0 report_signal_unsafe=0 log_path={}/report",
                log.display()
            ),
        )
        .output()
        .expect("running the stress");
    let mut text = String::new();
    for f in std::fs::read_dir(&log).unwrap().flatten() {
        text.push_str(&std::fs::read_to_string(f.path()).unwrap_or_default());
    }
    std::fs::write(out.join("report.txt"), &text).unwrap();
    let races = text.matches("WARNING: ThreadSanitizer: data race").count();
    let in_shim = text
        .split("WARNING: ThreadSanitizer")
        .filter(|r| r.contains("data race") && r.contains("libcuguard.so"))
        .count();
    eprintln!(
        "stress: {}; ThreadSanitizer data races: {races}, {in_shim} with frames in libcuguard.so (report: {})",
        run.status,
        out.join("report.txt").display()
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        in_shim,
        0,
        "races in the shim; see {}",
        out.join("report.txt").display()
    );
}
