//! Allocations during a stream capture answer as the driver does, pool on or off: a global or
//! thread-local capture forbids cuMemAlloc (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, 900) and the
//! capture ends invalidated (901, no graph); a relaxed one allocates; another thread is forbidden
//! only by a global capture, and not in relaxed interaction mode. On the H200 the pool used to
//! answer 0/0 from its cache (and "out of memory" where it had to grow).

use crate::support::{
    c_program, env_tag, read_report, run, scratch_dir, shim_command, sim_command,
};

#[test]
fn allocations_during_a_capture_get_the_drivers_answers_pool_on_and_off() {
    let program = c_program("capture_answers");
    let bare = String::from_utf8(run(&mut sim_command(&program), true).stdout).unwrap();
    let expected = [
        ("global", "900", "2", "901", "null"),
        ("global_64MiB", "900", "2", "901", "null"),
        ("global_pitch", "900", "2", "901", "null"),
        ("thread_local", "900", "2", "901", "null"),
        ("relaxed", "0", "1", "0", "made"),
        ("relaxed_64MiB", "0", "1", "0", "made"),
        ("global_other_thread", "900", "2", "901", "null"),
        ("global_other_relaxed", "0", "1", "0", "made"),
        ("thread_local_other_thread", "0", "1", "0", "made"),
        ("relaxed_other_thread", "0", "1", "0", "made"),
        ("global_thread_relaxed", "0", "1", "0", "made"),
    ];
    let mut want = String::new();
    for (name, alloc, status, end, graph) in expected {
        want += &format!(
            "{name}.alloc\t{alloc}\n{name}.status\t{status}\n{name}.end\t{end}\n{name}.graph\t{graph}\n"
        );
        if name == "relaxed_other_thread" {
            want += "exchange.previous\t0\n";
        }
    }
    want += "exchange.bad_mode\t1\nafter.alloc\t0\n";
    assert_eq!(bare, want, "the simulated driver's answers");
    for env in [
        &[("CUGUARD_POOL", "0")][..],
        &[("CUGUARD_POOL", "1")],
        &[("CUGUARD_POOL", "1"), ("CUGUARD_POOL_THREAD_CACHE", "0")],
    ] {
        let dir = scratch_dir(&format!("capture{}", env_tag(env)));
        let report = dir.join("r.json");
        let mut cmd = shim_command(&program, &report);
        cmd.env("CUGUARD_QUIET", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = run(&mut cmd, true);
        assert_eq!(String::from_utf8(out.stdout).unwrap(), bare, "{env:?}");
        let r = read_report(&report);
        crate::cli_schema::validate(&r).unwrap();
        assert_eq!(r["leaks"].as_array().unwrap().len(), 0, "{env:?}");
    }
}
