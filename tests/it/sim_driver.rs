//! The simulated driver (`harness/simcuda`) checked from the outside: C programs from
//! `harness/workloads/c` (linked with `-lcuda` against it, no shim) print what the driver
//! answered as `key<TAB>value` lines, and these tests hold the answers to the real driver's
//! behaviour: error codes, context rules, stream ordering, memory limits, `cuGetProcAddress`, and
//! the measurements taken on an H200 (`docs/driver-facts.md`).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

/// What a program printed, by key.
struct Facts {
    map: HashMap<String, String>,
    stdout: String,
    stderr: String,
}

impl Facts {
    fn get(&self, key: &str) -> &str {
        self.map.get(key).map(String::as_str).unwrap_or_else(|| {
            panic!(
                "no line for {key:?}\n--- stdout\n{}\n--- stderr\n{}",
                self.stdout, self.stderr
            )
        })
    }

    /// Checks every `(key, value)` pair and reports all mismatches at once.
    fn expect(&self, pairs: &[(&str, &str)]) {
        let wrong: Vec<String> = pairs
            .iter()
            .filter(|(k, v)| self.map.get(*k).map(String::as_str) != Some(*v))
            .map(|(k, v)| format!("  {k}: expected {v:?}, got {:?}", self.map.get(*k)))
            .collect();
        assert!(
            wrong.is_empty(),
            "{} answers differ:\n{}\n--- stdout\n{}\n--- stderr\n{}",
            wrong.len(),
            wrong.join("\n"),
            self.stdout,
            self.stderr
        );
    }

    /// The value of `key` as a number.
    fn num(&self, key: &str) -> f64 {
        self.get(key)
            .parse()
            .unwrap_or_else(|_| panic!("{key} = {:?} is not a number", self.get(key)))
    }
}

