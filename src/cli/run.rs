//! `cuguard run`: run a program with `libcuguard.so` preloaded, and pass its exit status through.
//!
//! Where things are found:
//! - the shim: `$CUGUARD_SHIM`, else `libcuguard.so` next to the `cuguard` executable, else
//!   `<exe dir>/../lib/cuguard/libcuguard.so`;
//! - the simulated driver (`--driver sim`): `$CUGUARD_SIM_DRIVER`, else
//!   `libcuguard_simcuda.so` next to the executable, else `<exe dir>/../lib/cuguard/`.
//!
//! With `--driver sim`, `LD_LIBRARY_PATH` gets a directory holding `libcuda.so.1` and
//! `libcuda.so`, links to the simulated driver; `PYTHONPATH` gets one holding the Python
//! bootstrap. Each is `<dir of the library>/cuguard-sim/` (or `cuguard-python/`) where that can
//! be written or is there already, else a per-user directory that another user can neither make
//! first nor fill: `$XDG_RUNTIME_DIR/cuguard-sim`, else `$TMPDIR/cuguard-sim-<uid>/`, else (when
//! another user took that name) a fresh private `cuguard-sim-<uid>.XXXXXXXX`, said in one line
//! ([`user_dir`]). Links and files are made under random names and renamed into place, so
//! several `cuguard run` at once are safe.
//!
//! Every process of the run gets `CUGUARD_RUN_ID` ([`run_id`]): the shim writes it in each report,
//! so that reports of one run given one path each keep a file and a later run's report replaces
//! an earlier run's at that path (`shim/src/writer/file.rs`). A run inside another (`cuguard run`
//! started by a program that runs under `cuguard run`) is part of it and keeps its id.
//!
//! While the program runs, `cuguard` ignores SIGINT and SIGQUIT (the terminal sends them to the
//! program too) and forwards SIGTERM and SIGHUP to it.
//!
//! Without `--driver sim`, where the program would find no `libcuda.so.1` ([`driver_found`]),
//! `cuguard` says so in one line ([`NO_DRIVER`]) before it starts the program, and then runs it
//! all the same: a warning, not a refusal.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use clap::{Args, ValueEnum};

use super::error::{CliError, RunError};
use super::exit;
use crate::wording::one_line;

/// Which CUDA driver the program gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Driver {
    /// The system's libcuda (nothing but LD_PRELOAD is changed).
    #[default]
    System,
    /// cuguard's simulated driver (host memory stands in for device memory).
    Sim,
}

/// compute-sanitizer's tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tool {
    /// Out-of-bounds and misaligned accesses, use after free (each pooled block is one allocation to it).
    Memcheck,
    /// Reads of uninitialized device memory.
    Initcheck,
    /// Shared-memory data races (does not look at global memory: pooled blocks change nothing).
    Racecheck,
    /// Misuse of synchronization primitives.
    Synccheck,
}

impl Tool {
    pub(super) fn name(self) -> &'static str {
        match self {
            Tool::Memcheck => "memcheck",
            Tool::Initcheck => "initcheck",
            Tool::Racecheck => "racecheck",
            Tool::Synccheck => "synccheck",
        }
    }
}

/// Arguments of `cuguard run`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  cuguard run -- ./train --epochs 1
  cuguard run --report 'reports/cuguard.%e.%p.json' --quiet -- python3 train.py
  cuguard run --driver sim -- ./my_test        # no GPU needed
  cuguard run --sanitizer memcheck -- ./train  # compute-sanitizer's memcheck sees each pooled block

