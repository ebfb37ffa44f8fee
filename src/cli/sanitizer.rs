//! `cuguard run --sanitizer TOOL`: compute-sanitizer and cuguard's pool in one run.
//!
//! compute-sanitizer runs `cuguard run --exec … -- PROGRAM`, which preloads the shim into the
//! program and becomes it (one process: compute-sanitizer follows it across the exec, and keeps
//! its own `LD_PRELOAD` entries, which the shim's goes in front of). compute-sanitizer itself
//! never has the shim loaded. The pool is turned on (`CUGUARD_POOL=1`); compute-sanitizer sets
//! `NVTX_INJECTION64_PATH`, so the shim attaches its NVTX tool at the first pool and registers
//! each chunk as a heap and each block as a region of it (`shim/src/serving/regions.rs`).
//!
//! The sanitizer gets `--tool TOOL --nvtx yes`, and for memcheck `--leak-check no`: the pool
//! keeps its chunks past the program's frees, so compute-sanitizer's leak check would count the
//! chunks, not what the program leaked; cuguard's report counts the blocks. The options given
//! with `--sanitizer-arg` come after, so they win; a leak check asked there gets one line saying
//! what it will count.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use super::error::{CliError, RunError};
use super::run::{Driver, RunArgs, Tool, find_shim, wait_for};

/// The compute-sanitizer to run: `--sanitizer-path`, else `$CUGUARD_COMPUTE_SANITIZER`, else
/// `compute-sanitizer` on `PATH`, else the CUDA toolkit's default place.
fn find_sanitizer(given: Option<&PathBuf>) -> Result<PathBuf, RunError> {
    let what = "compute-sanitizer";
    if let Some(p) = given.cloned().or_else(|| {
        std::env::var_os("CUGUARD_COMPUTE_SANITIZER")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }) {
        return if p.is_file() {
            Ok(p)
        } else {
            Err(RunError::NotFound {
                what,
                looked: vec![p],
            })
        };
    }
    let mut looked = Vec::new();
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        let p = dir.join(what);
        if p.is_file() {
            return Ok(p);
        }
    }
    looked.push(PathBuf::from("compute-sanitizer on PATH"));
    let p = PathBuf::from("/usr/local/cuda/bin/compute-sanitizer");
    if p.is_file() {
        return Ok(p);
    }
    looked.push(p);
    Err(RunError::NotFound { what, looked })
}

/// Whether `option` is among `args` (as `--option` or `--option=value`).
fn mentions(args: &[OsString], option: &str) -> bool {
    args.iter().any(|a| {
        let a = a.to_string_lossy();
        a == option || a.strip_prefix(option).is_some_and(|r| r.starts_with('='))
    })
}

/// Whether a compute-sanitizer option turns its leak check on.
fn asks_leak_check(args: &[OsString]) -> bool {
    args.iter().enumerate().any(|(i, a)| {
        let a = a.to_string_lossy();
        match a.strip_prefix("--leak-check") {
            Some(rest) if rest.starts_with('=') => rest != "=no",
            Some("") => args.get(i + 1).is_some_and(|v| v != "no"),
            _ => false,
        }
    })
}

/// Runs `args.command` under compute-sanitizer's `tool`, through `cuguard run --exec`.
pub fn run(args: &RunArgs, tool: Tool) -> Result<u8, CliError> {
    // Found here, so that a missing shim is said before the sanitizer starts.
    let shim = find_shim()?;
    let sanitizer = find_sanitizer(args.sanitizer_path.as_ref())?;
    let me =
        std::env::current_exe().map_err(|e| RunError::ProgramNotExecutable("cuguard".into(), e))?;
    let mut cmd = Command::new(&sanitizer);
    cmd.args(["--tool", tool.name()]);
    // An option given with --sanitizer-arg replaces cuguard's (compute-sanitizer may refuse one
    // given twice).
    let given = &args.sanitizer_arg;
    if tool == Tool::Memcheck && !mentions(given, "--leak-check") {
        cmd.args(["--leak-check", "no"]);
    }
    if !mentions(given, "--nvtx") {
        cmd.args(["--nvtx", "yes"]);
    }
    if asks_leak_check(given) {
        eprintln!(
            "cuguard: compute-sanitizer's leak check sees the pool's chunks, which the pool keeps \
             past the program's frees; the leaks to read are cuguard's report's, block by block"
        );
    }
    cmd.args(&args.sanitizer_arg);
    cmd.arg(me).args(["run", "--exec", "--driver"]);
    cmd.arg(match args.driver {
        Driver::System => "system",
        Driver::Sim => "sim",
    });
    if let Some(template) = &args.report {
        cmd.arg("--report").arg(template);
    }
    if args.quiet {
        cmd.arg("--quiet");
    }
    cmd.arg("--").args(&args.command);
    cmd.env("CUGUARD_SHIM", &shim);
    cmd.env("CUGUARD_POOL", "1");
    // One run id for every process, compute-sanitizer's children included.
    cmd.env(
        "CUGUARD_RUN_ID",
        super::run::run_id(std::env::var("CUGUARD_RUN_ID").ok().as_deref()),
    );
    let name = sanitizer.clone().into_os_string();
    wait_for(cmd, move |e| match e.kind() {
        std::io::ErrorKind::NotFound => RunError::ProgramNotFound(name),
        _ => RunError::ProgramNotExecutable(name, e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leak_check_asked_for() {
        let v = |s: &[&str]| s.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(asks_leak_check(&v(&["--leak-check=full"])));
        assert!(asks_leak_check(&v(&["--leak-check", "full"])));
        assert!(!asks_leak_check(&v(&["--leak-check=no"])));
        assert!(!asks_leak_check(&v(&[
            "--leak-check",
            "no",
            "--show-backtrace=no"
        ])));
        assert!(!asks_leak_check(&v(&["--show-backtrace=no"])));
        assert!(mentions(&v(&["--nvtx=no"]), "--nvtx"));
        assert!(mentions(&v(&["--nvtx", "no"]), "--nvtx"));
        assert!(!mentions(&v(&["--nvtxx"]), "--nvtx"));
    }
}