/// Runs `program` (a path) against the simulated driver with `env` set, expecting success.
fn run_facts(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Facts {
    let mut cmd = support::sim_command(program);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = support::run(&mut cmd, true);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let map = stdout
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Facts {
        map,
        stdout,
        stderr,
    }
}

/// Runs the C workload `name` with `args` and `env`.
fn facts(name: &str, args: &[&str], env: &[(&str, &str)]) -> Facts {
    run_facts(&support::c_program(name), args, env)
}

#[test]
fn bad_calls_get_the_drivers_error_codes() {
    let f = facts("sim_conformance", &["errors"], &[]);
    f.expect(&[
        // before cuInit
        ("before_init.alloc", "3"),
        ("before_init.free", "3"),
        ("before_init.ctx_get_current", "3"),
        ("before_init.device_count", "3"),
        ("before_init.driver_version", "0"),
        ("before_init.driver_version_value", "13000"),
        ("before_init.error_name", "0"),
        ("before_init.get_proc_address", "0"),
        ("before_init.get_proc_address_is_cuInit", "1"),
        ("init.bad_flags", "1"),
        ("init", "0"),
        ("init.again", "0"),
        // no current context
        ("no_context.alloc", "201"),
        ("no_context.free_zero", "0"),
        ("no_context.free_unknown", "1"),
        ("no_context.synchronize", "201"),
        ("no_context.stream_create", "201"),
        ("no_context.mem_get_info", "201"),
        ("no_context.pop", "201"),
        ("no_context.alloc_async_default_stream", "201"),
        ("device.get_bad_ordinal", "101"),
        ("primary_not_current.alloc", "201"),
        // cuMemAlloc / cuMemFree
        ("alloc.null_out", "1"),
        ("alloc.size_zero", "1"),
        ("alloc.huge", "2"),
        ("free.interior", "1"),
        ("free.ok", "0"),
        ("free.double", "1"),
        ("free.unknown", "1"),
        ("free.zero", "0"),
        // pitch
        ("pitch.element_3", "1"),
        ("pitch.width_0", "1"),
        ("pitch.height_0", "1"),
        ("pitch.null_pitch", "1"),
        // pinned host memory
        ("host.size_zero", "0"),
        ("host.size_zero_is_null", "1"),
        ("host.bad_flags", "1"),
        ("free_host.null", "0"),
        ("free_host.unknown", "1"),
        ("free_host.device_pointer", "1"),
        ("free.host_pointer", "1"),
        ("free_host.interior", "1"),
        ("free_host.ok", "0"),
        ("free_host.double", "1"),
        // managed and async
        ("managed.size_zero", "1"),
        ("managed.bad_flags", "1"),
        ("async.size_zero", "0"),
        ("async.size_zero_ptr", "0"),
        ("async.free", "0"),
        ("async.free_double", "1"),
        ("async.free_unknown", "1"),
        ("async.free_zero", "0"),
        ("async.sync_after", "0"),
        ("async.bad_stream", "400"),
        // the 32-bit legacy entries
        ("legacy.alloc", "801"),
        ("legacy.free", "801"),
        // streams and events
        ("stream.bad_flags", "1"),
        ("stream.sync_bad_handle", "400"),
        ("stream.destroy_bad_handle", "400"),
        ("stream.sync_destroyed", "400"),
        ("event.bad_flags", "1"),
        ("event.interprocess_needs_disable_timing", "1"),
        ("event.query_bad_handle", "400"),
        ("event.query_never_recorded", "0"),
        ("event.elapsed_not_recorded", "400"),
        ("event.elapsed_disable_timing", "400"),
        ("event.elapsed_same", "0"),
        ("event.wait_bad_flags", "1"),
        ("event.destroy_twice", "400"),
        // contexts
        ("ctx.destroy_primary", "201"),
        ("ctx.destroy_null", "1"),
        ("ctx.set_current_unknown", "201"),
        ("ctx.push_null", "201"),
        ("ctx.create_bad_flags", "1"),
        // device queries
        ("attr.zero", "1"),
        ("attr.max", "1"),
        ("attr.bad_device", "101"),
        ("attr.75", "9"),
        ("attr.76", "0"),
        ("attr.115", "1"),
        ("attr.41", "1"),
        ("attr.102", "1"),
        ("attr.51", "32"),
        ("attr.14", "512"),
        ("attr.10", "32"),
        ("attr.16", "132"),
        ("attr.83", "1"),
        ("device.name", "NVIDIA H200"),
        ("device.name_truncated", "NVIDI"),
        ("device.uuid_prefix", "cuguard-sim"),
        // error names
        ("error_name.709", "0"),
        ("error_name.709_text", "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
        ("error_string.2", "0"),
        ("error_string.2_text", "out of memory"),
        ("error_name.unknown", "1"),
        ("error_name.unknown_is_null", "1"),
        ("error_name.null_out", "1"),
        // unknown addresses
        ("range.unknown", "500"),
        ("pointer.unknown", "1"),
        ("pointer_attributes.unknown", "0"),
        ("pointer_attributes.unknown_values", "0 -2"),
        ("host_get_device_pointer.unknown", "1"),
    ]);
}

#[test]
fn contexts_count_references_and_take_their_memory_with_them() {
    let f = facts("sim_conformance", &["contexts"], &[]);
    f.expect(&[
        ("primary.initial_active", "0"),
        ("primary.same_handle", "1"),
        ("primary.usage_after_alloc", "1048576 1"),
        ("primary.release_1", "0"),
        ("primary.active_after_release_1", "1"),
        ("primary.usage_after_release_1", "1048576 1"),
        ("primary.release_2", "0"),
        ("primary.active_after_release_2", "0"),
        ("primary.usage_after_release_2", "0 0"),
        ("primary.still_current", "1"),
        ("primary.alloc_after_last_release", "709"),
        ("primary.free_after_last_release", "709"),
        ("primary.sync_after_last_release", "709"),
        ("primary.release_unretained", "201"),
        ("primary.handle_stable", "1"),
        ("primary.new_id", "1"),
        ("primary.set_flags_v2_active", "0"),
        ("primary.set_flags_v1_active", "708"),
        ("primary.flags", "4"),
        // reset frees everything of every kind: 1 MiB + 2 MiB async + 1024 * 100 pitched
        // + 4 KiB managed + 4 KiB from a created pool
        ("reset.usage_before", "3256320 5"),
        ("reset", "0"),
        ("reset.usage_after", "0 0"),
        ("reset.active", "0"),
        ("reset.still_current", "1"),
        ("reset.alloc_after", "709"),
        ("reset.free_after", "709"),
        ("reset.pool_destroy_after", "1"),
        ("reset.release_1", "0"),
        ("reset.release_2", "0"),
        ("reset.alloc_after_releases", "709"),
        ("reset.free_after_releases", "709"),
        ("reset.free_host_after_reactivation", "1"),
        // created contexts
        ("created.v4_is_current", "1"),
        ("created.usage", "3145728 1"),
        ("created.api_version", "3020"),
        ("created.device", "0"),
        ("created.destroy", "0"),
        ("created.usage_after_destroy", "0 0"),
        ("created.current_after_destroy_is_primary", "1"),
        ("created.free_after_destroy", "1"),
        ("created.destroy_again", "709"),
        ("created.set_current_destroyed", "709"),
        ("created.push_destroyed", "709"),
        ("created.get_id_destroyed", "709"),
        // the per-thread stack
        ("stack.popped_c3", "1"),
        ("stack.current_is_destroyed_c2", "1"),
        ("stack.alloc_in_destroyed", "709"),
        ("stack.sync_in_destroyed", "709"),
        ("stack.current_after_pops_is_primary", "1"),
        ("stack.destroy_c3", "0"),
        ("stack.empty_after_destroy", "1"),
        ("stack.pop_empty", "201"),
        // destruction waits for work, and takes streams and events along
        ("destroy.waited_for_work", "1"),
        ("destroy.stream_after", "400"),
        ("destroy.event_after", "400"),
        ("destroy.usage_after", "0 0"),
        ("final.release", "0"),
    ]);
}

#[test]
fn copies_move_real_bytes_and_pointers_describe_their_memory() {
    let f = facts("sim_conformance", &["memory"], &[]);
    f.expect(&[
        ("alloc.aligned_512", "1"),
        ("copy.roundtrip", "1"),
        ("copy.unified", "1"),
        ("memset.d8", "ab ab"),
        ("memset.d16", "1234"),
        ("memset.d32", "deadbeef"),
        ("memset.d32_misaligned", "1"),
        ("memset.past_end", "1"),
        ("memset.unknown", "1"),
        ("copy.past_end", "1"),
        ("copy.to_unknown", "1"),
        ("copy.from_unknown", "1"),
        ("copy.zero_bytes", "0"),
        ("copy.null_host", "1"),
        ("copy.async_pinned", "1"),
        ("host.device_pointer_is_host_address", "1"),
        ("host.device_pointer_bad_flags", "1"),
        ("register", "0"),
        ("register.again", "712"),
        ("register.memory_type", "1"),
        ("register.free_host", "1"),
        ("unregister", "0"),
        ("unregister.again", "713"),
        ("attr.device.memory_type", "2"),
        ("attr.pinned.memory_type", "1"),
        ("attr.context_is_current", "1"),
        ("attr.ordinal", "0"),
        ("attr.managed.is_managed", "1"),
        ("attr.device.is_managed", "0"),
        ("attr.range", "1 1048576"),
        ("attr.buffer_ids_differ", "1"),
        ("attr.device.host_pointer", "1"),
        ("attr.bad_attribute", "1"),
        ("attr.async.pool_is_default", "1"),
        ("attrs.managed", "2 0 8192"),
        ("range.async_interior", "1 3000"),
        ("range.null_base", "8192"),
        ("info.delta", "104857600"),
        ("info.total", "17179869184"),
        // pools: threshold 0 releases at synchronisation; a higher one keeps and reuses
        ("pool.default_threshold", "0"),
        ("pool.reuse_opportunistic", "1"),
        ("pool.used_after_alloc", "1048576"),
        ("pool.reserved_after_alloc", "1048576"),
        ("pool.reserved_after_free_and_sync", "0"),
        ("pool.reserved_kept_under_threshold", "1048576"),
        ("pool.block_reused", "1"),
        ("pool.reserved_after_trim", "0"),
        ("pool.used_high", "1048576"),
        ("pool.used_high_reset", "0"),
        ("pool.set_used_high_nonzero", "1"),
        ("pool.set_read_only", "1"),
        ("pool.destroy_default", "1"),
        ("pool.create_bad_device", "1"),
        ("pool.current_is_mine", "1"),
        ("pool.alloc_async_uses_current", "1"),
        ("pool.destroy", "0"),
        ("pool.current_back_to_default", "1"),
        ("pool.destroy_again", "1"),
        ("pool.alloc_from_destroyed", "1"),
        ("pool.free_after_destroy", "0"),
        ("final.usage", "0 0"),
    ]);
}

#[test]
fn streams_order_simulated_work_and_free_waits_for_it() {
    let f = facts("sim_conformance", &["streams"], &[]);
    f.expect(&[
        ("stream.flags_priority_range", "1 -5 0 -5"),
        // legacy default stream semantics
        ("legacy_after_blocking", "bb"),
        ("legacy_ignores_non_blocking.before", "bb"),
        ("legacy_ignores_non_blocking.after", "aa"),
        ("blocking_after_legacy", "bb"),
        ("non_blocking_ignores_legacy.before", "bb"),
        ("non_blocking_ignores_legacy.after", "aa"),
        ("legacy_after_per_thread", "bb"),
        // queries and events
        ("query.stream_busy", "600"),
        ("query.event_pending", "600"),
        ("elapsed.pending", "600"),
        ("query.event_done", "0"),
        ("query.stream_idle", "0"),
        ("elapsed.at_least_delay", "1"),
        ("wait_event.order", "33"),
        // cuMemFree waits for all work in flight, cuMemAlloc does not
        ("alloc.did_not_wait", "1"),
        ("free.waited", "1"),
        ("stream.query_after_free", "0"),
        ("free_async.did_not_wait", "1"),
        ("free_async.usage_at_once", "1048576 1"),
        ("free_async.double", "1"),
        // when synchronous entries return
        ("memset.did_not_wait", "1"),
        ("htod_pageable.did_not_wait", "1"),
        ("dtoh.waited", "1"),
        ("sync_copies.staged_value", "88"),
        ("sync_copies.memset_value", "77"),
        ("destroy_busy.did_not_wait", "1"),
        ("destroy_busy.work_done", "cc"),
        ("fill.unknown_address", "1"),
        ("fill.past_end", "1"),
        ("fill.bad_stream", "400"),
    ]);
}

#[test]
fn vmm_maps_physical_memory_and_shares_its_bytes() {
    let f = facts("sim_conformance", &["vmm"], &[]);
    f.expect(&[
        ("granularity", "2097152 2097152"),
        ("granularity.bad_device", "101"),
        ("create.unaligned", "1"),
        ("create.flags", "1"),
        ("create.usage", "6291456 2"),
        ("reserve.aligned", "1"),
        ("map.unaligned", "1"),
        ("map.outside", "1"),
        ("map.past_handle", "1"),
        ("map", "0"),
        ("map.overlap", "1"),
        ("map.second", "0"),
        ("map.alias", "0"),
        ("memset.before_access", "1"),
        ("set_access.partial_mapping", "1"),
        ("set_access", "0"),
        ("set_access.alias_read_only", "0"),
        ("alias.sees_writes", "1"),
        ("copy.spanning_mappings", "1"),
        ("memset.read_only_alias", "1"),
        ("alias.sees_memset", "01020304"),
        ("range", "1 4194304"),
        ("attr.memory_type", "2"),
        ("unmap.partial", "1"),
        ("release.while_mapped", "0"),
        ("release.usage_still_mapped", "6291456 2"),
        ("unmap", "0"),
        ("unmap.usage_alias_still_mapped", "6291456 2"),
        ("unmap.alias", "0"),
        ("unmap.usage_after_last_unmap", "2097152 1"),
        ("unmap.again", "0"),
        ("release.again", "1"),
        ("address_free.still_mapped", "1"),
        ("address_free.wrong_size", "1"),
        ("address_free", "0"),
        ("address_free.again", "1"),
        ("range.after_free", "500"),
        ("final.usage", "0 0"),
    ]);
}

#[test]
fn memory_runs_out_at_the_configured_size() {
    let f = facts(
        "sim_conformance",
        &["oom"],
        &[("CUGUARD_SIM_MEMORY", "64MiB")],
    );
    f.expect(&[
        ("info.start", "67108864 67108864"),
        ("alloc.48", "0"),
        ("alloc.32_too_much", "2"),
        ("alloc.16", "0"),
        ("alloc.1_byte_too_much", "2"),
        ("info.full", "0"),
        ("usage.full", "67108864 2"),
        ("pitch.too_much", "2"),
        ("managed.too_much", "2"),
        ("alloc.all", "0"),
        ("alloc.all_plus_1", "2"),
        ("async.40", "0"),
        ("alloc.while_pool_caches", "2"),
        ("async.50_trims_cache", "0"),
        ("async.20_too_much", "2"),
        ("alloc.after_sync_trim", "0"),
        ("vmm.too_much", "2"),
        ("vmm.all", "0"),
        ("alloc.after_vmm", "2"),
        ("alloc.after_vmm_release", "0"),
        ("usage.end", "0 0"),
    ]);
}

#[test]
fn injected_failures_hit_the_nth_call_and_do_nothing() {
    let rules = "cuInit:1:3, cuMemAlloc_v2:2, cuMemFree_v2:2+:999, cuStreamCreate:1:201, cuMemAllocAsync_ptsz:1+";
    let f = facts(
        "sim_conformance",
        &["inject"],
        &[("CUGUARD_SIM_FAIL", rules)],
    );
    f.expect(&[
        ("init.1", "3"),
        ("init.2", "0"),
        ("alloc.1", "0"),
        ("alloc.2", "2"),
        ("alloc.2_untouched", "1"),
        ("usage.after_2", "4096 1"),
        ("alloc.3", "0"),
        // a pointer from cuGetProcAddress is the same entry, counted with the others
        ("alloc.4_through_get_proc_address", "0"),
        ("free.1", "0"),
        ("free.2", "999"),
        ("free.3", "999"),
        ("usage.after_frees", "8192 2"),
        ("stream_create.1", "201"),
        ("stream_create.2", "0"),
        ("alloc_ptsz.1", "2"),
    ]);
    assert!(
        f.stderr.is_empty(),
        "valid rules warn about nothing: {}",
        f.stderr
    );

    let bad = facts(
        "sim_conformance",
        &["inject"],
        &[("CUGUARD_SIM_FAIL", "cuMemAlloc_v3:1")],
    );
    bad.expect(&[("init.1", "0"), ("alloc.2", "0")]);
    assert_eq!(
        bad.stderr
            .lines()
            .filter(|l| l.contains("CUGUARD_SIM_FAIL"))
            .count(),
        1,
        "{}",
        bad.stderr
    );
}

#[test]
fn settings_come_from_the_environment() {
    let f = facts(
        "sim_conformance",
        &["env"],
        &[
            ("CUGUARD_SIM_DEVICES", "2"),
            ("CUGUARD_SIM_VERSION", "12080"),
            ("CUGUARD_SIM_MEMORY", "512MiB"),
        ],
    );
    f.expect(&[
        ("init", "0"),
        ("version", "12080"),
        ("devices", "2"),
        ("memory", "536870912"),
        ("device1.ctx_device", "1"),
        ("device1.pointer_ordinal", "1"),
        ("device1.usage_dev0", "0 0"),
        ("device1.usage_dev1", "1048576 1"),
        ("usage.bad_device", "101"),
        ("device1.distinct_bus_ids", "1"),
    ]);
    assert!(f.stderr.is_empty(), "{}", f.stderr);

    let none = facts("sim_conformance", &["env"], &[("CUGUARD_SIM_DEVICES", "0")]);
    none.expect(&[("init", "100"), ("version", "13000")]);

    let gb = facts(
        "sim_conformance",
        &["env"],
        &[("CUGUARD_SIM_MEMORY", "2GB")],
    );
    gb.expect(&[("memory", "2000000000")]);

    // Bad values: one line each on stderr, and the defaults.
    let bad = facts(
        "sim_conformance",
        &["env"],
        &[
            ("CUGUARD_SIM_DEVICES", "two"),
            ("CUGUARD_SIM_MEMORY", "1.5GB"),
            ("CUGUARD_SIM_VERSION", "-1"),
        ],
    );
    bad.expect(&[
        ("init", "0"),
        ("devices", "1"),
        ("memory", "17179869184"),
        ("version", "13000"),
    ]);
    for var in [
        "CUGUARD_SIM_DEVICES",
        "CUGUARD_SIM_MEMORY",
        "CUGUARD_SIM_VERSION",
    ] {
        assert_eq!(
            bad.stderr.lines().filter(|l| l.contains(var)).count(),
            1,
            "{var}: {}",
            bad.stderr
        );
    }
}

#[test]
fn alloc_and_free_latency_is_spent_on_the_synchronous_entries() {
    let env = [
        ("CUGUARD_SIM_ALLOC_LATENCY_US", "2000"),
        ("CUGUARD_SIM_FREE_LATENCY_US", "1000"),
    ];
    let f = facts("sim_conformance", &["latency"], &env);
    // 20 pairs at 3 ms each.
    assert!(f.num("sync_pairs_ms") >= 60.0, "{}", f.stdout);
    assert!(f.num("async_pairs_ms") < 60.0, "{}", f.stdout);
}

/// One row of the table in `harness/simcuda/src/symbols.rs`.
#[derive(Debug, Clone)]
struct Row {
    kind: String,
    base: String,
    since: i32,
    symbol: String,
}

/// Reads the rows of the `cuGetProcAddress` table from its source.
fn table_rows() -> Vec<Row> {
    let path = support::artifacts()
        .root
        .join("harness/simcuda/src/symbols.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("$row!(")?
                .strip_suffix("),")
                .map(str::to_string)
        })
        .map(|inner| {
            let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
            assert_eq!(parts.len(), 4, "unexpected row {inner}");
            Row {
                kind: parts[0].to_string(),
                base: parts[1].trim_matches('"').to_string(),
                since: parts[2].parse().unwrap(),
                symbol: parts[3].rsplit("::").next().unwrap().to_string(),
            }
        })
        .collect()
}

/// The `cu*` symbols the simulated driver exports.
fn exported_symbols() -> Option<BTreeSet<String>> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&support::artifacts().sim_lib)
        .output()
        .ok()?;
    assert!(out.status.success());
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2))
            .filter(|s| s.starts_with("cu"))
            .map(str::to_string)
            .collect(),
    )
}