With --sanitizer, compute-sanitizer runs the program (--tool TOOL --nvtx yes, and for memcheck
--leak-check no: cuguard's report counts the leaks, block by block, where compute-sanitizer's
would count the pool's chunks). The pool is on, and tells the sanitizer each block it hands out
(address and size asked) through NVTX's memory API, so memcheck reports a write past a block or a
use after its free as it does without a pool.

The exit status is PROGRAM's (128+N if signal N killed it); 127 if PROGRAM is not found,
126 if it cannot be executed, 2 if the shim cannot be found.

Report template fields: %p pid, %e executable name, %h host, %r rank, %t start time, %% percent.")]
pub struct RunArgs {
    /// Which CUDA driver the program uses.
    #[arg(long, value_enum, default_value_t = Driver::System)]
    pub driver: Driver,
    /// Where the shim writes the report (sets CUGUARD_REPORT); its directory is made when it is
    /// missing and names no placeholder.
    #[arg(long, value_name = "TEMPLATE")]
    pub report: Option<OsString>,
    /// Silence the shim's one-line summary at exit (sets CUGUARD_QUIET=1).
    #[arg(long)]
    pub quiet: bool,
    /// Run the program under compute-sanitizer with this tool, the pool on and each pooled
    /// block registered with the sanitizer.
    #[arg(long, value_enum, value_name = "TOOL")]
    pub sanitizer: Option<Tool>,
    /// The compute-sanitizer to run (default: $CUGUARD_COMPUTE_SANITIZER, else
    /// compute-sanitizer on PATH, else /usr/local/cuda/bin/compute-sanitizer).
    #[arg(long, value_name = "PATH", requires = "sanitizer")]
    pub sanitizer_path: Option<PathBuf>,
    /// One more option for compute-sanitizer (repeatable), e.g. --sanitizer-arg=--show-backtrace=no.
    #[arg(
        long,
        value_name = "ARG",
        allow_hyphen_values = true,
        requires = "sanitizer"
    )]
    pub sanitizer_arg: Vec<OsString>,
    /// Replace this process by PROGRAM instead of waiting for it (what --sanitizer runs under
    /// compute-sanitizer).
    #[arg(long, hide = true)]
    pub exec: bool,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

/// Finds a library: the environment variable, else next to the executable, else in
/// `<exe dir>/../lib/cuguard/`.
fn find_library(what: &'static str, var: &str, file: &str) -> Result<PathBuf, RunError> {
    let mut looked = Vec::new();
    if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return absolute(p);
        }
        looked.push(p);
        return Err(RunError::NotFound { what, looked });
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        for p in [dir.join(file), dir.join("../lib/cuguard").join(file)] {
            if p.is_file() {
                return absolute(p);
            }
            looked.push(p);
        }
    }
    Err(RunError::NotFound { what, looked })
}

fn absolute(p: PathBuf) -> Result<PathBuf, RunError> {
    let p = std::fs::canonicalize(&p).unwrap_or(p);
    if p.as_os_str()
        .as_bytes()
        .iter()
        .any(|b| matches!(b, b' ' | b':'))
    {
        return Err(RunError::UnusablePath(p));
    }
    Ok(p)
}

/// `first` then the entries of `existing` (separated by `:` or spaces) other than `first`.
fn prepend(first: &Path, existing: Option<OsString>) -> OsString {
    let mut out = OsString::from(first);
    if let Some(existing) = existing {
        for entry in existing
            .as_bytes()
            .split(|b| matches!(b, b':' | b' '))
            .filter(|e| !e.is_empty() && *e != first.as_os_str().as_bytes())
        {
            out.push(":");
            out.push(OsStr::from_bytes(entry));
        }
    }
    out
}

/// Makes (or reuses) the directory of `libcuda.so.1` / `libcuda.so` links to `sim_lib`
/// ([`user_dir`]).
fn sim_dir(sim_lib: &Path) -> Result<PathBuf, RunError> {
    user_dir(
        sim_lib,
        "cuguard-sim",
        "the simulated driver's links",
        |dir, _| populate(dir, sim_lib),
        |dir, source| RunError::SimDir { dir, source },
    )
}

