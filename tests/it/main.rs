//! Integration tests: real processes, run under `LD_PRELOAD=libcuguard.so` against the simulated
//! driver in `harness/simcuda`. All of them build into this one test binary.

mod attribution;
mod bench_args;
mod by_hand;
mod call_paths;
mod cli;
mod cli_check;
mod cli_diff_formats;
mod cli_diff_ranks;
mod cli_export;
mod cli_history;
mod cli_hostile_text;
mod cli_job;
mod cli_live;
mod cli_merge;
mod cli_phases;
mod cli_schema;
mod cli_symbolize;
mod cli_tags;
mod cli_usage;
mod cli_view;
mod cost;
mod docs_blocks;
mod docs_paths;
mod first_hour;
mod format_read;
mod framework_oom;
mod history_identity;
mod history_recording;
mod history_setting;
mod history_streams;
mod hostile_input;
mod limit;
mod limit_nvml;
mod live;
mod oom_card;
mod origin;
mod pair_bench;
mod pool;
mod pool_capture;
mod pool_giveback;
mod pool_ipc;
mod pool_nvtx;
mod pool_peer;
mod pool_stream;
mod python;
mod python_api;
mod reliability;
mod reliability_race;
mod replay;
mod rmm_oom;
mod shared_exporter;
mod shared_files;
mod shared_python;
mod shared_snapshot;
mod shim_leaks;
mod sim_driver;
mod sites;
mod source_layout;
mod stack;
mod stripped;
mod support;
mod torch_blocks;
mod torch_oom;

#[test]
fn artifacts_are_built() {
    let a = support::artifacts();
    assert!(a.shim.exists());
    assert!(a.sim_lib.exists());
}