/// Asks `sim_procaddr` the queries `BASE:VERSION:FLAGS`; returns, per query, the fields
/// `[rc_v2, status, name_v2, rc_v1, name_v1]`, plus the program's other facts.
fn proc_queries(queries: &[String]) -> (HashMap<String, Vec<String>>, Facts) {
    let args: Vec<&str> = queries.iter().map(String::as_str).collect();
    let f = facts("sim_procaddr", &args, &[]);
    let mut answers = HashMap::new();
    for line in f.stdout.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.len() == 8 {
            let key = format!("{}:{}:{}", cols[0], cols[1], cols[2]);
            answers.insert(key, cols[3..].iter().map(|s| s.to_string()).collect());
        }
    }
    (answers, f)
}

#[test]
fn get_proc_address_answers_per_version_and_flag() {
    let expected: &[(&str, [&str; 5])] = &[
        (
            "cuMemAlloc:3020:0",
            ["0", "0", "cuMemAlloc_v2", "0", "cuMemAlloc_v2"],
        ),
        (
            "cuMemAlloc:13000:0",
            ["0", "0", "cuMemAlloc_v2", "0", "cuMemAlloc_v2"],
        ),
        (
            "cuMemAlloc:3010:0",
            ["0", "0", "cuMemAlloc", "0", "cuMemAlloc"],
        ),
        (
            "cuMemAlloc:13000:2",
            ["0", "0", "cuMemAlloc_v2", "0", "cuMemAlloc_v2"],
        ),
        (
            "cuMemFree:13000:0",
            ["0", "0", "cuMemFree_v2", "0", "cuMemFree_v2"],
        ),
        (
            "cuCtxCreate:12050:0",
            ["0", "0", "cuCtxCreate_v4", "0", "cuCtxCreate_v4"],
        ),
        (
            "cuCtxCreate:12040:0",
            ["0", "0", "cuCtxCreate_v3", "0", "cuCtxCreate_v3"],
        ),
        (
            "cuCtxCreate:11040:0",
            ["0", "0", "cuCtxCreate_v3", "0", "cuCtxCreate_v3"],
        ),
        (
            "cuCtxCreate:11030:0",
            ["0", "0", "cuCtxCreate_v2", "0", "cuCtxCreate_v2"],
        ),
        (
            "cuCtxCreate:3020:0",
            ["0", "0", "cuCtxCreate_v2", "0", "cuCtxCreate_v2"],
        ),
        (
            "cuCtxCreate:2000:0",
            ["0", "0", "cuCtxCreate", "0", "cuCtxCreate"],
        ),
        // too old a version: the v2 entry succeeds with status 2, the v1 entry fails
        ("cuMemAllocAsync:11010:0", ["0", "2", "NULL", "500", "NULL"]),
        (
            "cuMemAllocAsync:11020:0",
            ["0", "0", "cuMemAllocAsync", "0", "cuMemAllocAsync"],
        ),
        (
            "cuMemAllocAsync:11020:1",
            ["0", "0", "cuMemAllocAsync", "0", "cuMemAllocAsync"],
        ),
        (
            "cuMemAllocAsync:12000:2",
            [
                "0",
                "0",
                "cuMemAllocAsync_ptsz",
                "0",
                "cuMemAllocAsync_ptsz",
            ],
        ),
        (
            "cuMemFreeAsync:12000:2",
            ["0", "0", "cuMemFreeAsync_ptsz", "0", "cuMemFreeAsync_ptsz"],
        ),
        (
            "cuMemAllocFromPoolAsync:12000:2",
            [
                "0",
                "0",
                "cuMemAllocFromPoolAsync_ptsz",
                "0",
                "cuMemAllocFromPoolAsync_ptsz",
            ],
        ),
        (
            "cuMemcpyHtoD:12000:2",
            [
                "0",
                "0",
                "cuMemcpyHtoD_v2_ptds",
                "0",
                "cuMemcpyHtoD_v2_ptds",
            ],
        ),
        (
            "cuMemcpyHtoD:12000:0",
            ["0", "0", "cuMemcpyHtoD_v2", "0", "cuMemcpyHtoD_v2"],
        ),
        (
            "cuStreamSynchronize:12000:2",
            [
                "0",
                "0",
                "cuStreamSynchronize_ptsz",
                "0",
                "cuStreamSynchronize_ptsz",
            ],
        ),
        (
            "cuMemsetD32:12000:2",
            ["0", "0", "cuMemsetD32_v2_ptds", "0", "cuMemsetD32_v2_ptds"],
        ),
        (
            "cuMemcpy:12000:2",
            ["0", "0", "cuMemcpy_ptds", "0", "cuMemcpy_ptds"],
        ),
        // a per-thread variant newer than the version asked for is "version not sufficient"
        ("cuEventRecord:3020:2", ["0", "2", "NULL", "500", "NULL"]),
        (
            "cuEventRecord:3020:0",
            ["0", "0", "cuEventRecord", "0", "cuEventRecord"],
        ),
        // unknown names, versioned names included
        ("cuNoSuchThing:13000:0", ["0", "1", "NULL", "500", "NULL"]),
        ("cuMemAlloc_v2:13000:0", ["0", "1", "NULL", "500", "NULL"]),
        (
            "cusimEnqueueFill:13000:0",
            ["0", "1", "NULL", "500", "NULL"],
        ),
        (
            "cuGetProcAddress:12000:0",
            ["0", "0", "cuGetProcAddress_v2", "0", "cuGetProcAddress_v2"],
        ),
        (
            "cuGetProcAddress:11040:0",
            ["0", "0", "cuGetProcAddress", "0", "cuGetProcAddress"],
        ),
        (
            "cuGetProcAddress:11020:0",
            ["0", "2", "NULL", "500", "NULL"],
        ),
        (
            "cuDevicePrimaryCtxRelease:11000:0",
            [
                "0",
                "0",
                "cuDevicePrimaryCtxRelease_v2",
                "0",
                "cuDevicePrimaryCtxRelease_v2",
            ],
        ),
        (
            "cuMemGetInfo:2000:0",
            ["0", "0", "cuMemGetInfo", "0", "cuMemGetInfo"],
        ),
        (
            "cuIpcOpenMemHandle:12000:0",
            [
                "0",
                "0",
                "cuIpcOpenMemHandle_v2",
                "0",
                "cuIpcOpenMemHandle_v2",
            ],
        ),
        (
            "cuEventElapsedTime:13000:0",
            [
                "0",
                "0",
                "cuEventElapsedTime_v2",
                "0",
                "cuEventElapsedTime_v2",
            ],
        ),
        (
            "cuDeviceGetUuid:13000:0",
            ["0", "0", "cuDeviceGetUuid_v2", "0", "cuDeviceGetUuid_v2"],
        ),
    ];
    let queries: Vec<String> = expected.iter().map(|(q, _)| q.to_string()).collect();
    let (answers, f) = proc_queries(&queries);
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(q, want)| {
            answers
                .get(*q)
                .map(|a| a.iter().map(String::as_str).collect::<Vec<_>>())
                != Some(want.to_vec())
        })
        .map(|(q, want)| format!("  {q}: expected {want:?}, got {:?}", answers.get(*q)))
        .collect();
    assert!(
        wrong.is_empty(),
        "cuGetProcAddress answers differ:\n{}\n{}",
        wrong.join("\n"),
        f.stdout
    );
    f.expect(&[
        ("self", "cuGetProcAddress_v2\tcuMemAlloc_v2"),
        ("callable", "0\t1\t0"),
        ("bad_flags", "1"),
    ]);
}