/// Makes `dir` hold `libcuda.so.1` and `libcuda.so` resolving to `target`, race-safely: each
/// link is made under a random name and renamed into place. `dir` is closed to other users
/// ([`user_dir`]).
fn populate(dir: &Path, target: &Path) -> io::Result<()> {
    let want = std::fs::canonicalize(target)?;
    for name in ["libcuda.so.1", "libcuda.so"] {
        let link = dir.join(name);
        if std::fs::canonicalize(&link).ok().as_deref() == Some(want.as_path()) {
            continue;
        }
        let temp = dir.join(format!(".{name}.{:016x}", cuguard_files::random()));
        std::os::unix::fs::symlink(&want, &temp)?;
        if let Err(e) = std::fs::rename(&temp, &link) {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
    }
    Ok(())
}

/// cuguard's Python bootstrap (`src/python/cuguard/_bootstrap/sitecustomize.py`): Python imports
/// it at start-up when its directory is on `PYTHONPATH`, and it marks where the program's code
/// ends, for the report's `python` section.
const PYTHON_BOOTSTRAP: &str = include_str!("../python/cuguard/_bootstrap/sitecustomize.py");

/// Makes (or reuses) a directory holding the bootstrap as `sitecustomize.py` ([`user_dir`]).
fn python_dir(shim: &Path) -> Result<PathBuf, RunError> {
    user_dir(
        shim,
        "cuguard-python",
        "the Python bootstrap",
        write_bootstrap,
        |dir, source| RunError::PythonDir { dir, source },
    )
}

/// Makes `dir` hold the bootstrap as `sitecustomize.py` with mode `mode`, unless it already
/// holds exactly this text in a file of this user or root ([`cuguard_files::replace`]: a
/// temporary file with a random name, renamed into place; a link or another user's file there
/// is refused).
fn write_bootstrap(dir: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let file = dir.join("sitecustomize.py");
    let trusted = std::fs::symlink_metadata(&file)
        .is_ok_and(|m| m.file_type().is_file() && (m.uid() == 0 || m.uid() == euid()));
    if trusted && std::fs::read(&file).ok().as_deref() == Some(PYTHON_BOOTSTRAP.as_bytes()) {
        return Ok(());
    }
    cuguard_files::replace(&file, mode, |f| {
        io::Write::write_all(f, PYTHON_BOOTSTRAP.as_bytes())
    })
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The directory `cuguard run` fills with `fill` (the simulated driver's links, the Python
/// bootstrap) for the program it runs, which goes with the library `lib`: the first of
///
/// 1. `<dir of lib>/NAME`, where it can be made or is already there, and is a directory of this
///    user or root that no one else can write to (an install's own, shared by its users; filled
///    with files others can read);
/// 2. `$XDG_RUNTIME_DIR/NAME`, where `$XDG_RUNTIME_DIR` is a directory of this user's closed to
///    others, as the login manager makes it;
/// 3. `$TMPDIR/NAME-UID` (`/tmp` without `$TMPDIR`), made 0700 or used if it is this user's and
///    closed to others; if another user made it first (or it is a link, a file, open to
///    others), a fresh private `NAME-UID.XXXXXXXX` beside it, the one an earlier run made if
///    there is one ([`cuguard_files::private_dir`]), said in one line on stderr.
///
/// Files in 2 and 3 are 0600. On failure, `failed` says the directory tried last and why.
fn user_dir(
    lib: &Path,
    name: &str,
    what: &str,
    fill: impl Fn(&Path, u32) -> io::Result<()>,
    failed: impl Fn(PathBuf, io::Error) -> RunError,
) -> Result<PathBuf, RunError> {
    let beside = lib.parent().unwrap_or(Path::new("/")).join(name);
    if install_dir(&beside)
        .and_then(|()| fill(&beside, 0o644))
        .is_ok()
    {
        return Ok(beside);
    }
    let asked = match runtime_dir() {
        Some(xdg) => xdg.join(name),
        None => std::env::temp_dir().join(format!("{name}-{}", euid())),
    };
    let private = cuguard_files::private_dir(&asked).map_err(|e| failed(asked.clone(), e))?;
    let dir = private.path().to_path_buf();
    fill(&dir, 0o600).map_err(|e| failed(dir.clone(), e))?;
    if let cuguard_files::Private::Fresh { path, why } = &private {
        eprintln!(
            "cuguard: {what}: {}; using {}",
            one_line(why),
            one_line(&path.display().to_string())
        );
    }
    absolute(dir)
}

/// Whether `dir` (made 0755 if it is not there) is a real directory of this user or root that
/// no one else can write to.
fn install_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = std::fs::symlink_metadata(dir)?;
    if !m.is_dir() || !(m.uid() == 0 || m.uid() == euid()) || m.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not a directory of this user or root closed to others",
        ));
    }
    Ok(())
}

