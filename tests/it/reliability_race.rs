//! The race-detector run (issue 6), as an ignored test because it needs the nightly toolchain with
//! `rust-src` and builds std, the shim and the simulated driver a second time (minutes):
//!
//! ```text
//! rustup component add rust-src --toolchain nightly
//! cargo test --test it reliability_race -- --ignored --nocapture
//! ```
//!
//! ThreadSanitizer over the real multi-threaded stress (tracker shards, events, contexts, pool,
//! stack table, timeline sampling, and the cuguard thread writing a checkpoint every second): the
//! shim and the simulated driver are built by `cargo +nightly -Zbuild-std` with
//! `-Zsanitizer=thread` (std rebuilt too, so its locks are seen), the stress program by
//! `gcc -fsanitize=thread`, whose libtsan is the runtime. gcc's libtsan lacks a few entry points
//! rustc's instrumentation calls; `stress_tsan_glue.c` provides them, and libtsan is preloaded
//! ahead of the shim so that it is the first definition of every interceptor. The result is
//! recorded in docs/reliability.md. `CUGUARD_TSAN_SECS` sets the stress's length (default 5).
//!
//! A report counts against the shim when a racing access's innermost frame outside the runtime is
//! in `libcuguard.so`.

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
        // cuguard_tsan: without the shim's sigaction (see shim/src/lifecycle/mod.rs).
        .env(
            "RUSTFLAGS",
            "-Zsanitizer=thread -Cforce-frame-pointers=yes --cfg cuguard_tsan",
        )
        .args([
            "+nightly",
            "build",
            "-q",
            "-Zbuild-std",
            "-p",
            "cuguard-shim",
            "-p",
            "cuguard-simcuda",
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
    let built = out.join("build/x86_64-unknown-linux-gnu/debug");
    let shim = built.join("libcuguard.so");
    let sim_dir = out.join("sim");
    std::fs::create_dir_all(&sim_dir).unwrap();
    for name in ["libcuda.so.1", "libcuda.so"] {
        let link = sim_dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(built.join("libcuguard_simcuda.so"), &link).unwrap();
    }
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
        // -rdynamic: the glue's entry points must be visible to the shim.
        .args(["-fsanitize=thread", "-rdynamic", "-g", "-O1", "-o"])
        .arg(&exe)
        .arg(a.root.join("harness/workloads/c/stress_threads.c"))
        .arg(&glue)
        .arg("-I")
        .arg(a.root.join("harness/workloads/c"))
        .arg("-L")
        .arg(&sim_dir)
        .args(["-lcuda", "-lpthread", "-ldl"])
        .status()
        .expect("gcc");
    assert!(status.success(), "gcc -fsanitize=thread failed");
    let secs = std::env::var("CUGUARD_TSAN_SECS").unwrap_or_else(|_| "5".into());
    // The pool's paths (the default) and the pass-through ones.
    for pool in ["1", "0"] {
        let log = out.join(format!("tsan-pool{pool}"));
        let _ = std::fs::remove_dir_all(&log);
        std::fs::create_dir_all(&log).unwrap();
        let report = out.join(format!("r-pool{pool}.json"));
        let _ = std::fs::remove_file(&report);
        let run = Command::new(&exe)
            .args(["8", &secs])
            .env("LD_LIBRARY_PATH", &sim_dir)
            .env("LD_PRELOAD", format!("{libtsan} {}", shim.display()))
            .env("CUGUARD_POOL", pool)
            .env("CUGUARD_REPORT", &report)
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
        let saved = out.join(format!("report-pool{pool}.txt"));
        std::fs::write(&saved, &text).unwrap();
        let races: Vec<&str> = text
            .split("WARNING: ThreadSanitizer: ")
            .filter(|r| r.starts_with("data race"))
            .collect();
        let count = |module: &str| {
            races
                .iter()
                .filter(|r| racing_modules(r).iter().any(|m| m == module))
                .count()
        };
        let (in_shim, in_sim) = (count("libcuguard.so"), count("libcuguard_simcuda.so"));
        eprintln!(
            "CUGUARD_POOL={pool}: stress {}; ThreadSanitizer data races: {}; in the shim: {in_shim}; \
             in the simulated driver: {in_sim} (reports: {})",
            run.status,
            races.len(),
            saved.display()
        );
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(report.exists(), "no cuguard report at {}", report.display());
        assert_eq!(in_shim, 0, "races in the shim; see {}", saved.display());
    }
}

/// For each racing access in one ThreadSanitizer report, the module of its innermost frame outside
/// the runtime (libtsan's interceptors come first when the access is a `memcpy`, say).
fn racing_modules(report: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_access = false;
    for line in report.lines() {
        let t = line.trim_start();
        if line.starts_with("  ") && !line.starts_with("    ") {
            in_access = t.contains(" of size ");
            continue;
        }
        if !in_access || !t.starts_with('#') {
            continue;
        }
        let Some(module) = t
            .rsplit_once('(')
            .and_then(|(_, m)| m.split_once('+'))
            .map(|(m, _)| m.to_string())
        else {
            continue;
        };
        if module == "libtsan.so" || module.starts_with("libtsan.so.") {
            continue;
        }
        // The symlink the program loads the simulated driver by.
        let module = if module == "libcuda.so.1" {
            "libcuguard_simcuda.so".to_string()
        } else {
            module
        };
        out.push(module);
        in_access = false;
    }
    out
}