/// With a library preloaded that exports some of the driver's names (as the shim does),
/// `cuGetProcAddress` still hands out the driver's own entries, as the real driver does.
#[test]
fn get_proc_address_answers_are_the_drivers_own_entries_under_a_preload() {
    let a = support::artifacts();
    let dir = support::scratch_dir("interposer");
    let lib = dir.join("libsim_interposer.so");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(a.root.join("harness/workloads/c/sim_interposer.c"))
        .arg("-I")
        .arg(a.root.join("harness/workloads/c"))
        .status()
        .expect("running cc");
    assert!(status.success(), "compiling sim_interposer.c failed");
    let plain = facts("sim_procaddr", &[], &[]);
    plain.expect(&[("own_entries", "1"), ("callable", "0\t1\t0")]);
    let lib = lib.to_string_lossy().into_owned();
    let preloaded = facts("sim_procaddr", &[], &[("LD_PRELOAD", lib.as_str())]);
    preloaded.expect(&[("own_entries", "1"), ("callable", "0\t1\t0")]);
}

#[test]
fn get_proc_address_table_covers_every_export() {
    let rows = table_rows();
    assert!(rows.len() > 100, "found only {} rows", rows.len());
    if let Some(exports) = exported_symbols() {
        let in_table: BTreeSet<String> = rows.iter().map(|r| r.symbol.clone()).collect();
        let extensions: BTreeSet<String> = ["cusimEnqueueFill", "cusimGetUsage"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let missing: Vec<_> = exports
            .difference(&in_table)
            .filter(|s| !extensions.contains(*s))
            .collect();
        let not_exported: Vec<_> = in_table.difference(&exports).collect();
        assert!(
            missing.is_empty(),
            "exported but not in the table: {missing:?}"
        );
        assert!(
            not_exported.is_empty(),
            "in the table but not exported: {not_exported:?}"
        );
        assert!(extensions.is_subset(&exports));
    } else {
        eprintln!("nm not found: export list not checked");
    }

    // Each row is what its base name gives at its own version (per-thread rows with the flag);
    // just below a base name's first version there is nothing.
    let mut queries = Vec::new();
    let mut want = HashMap::new();
    for r in &rows {
        let (version, flags) = if r.kind == "Default" {
            (r.since, 0)
        } else {
            let default = r.symbol.trim_end_matches("_ptds").trim_end_matches("_ptsz");
            let d = rows
                .iter()
                .find(|d| d.symbol == default)
                .expect("default row");
            (r.since.max(d.since), 2)
        };
        let q = format!("{}:{}:{}", r.base, version, flags);
        want.insert(q.clone(), r.symbol.clone());
        queries.push(q);
    }
    let mut first: HashMap<&str, i32> = HashMap::new();
    for r in &rows {
        let e = first.entry(r.base.as_str()).or_insert(r.since);
        *e = (*e).min(r.since);
    }
    let too_old: Vec<String> = first
        .iter()
        .map(|(b, v)| format!("{b}:{}:0", v - 1))
        .collect();
    queries.extend(too_old.iter().cloned());
    let (answers, f) = proc_queries(&queries);
    let mut wrong = Vec::new();
    for (q, symbol) in &want {
        let a = &answers[q];
        if a[0] != "0" || a[1] != "0" || a[2] != *symbol || a[3] != "0" || a[4] != *symbol {
            wrong.push(format!("  {q}: expected {symbol}, got {a:?}"));
        }
    }
    for q in &too_old {
        let a = &answers[q];
        if a[..] != ["0", "2", "NULL", "500", "NULL"] {
            wrong.push(format!("  {q}: expected version not sufficient, got {a:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "table answers differ:\n{}\n{}",
        wrong.join("\n"),
        f.stderr
    );
}

#[test]
fn many_threads_allocate_and_free_at_once() {
    let f = facts("sim_threads", &[], &[]);
    f.expect(&[("mismatches", "0"), ("failures", "0"), ("usage", "0 0")]);
}

#[test]
fn ipc_handles_share_memory_between_processes() {
    let f = facts("sim_ipc", &[], &[]);
    f.expect(&[
        ("parent.get_handle", "0"),
        ("parent.open_own", "201"),
        ("parent.get_handle_async", "1"),
        ("parent.get_handle_unknown", "1"),
        ("parent.still_readable", "5c"),
        ("child.open", "0"),
        ("child.read", "5c 5c"),
        ("child.range", "1 1048576"),
        ("child.free_mapping", "1"),
        ("child.close", "0"),
        ("child.close_again", "1"),
        ("child.bad_handle", "1"),
        ("parent.child_exit", "0"),
        ("parent.sees_child_writes", "5c c5 5c"),
        ("parent.free", "0"),
    ]);
}

#[test]
fn the_cudarc_call_path_runs() {
    let f = facts("sim_cudarc_path", &[], &[]);
    assert!(
        !f.stdout.contains("missing\t"),
        "entries cudarc needs are missing:\n{}",
        f.stdout
    );
    let failed: Vec<&str> = f
        .stdout
        .lines()
        .filter(|l| l.starts_with("step.") && !l.ends_with("\t0"))
        .collect();
    assert!(failed.is_empty(), "steps failed: {failed:?}");
    f.expect(&[
        ("has_async_alloc", "1"),
        ("data.roundtrip", "1"),
        ("data.zeros", "1"),
        ("usage", "0 0"),
        ("error_string", "out of memory"),
    ]);

    // The real cudarc workload, without the shim.
    let prog = support::rust_program("cudarc_leaks");
    if prog.exists() {
        for args in [&[][..], &["--drop-context"][..]] {
            let out = support::run(support::sim_command(&prog).args(args), true);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("\"case\":\"cudarc\""), "{stdout}");
        }
    }
}

/// The newest `docs/gpu-runs/*driver-facts.tsv`.
fn newest_measurement(root: &Path) -> Option<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(root.join("docs/gpu-runs"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("driver-facts.tsv"))
        .collect();
    runs.sort();
    runs.pop()
}

/// The probe that measured the real driver on an H200 (`scripts/gpu/driver_facts.c`), compiled
/// against `cusim.h` and run on the simulator, answers as the real driver did, line for line,
/// except where the simulator knowingly differs.
#[test]
fn the_h200_measurements_are_reproduced() {
    let a = support::artifacts();
    let probe = a.root.join("scripts/gpu/driver_facts.c");
    let (true, Some(measured)) = (probe.exists(), newest_measurement(&a.root)) else {
        eprintln!("no probe or measurement: skipped");
        return;
    };
    let dir = support::scratch_dir("h200-facts");
    std::fs::write(dir.join("cuda.h"), "#include \"cusim.h\"\n").unwrap();
    let exe = dir.join("driver_facts");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&probe)
        .arg("-I")
        .arg(&dir)
        .arg("-I")
        .arg(a.root.join("harness/workloads/c"))
        .arg("-ldl")
        .status()
        .expect("running cc");
    assert!(
        status.success(),
        "compiling {} against cusim.h failed",
        probe.display()
    );
    let f = run_facts(&exe, &[], &[]);

    // Where the simulator differs on purpose: its own path; entries it does not simulate; it
    // does not sub-allocate small allocations from shared pages (each one is its own mapping);
    // and timings.
    let not_simulated = [
        "cuMemMapArrayAsync",
        "cuMemMapArrayAsync_ptsz",
        "cuGraphMemFreeNodeGetParams",
    ];
    let compared = |line: &&str| {
        let cols: Vec<&str> = line.split('\t').collect();
        let timing_or_path = matches!(cols[0], "path" | "gap_after_256_then_1" | "pair_1MiB_us");
        let not_exported = cols[0] == "export" && not_simulated.contains(&cols[1]);
        !(timing_or_path || not_exported)
    };
    let text = std::fs::read_to_string(&measured).unwrap();
    let real: Vec<&str> = text.lines().filter(compared).collect();
    let sim: Vec<&str> = f.stdout.lines().filter(compared).collect();
    let differ: Vec<String> = real
        .iter()
        .zip(sim.iter())
        .filter(|(r, s)| r != s)
        .map(|(r, s)| format!("  real: {r}\n  sim:  {s}"))
        .collect();
    assert!(
        differ.is_empty() && real.len() == sim.len(),
        "{} lines differ from {} ({} real lines, {} simulated):\n{}",
        differ.len(),
        measured.display(),
        real.len(),
        sim.len(),
        differ.join("\n")
    );
}

/// A `cuMemAlloc` range freed with `cuMemFreeAsync` stays taken (cuMemGetInfo, cusimGetUsage,
/// NVML) until a synchronization with the stream of the free, as on the H200
/// (docs/gpu-runs/2026-12-02-run1/giveback.md: still taken after synchronizing another,
/// non-blocking stream and after a `cuMemFree_v2` of another allocation; back after the legacy
/// stream's synchronize, an event's and the context's); its address is dead at once.
#[test]
fn a_stream_ordered_free_of_a_plain_allocation_is_held_until_a_synchronization() {
    let a = support::artifacts();
    let dir = support::scratch_dir("sim-held-free");
    let link = dir.join("libnvidia-ml.so.1");
    std::os::unix::fs::symlink(&a.sim_lib, &link).unwrap();
    let mut cmd = support::sim_command(&support::c_program("sim_held_free"));
    cmd.env(
        "LD_LIBRARY_PATH",
        format!("{}:{}", a.sim_dir.display(), dir.display()),
    );
    let out = support::run(&mut cmd, true);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let map = stdout
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let f = Facts {
        map,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    f.expect(&[
        ("nvml", "1"),
        ("held.samples_taken", "5"),
        ("held.address_dead", "500"),
        ("held.free_again", "1"),
        ("held.alloc_under_pressure", "2"),
        ("query.back", "0"),
        ("ctx_synchronize.back", "1"),
        ("stream.held", "1"),
        ("stream_synchronize.back", "1"),
        ("other_stream_synchronize.held", "1"),
        ("mem_free.held", "1"),
        ("legacy_stream_synchronize.back", "1"),
        ("event_synchronize.back", "1"),
        ("before_the_stream.held", "1"),
        ("after_the_stream.back", "1"),
        ("async_alloc.back", "1"),
        ("created_context.held", "1"),
        ("context_destroy.back", "1"),
    ]);
}