/// `$XDG_RUNTIME_DIR`, where it is an absolute path to a directory of this user's that no one
/// else can write to.
fn runtime_dir() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    let m = std::fs::symlink_metadata(&dir).ok()?;
    (dir.is_absolute() && m.is_dir() && m.uid() == euid() && m.mode() & 0o022 == 0).then_some(dir)
}

/// `first` then the entries of `existing` (a `PYTHONPATH`, `:`-separated) other than `first`.
fn prepend_python_path(first: &Path, existing: Option<OsString>) -> OsString {
    let mut out = OsString::from(first);
    if let Some(existing) = existing.filter(|e| !e.is_empty()) {
        for entry in existing
            .as_bytes()
            .split(|b| *b == b':')
            .filter(|e| *e != first.as_os_str().as_bytes())
        {
            out.push(":");
            out.push(OsStr::from_bytes(entry));
        }
    }
    out
}

/// Whether a setting value turns something off (`0`, `off`, `false`, `no`).
fn is_off(v: Option<OsString>) -> bool {
    v.is_some_and(|v| {
        matches!(
            v.to_string_lossy().trim().to_ascii_lowercase().as_str(),
            "0" | "off" | "false" | "no"
        )
    })
}

/// The child's pid while it runs, for the signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(signal: libc::c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; pid is our own child's.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// Installs the handlers. Handlers (unlike SIG_IGN) are reset by exec, so the program starts
/// with default dispositions.
fn install_handlers() {
    let handlers: [(libc::c_int, extern "C" fn(libc::c_int)); 4] = [
        (libc::SIGINT, ignore_signal),
        (libc::SIGQUIT, ignore_signal),
        (libc::SIGTERM, forward_signal),
        (libc::SIGHUP, forward_signal),
    ];
    for (signal, handler) in handlers {
        // SAFETY: a zeroed sigaction is valid; the handlers only call async-signal-safe
        // functions; SA_RESTART keeps waitpid going.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The run's id: the one this run is part of (`inherited`, when it is one the shim takes), else
/// a new one, this process's pid and the time in hexadecimal (`1f2e-18c5e0b7a1f3c2d4`).
pub fn run_id(inherited: Option<&str>) -> String {
    if let Some(id) = inherited.map(str::trim).filter(|id| {
        (1..=64).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
    }) {
        return id.to_string();
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("{:x}-{nanos:x}", std::process::id())
}

/// What `cuguard run` says, on one line of stderr, when the program it starts without `--driver
/// sim` would find no CUDA driver ([`driver_found`]). The pytest plugin, which learns what `cuguard
/// run` gives a program by running it (`cuguard._launcher.shim_env_said`), knows this line by its
/// start, `cuguard: no libcuda.so.1 `, and says it in pytest's words (`--cuguard-driver sim`).
pub const NO_DRIVER: &str = "cuguard: no libcuda.so.1 on this machine (no NVIDIA driver?): the \
     program's CUDA calls will fail; --driver sim runs it on the simulated driver";

/// Where the dynamic loader looks for a library after `LD_LIBRARY_PATH` and its cache: its
/// default directories (glibc's; Debian's multiarch ones, `<dir>/<arch>-linux-gnu` of the
/// first two, are added), and where drivers live that programs reach through their own run path
/// or the cache alone (WSL's, NixOS's), in case the cache is stale or missing.
const DRIVER_DIRS: [&str; 6] = [
    "/lib",
    "/usr/lib",
    "/lib64",
    "/usr/lib64",
    "/usr/lib/wsl/lib",
    "/run/opengl-driver/lib",
];

/// Whether a program started with `LD_LIBRARY_PATH` set to `library_path` would find a
/// `libcuda.so.1`: in a directory of `library_path` (entries separated by `:` or `;`, as the
/// loader splits them; an empty one is the current directory), among the paths the loader's
/// cache (`/etc/ld.so.cache`) names, or in [`DRIVER_DIRS`].
///
/// It looks for the file where the loader would, rather than loading it. `dlopen` of the driver
/// here would run the real driver's initializers in this process (and, in a `cuguard run`
/// started under the shim, the shim's hooks), and map a library of tens of megabytes only to
/// learn whether a file exists; `RTLD_NOLOAD` only says whether it is loaded already. Looking
/// costs a few `stat`s and one read of the cache (tens of kilobytes), which needs no parsing: its
/// string table holds each library's full path as a NUL-terminated string. It errs toward
/// silence, since its answer only decides a warning: an entry with a dynamic string token
/// (`$ORIGIN`, `$LIB`) counts as holding a driver, and so does a 32-bit driver. What it cannot
/// see is a directory named only in the program's own run path (`DT_RUNPATH`).
fn driver_found(library_path: Option<&OsStr>) -> bool {
    let cache = std::fs::read("/etc/ld.so.cache").unwrap_or_default();
    let multiarch = DRIVER_DIRS[..2]
        .iter()
        .map(|dir| PathBuf::from(format!("{dir}/{}-linux-gnu", std::env::consts::ARCH)));
    let dirs: Vec<PathBuf> = DRIVER_DIRS
        .iter()
        .map(PathBuf::from)
        .chain(multiarch)
        .collect();
    driver_in(library_path, &cache, &dirs)
}

/// [`driver_found`]'s answer, given the loader's cache (the bytes of `/etc/ld.so.cache`) and its
/// default directories.
fn driver_in(library_path: Option<&OsStr>, cache: &[u8], dirs: &[PathBuf]) -> bool {
    const NAME: &str = "libcuda.so.1";
    let listed = library_path
        .map(OsStr::as_bytes)
        .filter(|p| !p.is_empty())
        .map(|p| p.split(|b| matches!(b, b':' | b';')));
    for entry in listed.into_iter().flatten() {
        if entry.contains(&b'$') {
            return true;
        }
        let dir = if entry.is_empty() {
            Path::new(".")
        } else {
            Path::new(OsStr::from_bytes(entry))
        };
        if dir.join(NAME).exists() {
            return true;
        }
    }
    let suffix = format!("/{NAME}");
    let cached = cache
        .split(|b| *b == 0)
        .filter(|s| s.ends_with(suffix.as_bytes()))
        .filter_map(|s| s.iter().position(|b| *b == b'/').map(|at| &s[at..]))
        .any(|path| Path::new(OsStr::from_bytes(path)).exists());
    cached || dirs.iter().any(|dir| dir.join(NAME).exists())
}

/// The shim: `$CUGUARD_SHIM`, else beside the executable.
pub(super) fn find_shim() -> Result<PathBuf, RunError> {
    find_library("the shim libcuguard.so", "CUGUARD_SHIM", "libcuguard.so")
}

/// cuguard's Python package beside a command built in a checkout (`target/<profile>/cuguard`
/// and `src/python/cuguard`): the bootstrap loads it from there in a Python that cannot import
/// it (the system's, another interpreter), as the wheel's launcher says where its own is.
/// Without it, such a Python's end is marked but not classified. `None` elsewhere.
fn checkout_package() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let root = exe.parent()?.parent()?.parent()?;
    let package = root.join("src/python/cuguard");
    package.join("__init__.py").is_file().then_some(package)
}

/// The NVTX tool the program is to load: the shim itself, so that the program's NVTX ranges are
/// the history's phases, unless the history is off (`CUGUARD_HISTORY=0`) or the environment
/// names a tool already (a profiler's, the sanitizer's: that one stays, and the shim tells it
/// of the pool's blocks instead). `None`: leave the variable as it is.
fn nvtx_tool(shim: &Path) -> Option<&Path> {
    let named = std::env::var_os("NVTX_INJECTION64_PATH").is_some_and(|v| !v.is_empty());
    let history_off = std::env::var_os("CUGUARD_HISTORY").is_some_and(|v| v == "0");
    (!named && !history_off).then_some(shim)
}

/// Runs `cuguard run` without `--sanitizer` (with it, [`super::sanitizer::run`]).
pub fn run(args: RunArgs) -> Result<u8, CliError> {
    let shim = find_shim()?;
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(RunError::ProgramNotFound(OsString::new()).into());
    };
    let mut cmd = Command::new(program);
    cmd.args(program_args);
    cmd.env("LD_PRELOAD", prepend(&shim, std::env::var_os("LD_PRELOAD")));
    if let Some(tool) = nvtx_tool(&shim) {
        cmd.env("NVTX_INJECTION64_PATH", tool);
    }
    if args.driver == Driver::Sim {
        let sim = find_library(
            "the simulated driver libcuguard_simcuda.so",
            "CUGUARD_SIM_DRIVER",
            "libcuguard_simcuda.so",
        )?;
        let dir = sim_dir(&sim)?;
        cmd.env(
            "LD_LIBRARY_PATH",
            prepend(&dir, std::env::var_os("LD_LIBRARY_PATH")),
        );
    } else if !driver_found(std::env::var_os("LD_LIBRARY_PATH").as_deref()) {
        eprintln!("{NO_DRIVER}");
    }
    if !is_off(std::env::var_os("CUGUARD_PYTHON_END")) {
        let dir = python_dir(&shim)?;
        cmd.env(
            "PYTHONPATH",
            prepend_python_path(&dir, std::env::var_os("PYTHONPATH")),
        );
        cmd.env("CUGUARD_PYTHON_BOOTSTRAP", &dir);
        if std::env::var_os("CUGUARD_PYTHON_PACKAGE").is_none()
            && let Some(package) = checkout_package()
        {
            cmd.env("CUGUARD_PYTHON_PACKAGE", package);
        }
    }
    if let Some(template) = &args.report {
        make_report_dir(template);
        cmd.env("CUGUARD_REPORT", template);
    }
    cmd.env(
        "CUGUARD_RUN_ID",
        run_id(std::env::var("CUGUARD_RUN_ID").ok().as_deref()),
    );
    if args.quiet {
        cmd.env("CUGUARD_QUIET", "1");
    }
    let not_started = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => RunError::ProgramNotFound(program.clone()),
        _ => RunError::ProgramNotExecutable(program.clone(), e),
    };
    if args.exec {
        return Err(not_started(std::os::unix::process::CommandExt::exec(&mut cmd)).into());
    }
    wait_for(cmd, not_started)
}

