//! The shim end to end: workloads that say exactly what they allocated, kept and misused, run
//! under `libcuguard.so` on the simulated driver, with the pool off and on. The report must
//! hold exactly those leaks (address, sizes, api, memory kind, context, thread, state) and
//! exactly those events, and conform to the JSON Schema.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::cli_schema::validate;
use crate::support::{self, c_program, read_report, run, rust_program, scratch_dir, shim_command};

/// One leak, as the comparison sees it.
pub(crate) type LeakKey = (String, u64, u64, String, String, String, u64, String);
/// One event, as the comparison sees it.
type EventKey = (String, String, String, u64);

/// The leaks in a report, with context ids turned back into handles.
pub(crate) fn report_leaks(report: &Value) -> Vec<LeakKey> {
    let handles: BTreeMap<u64, String> = report["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_u64().unwrap(),
                c["handle"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut v: Vec<LeakKey> = report["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["address"].as_str().unwrap().to_string(),
                l["size"].as_u64().unwrap(),
                l["requested"].as_u64().unwrap(),
                l["api"].as_str().unwrap().to_string(),
                l["memory"].as_str().unwrap().to_string(),
                l["context"]
                    .as_u64()
                    .and_then(|c| handles.get(&c).cloned())
                    .unwrap_or_default(),
                l["thread"].as_u64().unwrap(),
                l["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The leaks a workload says it kept.
pub(crate) fn program_leaks(out: &Value) -> Vec<LeakKey> {
    let mut v: Vec<LeakKey> = out["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["address"].as_str().unwrap().to_string(),
                k["size"].as_u64().unwrap(),
                k["requested"].as_u64().unwrap(),
                k["api"].as_str().unwrap().to_string(),
                k["memory"].as_str().unwrap().to_string(),
                k["context"].as_str().unwrap().to_string(),
                k["thread"].as_u64().unwrap(),
                k["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

fn events(list: &Value) -> Vec<EventKey> {
    let mut v: Vec<EventKey> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["address"].as_str().unwrap().to_string(),
                e["api"].as_str().unwrap().to_string(),
                e["result"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Runs `program args` under the shim with the pool `on` or off and checks the report against
/// what the program printed. Returns the report.
fn check_exact(program: &Path, args: &[&str], env: &[(&str, &str)], pool: bool) -> Value {
    let dir = scratch_dir(&format!(
        "exact-{}-{}-{}",
        program.file_name().unwrap().to_string_lossy(),
        args.join("-"),
        pool
    ));
    let report = dir.join("report.json");
    let mut cmd = shim_command(program, &report);
    cmd.args(args)
        .env("CUGUARD_POOL", if pool { "1" } else { "0" });
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    let said: Value = serde_json::from_slice(&out.stdout).expect("workload prints one JSON object");
    let r = read_report(&report);
    if let Err(e) = validate(&r) {
        panic!("report does not conform to the schema:\n{e}");
    }
    assert_eq!(r["complete"], true);
    assert_eq!(r["reason"], "exit");
    assert_eq!(
        report_leaks(&r),
        program_leaks(&said),
        "leaks (pool {pool})"
    );
    // Sequence numbers order leaks and events together, densely.
    let mut seqs: Vec<u64> = r["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .chain(r["events"].as_array().unwrap())
        .map(|x| x["seq"].as_u64().unwrap())
        .collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (0..seqs.len() as u64).collect::<Vec<_>>(),
        "seq (pool {pool})"
    );
    assert_eq!(
        events(&r["events"]),
        events(&said["events"]),
        "events (pool {pool})"
    );
    let allocations = support::report_allocations(&r);
    assert_eq!(
        allocations,
        said["allocations"].as_u64().unwrap(),
        "allocations (pool {pool})"
    );
    for c in said["contexts"].as_array().unwrap() {
        let found = r["contexts"].as_array().unwrap().iter().any(|rc| {
            rc["handle"] == c["handle"]
                && rc["device"] == c["device"]
                && rc["primary"] == c["primary"]
        });
        assert!(found, "context {c} missing from the report");
    }
    // The one-line summary, and nothing else, on stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cuguard:"))
        .collect();
    assert_eq!(lines.len(), 1, "stderr: {stderr}");
    assert!(
        lines[0].contains(&format!("report: {}", report.display())),
        "{}",
        lines[0]
    );
    r
}

fn both_pools(program: &Path, args: &[&str], env: &[(&str, &str)]) {
    for pool in [false, true] {
        check_exact(program, args, env, pool);
    }
}

#[test]
fn exported_symbols_door_every_memory_kind() {
    for pool in [false, true] {
        let r = check_exact(&c_program("leaks_linked"), &[], &[], pool);
        // leaks_linked.c calls the shim's exports 29 times: cuDevicePrimaryCtxRetain 1,
        // cuMemAlloc 3, cuMemFree 6, cuMemAllocPitch 1, cuMemAllocManaged 2, cuMemAllocHost 1,
        // cuMemHostAlloc 2, cuMemFreeHost 2, cuMemAllocAsync 2, cuMemFreeAsync 1,
        // cuMemAllocFromPoolAsync 1, and the VMM calls 7 (reserve 1, create 2, map 2, release 1,
        // unmap 1); nothing comes through the lookup doors.
        assert_eq!(r["doors"]["exported"], 29, "pool {pool}");
        assert_eq!(r["doors"]["dlsym"], 0, "pool {pool}");
        assert_eq!(r["doors"]["get_proc_address"], 0, "pool {pool}");
    }
}

#[test]
fn dlsym_door() {
    both_pools(&c_program("leaks_door"), &["dlsym"], &[]);
}

#[test]
fn get_proc_address_door_through_itself() {
    let r = check_exact(&c_program("leaks_door"), &["getproc"], &[], true);
    assert_eq!(
        r["doors"]["get_proc_address"], 5,
        "cuGetProcAddress itself and four allocation entries"
    );
    check_exact(&c_program("leaks_door"), &["getproc"], &[], false);
}

#[test]
fn get_proc_address_door_per_thread_stream_entries() {
    both_pools(&c_program("leaks_door"), &["getproc_ptds"], &[]);
}

#[test]
fn threads_and_contexts_on_two_devices() {
    both_pools(
        &c_program("leaks_threads"),
        &[],
        &[("CUGUARD_SIM_DEVICES", "2")],
    );
}

#[test]
fn quiet_silences_the_summary() {
    let dir = scratch_dir("quiet");
    let report = dir.join("r.json");
    let out = run(
        shim_command(&c_program("leaks_door"), &report)
            .arg("dlsym")
            .env("CUGUARD_QUIET", "1"),
        true,
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(report.exists());
}

/// The cudarc client (stream-ordered allocations through cudarc's safe API, plain ones through
/// its result layer) keeps 4 of its 10 allocations.
fn cudarc_leaks(report: &Value) -> Vec<(u64, String, String)> {
    let mut v: Vec<(u64, String, String)> = report["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["size"].as_u64().unwrap(),
                l["api"].as_str().unwrap().to_string(),
                l["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn cudarc_client() {
    for (args, state) in [
        (&[][..], "live_at_exit"),
        (&["--drop-context"][..], "released_by_context_destroy"),
    ] {
        for pool in ["0", "1"] {
            let dir = scratch_dir(&format!("cudarc-{pool}-{}", args.len()));
            let report = dir.join("r.json");
            let out = run(
                shim_command(&rust_program("cudarc_leaks"), &report)
                    .args(args)
                    .env("CUGUARD_POOL", pool),
                true,
            );
            let said: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(said["kept"], 4);
            let r = read_report(&report);
            validate(&r).unwrap();
            let s = state.to_string();
            assert_eq!(
                cudarc_leaks(&r),
                vec![
                    (1 << 20, "cuMemAlloc_v2".into(), s.clone()),
                    (2 << 20, "cuMemAllocAsync".into(), s.clone()),
                    (3 << 20, "cuMemAlloc_v2".into(), s.clone()),
                    (5 << 20, "cuMemAllocAsync".into(), s.clone()),
                ]
            );
            let allocations = support::report_allocations(&r);
            assert_eq!(allocations, 10);
            assert!(
                r["doors"]["dlsym"].as_u64().unwrap() >= 4,
                "cudarc comes in through dlsym"
            );
        }
    }
}

#[test]
fn a_process_that_never_touches_cuda_writes_no_report() {
    let dir = scratch_dir("no-cuda");
    let report = dir.join("r.json");
    let out = run(&mut shim_command(Path::new("/bin/true"), &report), true);
    assert!(!report.exists());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn no_driver_at_all_leaves_the_shim_inert() {
    // No driver on the library path (and none on this machine): the program sees exactly what
    // it sees without the shim, the driver's names do not appear to exist, and no report is
    // written.
    let dir = scratch_dir("no-driver");
    let report = dir.join("r.json");
    let program = c_program("no_driver");
    let mut with = shim_command(&program, &report);
    with.env("LD_LIBRARY_PATH", dir.as_os_str());
    let with = with.output().unwrap();
    let mut without = support::sim_command(&program);
    without.env("LD_LIBRARY_PATH", dir.as_os_str());
    let without = without.output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&without.stdout),
        "driver=no cuMemAlloc_v2=none cuGetProcAddress_v2=none malloc=found\n"
    );
    assert_eq!(with.stdout, without.stdout);
    assert_eq!(with.status.code(), without.status.code());
    assert_eq!(String::from_utf8_lossy(&with.stderr), "");
    assert!(!report.exists());
}

#[test]
fn unwritable_report_directory_falls_back_with_one_clear_line() {
    let dir = scratch_dir("unwritable");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let report = Path::new("/proc/cuguard-cannot-write-here/r.json");
    let out = run(
        shim_command(&c_program("leaks_door"), report)
            .arg("dlsym")
            .env("TMPDIR", &tmp),
        true,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("could not write /proc/cuguard-cannot-write-here/r.json"),
        "{stderr}"
    );
    let fallback = tmp.join("r.json");
    assert!(
        lines[0].contains(&fallback.display().to_string()),
        "{stderr}"
    );
    let r = read_report(&fallback);
    assert_eq!(r["leaks"].as_array().unwrap().len(), 3);
}

#[test]
fn bad_calls_get_the_drivers_answers_and_leave_events() {
    let program = c_program("bad_calls");
    let kinds: Vec<Vec<(String, String, u64)>> =
        support::reports_with_bare_answers(&program, "bad-calls")
            .1
            .iter()
            .map(|r| {
                r["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| {
                        (
                            e["kind"].as_str().unwrap().to_string(),
                            e["api"].as_str().unwrap().to_string(),
                            e["result"].as_u64().unwrap(),
                        )
                    })
                    .collect()
            })
            .collect();
    assert_eq!(kinds[0], kinds[1], "events differ between pool off and on");
    let count = |kind: &str| kinds[0].iter().filter(|(k, _, _)| k == kind).count();
    assert_eq!(count("double_free"), 5, "{:?}", kinds[0]);
    assert_eq!(count("invalid_free"), 8, "{:?}", kinds[0]);
    assert_eq!(count("free_after_context_destroy"), 2, "{:?}", kinds[0]);
    assert_eq!(
        count("context_destroyed_with_live_allocations"),
        2,
        "{:?}",
        kinds[0]
    );
    assert_eq!(count("alloc_failed"), 16, "{:?}", kinds[0]);
    assert!(kinds[0].contains(&(
        "free_after_context_destroy".into(),
        "cuMemFree_v2".into(),
        709
    )));
    assert!(kinds[0].contains(&("double_free".into(), "cuMemFreeHost".into(), 1)));
    assert!(kinds[0].contains(&("double_free".into(), "cuMemRelease".into(), 1)));
}