/// Starts `cmd` and waits for it, with cuguard's signal handling; its exit status as cuguard's.
pub(super) fn wait_for(
    mut cmd: Command,
    not_started: impl FnOnce(io::Error) -> RunError,
) -> Result<u8, CliError> {
    install_handlers();
    let mut child = cmd.spawn().map_err(not_started)?;
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let status = child.wait().map_err(RunError::Wait)?;
    CHILD.store(0, Ordering::SeqCst);
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => exit::USAGE,
    })
}

/// Makes the directory `--report TEMPLATE` names when it is missing (`reports/` in
/// `reports/cuguard.%p.json`, or the template itself when it ends in `/`), as the user asked
/// for it: the shim would write elsewhere. Made 0700, the user's alone, as the reports in it
/// are. A directory part with a placeholder (`%h/`) is left to the shim; a failure is said by
/// the shim when it writes.
fn make_report_dir(template: &OsString) {
    let text = template.to_string_lossy();
    let dir = if text.ends_with('/') {
        std::path::Path::new(template)
    } else {
        match std::path::Path::new(template).parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => return,
        }
    };
    if dir.to_string_lossy().contains('%') || dir.exists() {
        return;
    }
    use std::os::unix::fs::DirBuilderExt as _;
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepend_puts_first_and_drops_duplicates() {
        let got = prepend(
            Path::new("/a/libcuguard.so"),
            Some("/x.so /a/libcuguard.so:/y.so".into()),
        );
        assert_eq!(got, "/a/libcuguard.so:/x.so:/y.so");
        assert_eq!(prepend(Path::new("/a"), None), "/a");
        assert_eq!(prepend(Path::new("/a"), Some("".into())), "/a");
    }

    #[test]
    fn a_run_keeps_the_id_of_the_run_it_is_part_of() {
        assert_eq!(run_id(Some("4d2-1")), "4d2-1");
        for fresh in [None, Some(""), Some("not an id")] {
            let id = run_id(fresh);
            let (pid, time) = id.split_once('-').unwrap();
            assert_eq!(u32::from_str_radix(pid, 16).unwrap(), std::process::id());
            assert!(u64::from_str_radix(time, 16).unwrap() > 0);
        }
        assert_ne!(run_id(None), run_id(None), "two runs, two ids");
    }

    #[test]
    fn a_driver_is_looked_for_where_the_loader_would_find_it() {
        let dir = std::env::temp_dir().join(format!("cuguard-driver-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (with, without) = (dir.join("with"), dir.join("without"));
        std::fs::create_dir_all(&with).unwrap();
        std::fs::create_dir_all(&without).unwrap();
        std::fs::write(with.join("libcuda.so.1"), b"").unwrap();
        let path = |p: &Path| Some(p.as_os_str().to_owned());
        let joined = |a: &Path, sep: &str, b: &Path| {
            Some(OsString::from(format!(
                "{}{sep}{}",
                a.display(),
                b.display()
            )))
        };
        let none: [PathBuf; 0] = [];
        // LD_LIBRARY_PATH: any entry, `:` or `;` between them; nothing else to look at.
        assert!(!driver_in(None, b"", &none));
        assert!(!driver_in(Some(OsStr::new("")), b"", &none));
        assert!(!driver_in(path(&without).as_deref(), b"", &none));
        assert!(driver_in(path(&with).as_deref(), b"", &none));
        assert!(driver_in(
            joined(&without, ":", &with).as_deref(),
            b"",
            &none
        ));
        assert!(driver_in(
            joined(&without, ";", &with).as_deref(),
            b"",
            &none
        ));
        // An entry the loader expands is not judged: silence.
        assert!(driver_in(Some(OsStr::new("$ORIGIN/../lib")), b"", &none));
        // The cache: a NUL-terminated path among its strings, if the file is there.
        let named = |p: &Path| {
            let mut cache = b"glibc-ld.so.cache1.1\x05\0\0\0libcuda.so.1\0".to_vec();
            cache.extend_from_slice(p.join("libcuda.so.1").as_os_str().as_bytes());
            cache.extend_from_slice(b"\0libc.so.6\0/lib/libc.so.6\0");
            cache
        };
        assert!(driver_in(None, &named(&with), &none));
        assert!(!driver_in(None, &named(&without), &none), "a stale entry");
        // The default directories.
        assert!(!driver_in(None, b"", std::slice::from_ref(&without)));
        assert!(driver_in(None, b"", &[without.clone(), with.clone()]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn populate_makes_links_and_reuses_them() {
        let dir = std::env::temp_dir().join(format!("cuguard-run-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libcuguard_simcuda.so");
        std::fs::write(&lib, b"not really a library").unwrap();
        let links = dir.join("cuguard-sim");
        std::fs::create_dir(&links).unwrap();
        populate(&links, &lib).unwrap();
        populate(&links, &lib).unwrap();
        let want = std::fs::canonicalize(&lib).unwrap();
        for name in ["libcuda.so.1", "libcuda.so"] {
            assert_eq!(std::fs::canonicalize(links.join(name)).unwrap(), want);
        }
        let leftovers = std::fs::read_dir(&links).unwrap().count();
        assert_eq!(leftovers, 2, "no temporary links left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
