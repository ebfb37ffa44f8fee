//! On a shared machine (issue 35): `cuguard snapshot` reads only a report the shim wrote for
//! that request, and `cuguard run` cannot be stopped by another user's directories.
//!
//! - A FIFO, `/dev/zero` (or a link to it) at the report path is never read: the snapshot
//!   returns within `--wait` plus a second with one line, or finds the report where the shim
//!   put it instead (`NAME.1.json`, named as the shim names it, or `$TMPDIR`), in bounded memory
//!   (the command's peak memory is measured; it runs with 1 GiB of address space, so that a
//!   command that reads the device does not take the machine's memory).
//! - Run as root against another user's process whose report path is a device, it never opens
//!   the device.
//! - `cuguard run` by the victim, with the shim in a directory the victim cannot write and the
//!   attacker's `cuguard-python-UID` and `cuguard-sim-UID` already in the shared temporary
//!   directory, runs the program: it uses fresh private directories instead, says so in one line
//!   each, and uses them again on the next run.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    self, ATTACKER, VICTIM, artifacts, as_user, c_program, can_switch_users, chown, mode_of,
    scratch_dir, shared_dir, shim_command,
};

/// What a snapshot may use: 1 GiB of address space, far more than reading a report needs and far
/// less than reading `/dev/zero` to its end.
const ADDRESS_SPACE: u64 = 1 << 30;

/// Starts exit_paths `mode` from `cmd` and waits for its "ready" line.
fn start(mut cmd: Command, mode: &str) -> Child {
    cmd.arg(mode).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("ready "), "{line:?}");
    wait_for_thread(child.id());
    child
}

/// Waits until `pid`'s cuguard thread announces its snapshot signal (`cuguard-s<N>`).
fn wait_for_thread(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let named = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|tasks| {
                tasks.flatten().any(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.starts_with("cuguard-s"))
                })
            })
            .unwrap_or(false);
        if named {
            return;
        }
        assert!(Instant::now() < deadline, "no cuguard thread in {pid}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

fn stop(mut child: Child) {
    signal(&child, libc::SIGKILL);
    child.wait().unwrap();
}

/// What a snapshot command did.
struct Snapshot {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
    /// Its peak resident memory, in bytes (sampled every 10 ms while it ran).
    peak: u64,
}

/// Runs `cuguard snapshot --wait WAIT PID` with [`ADDRESS_SPACE`]. Fails the test if it runs
/// past `WAIT` plus `slack` (killed then, so that a snapshot that hangs fails instead of hanging
/// the tests).
fn snapshot(pid: u32, wait: f64, slack: Duration) -> Snapshot {
    use std::io::Read;
    let mut cmd = Command::new(&artifacts().cuguard);
    cmd.args(["snapshot", "--wait", &wait.to_string(), &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only setrlimit, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let began = Instant::now();
    // Reaped by wait4 below.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().unwrap();
    let limit = Duration::from_secs_f64(wait) + slack;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // Its peak memory, sampled from /proc while it runs: VmHWM is its own image's high-water
    // mark, where wait4's ru_maxrss would also count this test process's memory at the fork
    // (the kernel keeps the old image's high-water mark across exec), which in a full run of
    // the tests is larger than the bound.
    let mut peak = 0u64;
    loop {
        if let Ok(st) = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            && let Some(kib) = st
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib * 1024);
        }
        // SAFETY: the pid is our child's, not yet waited for; status and usage are writable.
        let r = unsafe { libc::wait4(child.id() as i32, &mut status, libc::WNOHANG, &mut usage) };
        if r == child.id() as i32 {
            break;
        }
        assert_eq!(r, 0, "wait4: {}", std::io::Error::last_os_error());
        if began.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cuguard snapshot {pid} --wait {wait} still ran after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = began.elapsed();
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Snapshot {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stdout,
        stderr,
        took,
        peak,
    }
}

/// The most memory a snapshot may take: reading a report is a stream.
const PEAK: u64 = 64 << 20;

/// Puts `what` at `path`: a file of another program, a FIFO, or a link to `/dev/zero`.
fn take(path: &Path, what: &str) {
    match what {
        "file" => std::fs::write(path, b"not a report").unwrap(),
        "fifo" => {
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: c is NUL-terminated.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        }
        "zero" => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        _ => unreachable!(),
    }
}

#[test]
fn a_taken_report_path_sends_the_snapshot_to_the_shims_next_name() {
    for what in ["file", "fifo", "zero"] {
        let dir = scratch_dir(&format!("shared-snap-taken-{what}"));
        let report = dir.join("r.json");
        take(&report, what);
        let child = start(shim_command(&c_program("exit_paths"), &report), "wait");
        let out = snapshot(child.id(), 10.0, Duration::from_secs(1));
        assert_eq!(out.code, Some(0), "{what}: {}", out.stderr);
        assert!(out.peak < PEAK, "{what}: {} bytes", out.peak);
        assert_eq!(
            out.stdout.trim_end(),
            dir.join("r.1.json").to_str().unwrap(),
            "{what}: the snapshot is where the shim put it"
        );
        let r = support::read_report(&dir.join("r.1.json"));
        assert_eq!(r["reason"], "request", "{what}");
        assert_eq!(r["process"]["pid"], child.id(), "{what}");
        if what == "file" {
            assert_eq!(std::fs::read(&report).unwrap(), b"not a report");
        }
        stop(child);
    }
}

#[test]
fn a_fifo_or_a_device_at_the_report_path_is_never_read_and_the_wait_is_kept() {
    for what in ["fifo", "zero"] {
        let dir = scratch_dir(&format!("shared-snap-never-{what}"));
        let report = dir.join("r.json");
        take(&report, what);
        let child = start(shim_command(&c_program("exit_paths"), &report), "wait");
        // Stopped, it writes nothing: all the command finds is what was put at the path.
        signal(&child, libc::SIGSTOP);
        let out = snapshot(child.id(), 1.0, Duration::from_secs(1));
        let stderr = &out.stderr;
        assert_eq!(out.code, Some(2), "{what}: {stderr}");
        assert!(
            out.took < Duration::from_secs(2),
            "{what}: returned after {:?}",
            out.took
        );
        assert!(out.peak < PEAK, "{what}: {} bytes", out.peak);
        assert!(out.stdout.is_empty(), "{what}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: one line: {stderr}");
        assert!(
            lines[0].contains(&format!("process {} wrote no report in time", child.id())),
            "{what}: {stderr}"
        );
        let why = if what == "fifo" {
            "(not a regular file: a FIFO)"
        } else {
            "(a symbolic link: not followed)"
        };
        assert!(
            lines[0].contains(&format!("{} {why}", report.display())),
            "{what}: {stderr}"
        );
        stop(child);
    }
}

#[test]
fn as_root_a_device_another_user_names_is_never_opened() {
    if !can_switch_users("as_root_a_device_another_user_names_is_never_opened") {
        return;
    }
    // The attacker runs a program under the shim with /dev/zero as its report path, and asks
    // root (an administrator, a monitoring job) for a snapshot of it.
    let shared = shared_dir("shared-snap-root");
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={ATTACKER}"))
        .arg(format!("--regid={ATTACKER}"))
        .args(["--clear-groups", "--"])
        .arg(c_program("exit_paths"))
        .env("LD_LIBRARY_PATH", &artifacts().sim_dir)
        .env("LD_PRELOAD", &artifacts().shim)
        .env("CUGUARD_REPORT", "/dev/zero")
        .env("CUGUARD_PAGE", "0")
        .env("TMPDIR", &shared)
        .env_remove("CUGUARD_RUNTIME_DIR");
    let child = start(cmd, "wait");
    let out = snapshot(child.id(), 10.0, Duration::from_secs(1));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.peak < PEAK, "{} bytes", out.peak);
    // The shim could not write in /dev and put the report in its $TMPDIR: that is the file read.
    let fallback = shared.join("zero");
    assert_eq!(out.stdout.trim_end(), fallback.to_str().unwrap());
    assert_eq!(std::fs::metadata(&fallback).unwrap().uid(), ATTACKER);
    stop(child);
}

/// The directories in `dir` whose name starts with `prefix`.
fn named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

#[test]
fn another_users_directories_do_not_stop_cuguard_run() {
    if !can_switch_users("another_users_directories_do_not_stop_cuguard_run") {
        return;
    }
    let shared = shared_dir("shared-run-dirs");
    let home = shared.join("home");
    // The shim and the simulated driver where the victim cannot write (as a wheel in a
    // root-owned site-packages): nothing can be made beside them.
    let lib = shared.join("lib");
    std::fs::create_dir(&lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["libcuguard.so", "libcuguard_simcuda.so"] {
        std::fs::copy(artifacts().bin_dir.join(name), lib.join(name)).unwrap();
    }
    // The attacker was first in the shared temporary directory.
    let python = shared.join(format!("cuguard-python-{VICTIM}"));
    let sim = shared.join(format!("cuguard-sim-{VICTIM}"));
    let pwned = shared.join("pwned");
    for d in [&python, &sim] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(
        python.join("sitecustomize.py"),
        format!("open({:?}, 'w').write('ran')\n", pwned.to_str().unwrap()),
    )
    .unwrap();
    for p in [&python, &sim, &python.join("sitecustomize.py")] {
        chown(p, ATTACKER);
    }
    let program = c_program("exit_paths");
    let run = || {
        let mut cmd = Command::new(&artifacts().cuguard);
        cmd.args(["run", "--driver", "sim", "--", "sh", "-c"])
            .arg(r#"echo "$PYTHONPATH"; echo "$LD_LIBRARY_PATH"; exec "$0" return"#)
            .arg(&program)
            .env("CUGUARD_SHIM", lib.join("libcuguard.so"))
            .env("CUGUARD_SIM_DRIVER", lib.join("libcuguard_simcuda.so"))
            .env("CUGUARD_REPORT", home.join("r.json"))
            .env("CUGUARD_PAGE", "0")
            .env("TMPDIR", &shared)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("CUGUARD_RUNTIME_DIR")
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("PYTHONPATH")
            .env_remove("LD_PRELOAD");
        let out = as_user(&cmd, VICTIM, &home).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        (stdout, stderr)
    };
    let mut used = Vec::new();
    for round in 0..2 {
        let (stdout, stderr) = run();
        let mut paths = stdout.lines();
        let python_path = paths.next().unwrap().split(':').next().unwrap().to_string();
        let library_path = paths.next().unwrap().split(':').next().unwrap().to_string();
        for (dir, asked, first) in [
            (&python_path, &python, "cuguard-python"),
            (&library_path, &sim, "cuguard-sim"),
        ] {
            let fresh = Path::new(dir);
            assert_eq!(fresh.parent(), Some(shared.as_path()), "{round}: {dir}");
            assert!(
                fresh
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{first}-{VICTIM}.")),
                "{round}: {dir}"
            );
            let m = std::fs::symlink_metadata(fresh).unwrap();
            assert!(m.is_dir());
            assert_eq!(m.uid(), VICTIM, "{round}: {dir}");
            assert_eq!(mode_of(fresh), 0o700, "{round}: {dir}");
            let lines: Vec<&str> = stderr
                .lines()
                .filter(|l| l.contains(asked.to_str().unwrap()))
                .collect();
            assert_eq!(lines.len(), 1, "{round}: one line for {first}: {stderr}");
            assert!(
                lines[0].starts_with("cuguard: ")
                    && lines[0].contains(&format!("belongs to another user (uid {ATTACKER})"))
                    && lines[0].ends_with(&format!("using {dir}")),
                "{round}: {}",
                lines[0]
            );
            used.push(dir.clone());
        }
        assert!(Path::new(&python_path).join("sitecustomize.py").is_file());
        assert!(Path::new(&library_path).join("libcuda.so.1").exists());
        assert!(home.join("r.json").is_file(), "{round}: the report");
        std::fs::remove_file(home.join("r.json")).unwrap();
    }
    // The second run used the directories the first made: no new one per run.
    assert_eq!(used[0], used[2]);
    assert_eq!(used[1], used[3]);
    assert_eq!(named(&shared, "cuguard-python-").len(), 2);
    assert_eq!(named(&shared, "cuguard-sim-").len(), 2);
    // The attacker's directories: untouched, their bootstrap never run.
    assert_eq!(std::fs::read_dir(&sim).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&python).unwrap().count(), 1);
    assert!(!pwned.exists());
}

#[test]
fn cuguard_run_uses_the_users_runtime_directory_where_there_is_one() {
    if !can_switch_users("cuguard_run_uses_the_users_runtime_directory_where_there_is_one") {
        return;
    }
    let shared = shared_dir("shared-run-xdg");
    let home = shared.join("home");
    let xdg = home.join("run");
    std::fs::create_dir(&xdg).unwrap();
    chown(&xdg, VICTIM);
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    let lib = shared.join("lib");
    std::fs::create_dir(&lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["libcuguard.so", "libcuguard_simcuda.so"] {
        std::fs::copy(artifacts().bin_dir.join(name), lib.join(name)).unwrap();
    }
    // Another user's directories in the shared place do not matter: it is not used.
    for d in ["cuguard-python", "cuguard-sim"] {
        let d = shared.join(format!("{d}-{VICTIM}"));
        std::fs::create_dir(&d).unwrap();
        chown(&d, ATTACKER);
    }
    let mut cmd = Command::new(&artifacts().cuguard);
    cmd.args(["run", "--driver", "sim", "--", "sh", "-c"])
        .arg(r#"echo "$PYTHONPATH"; echo "$LD_LIBRARY_PATH""#)
        .env("CUGUARD_SHIM", lib.join("libcuguard.so"))
        .env("CUGUARD_SIM_DRIVER", lib.join("libcuguard_simcuda.so"))
        .env("CUGUARD_PAGE", "0")
        .env("TMPDIR", &shared)
        .env("XDG_RUNTIME_DIR", &xdg)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("PYTHONPATH")
        .env_remove("LD_PRELOAD");
    let out = as_user(&cmd, VICTIM, &home).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let first: Vec<&str> = stdout
        .lines()
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(
        first,
        [
            xdg.join("cuguard-python").to_str().unwrap(),
            xdg.join("cuguard-sim").to_str().unwrap()
        ]
    );
    assert!(
        !stderr.contains("cuguard-python") && !stderr.contains("cuguard-sim"),
        "nothing to say: {stderr}"
    );
}

/// Puts in `shared` what the victim of a test that binds `shared` over /tmp runs: the `cuguard`
/// command, the shim, the simulated driver (with its `cuguard-sim/libcuda.so.1` link, relative)
/// and the `exit_paths` program, in `bin/` (root's, 0755), each a hard link to the built file
/// (the scratch directory is in the checkout's target/, as the files are), else a copy. Returns
/// `bin`, relative to `shared`.
fn in_the_shared_dir(shared: &Path) -> PathBuf {
    let a = artifacts();
    let bin = Path::new("bin");
    let dir = shared.join(bin);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, built) in [
        ("cuguard", a.cuguard.clone()),
        ("libcuguard.so", a.shim.clone()),
        ("libcuguard_simcuda.so", a.sim_lib.clone()),
        ("exit_paths", c_program("exit_paths")),
    ] {
        let to = dir.join(name);
        if std::fs::hard_link(&built, &to).is_err() {
            std::fs::copy(&built, &to).unwrap();
        }
    }
    let links = dir.join("cuguard-sim");
    std::fs::create_dir(&links).unwrap();
    std::fs::set_permissions(&links, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("../libcuguard_simcuda.so", links.join("libcuda.so.1")).unwrap();
    bin.to_path_buf()
}

#[test]
fn another_users_page_directory_does_not_hide_the_victims_processes() {
    if !can_switch_users("another_users_page_directory_does_not_hide_the_victims_processes") {
        return;
    }
    // The shared directory stands for /tmp (bound over it in a mount namespace of the test's
    // own), where the attacker made the victim's page directory first.
    let shared = shared_dir("shared-page-dir");
    let home = shared.join("home");
    let theirs = shared.join(format!("cuguard-{VICTIM}"));
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(&theirs, ATTACKER);
    // In the namespace, every path is one inside the shared directory, seen under /tmp: binding
    // it over /tmp hides all that /tmp held, the checkout's target/ too where the checkout lives
    // under /tmp (and the directory the test runs in, hence `/` as the shell's). So what the
    // victim runs is put in it first.
    let bin = in_the_shared_dir(&shared);
    let inside = Path::new("/tmp");
    let home_inside = inside.join("home");
    let script = r#"
        mount --bind "$SHARED" /tmp || exit 97
        exec setpriv --reuid="$VICTIM" --regid="$VICTIM" --clear-groups -- sh -c '
            "$PROGRAM" wait > "$HOME/out" 2> "$HOME/err" &
            pid=$!
            i=0
            until "$CUGUARD" top --once > "$HOME/top" 2> "$HOME/top-err" &&
                  grep -qw "$pid" "$HOME/top"; do
                i=$((i + 1))
                [ $i -lt 200 ] || break
                sleep 0.1
            done
            ls -d /tmp/cuguard-"$VICTIM".* > "$HOME/dirs"
            kill -TERM $pid
            wait $pid
            echo "$pid" > "$HOME/pid"
        '
    "#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .current_dir("/")
        .env("SHARED", &shared)
        .env("VICTIM", VICTIM.to_string())
        .env("HOME", &home_inside)
        .env("PROGRAM", inside.join(&bin).join("exit_paths"))
        .env("CUGUARD", inside.join(&bin).join("cuguard"))
        .env("LD_PRELOAD", inside.join(&bin).join("libcuguard.so"))
        .env("LD_LIBRARY_PATH", inside.join(&bin).join("cuguard-sim"))
        .env("CUGUARD_REPORT", home_inside.join("r.json"))
        .env_remove("CUGUARD_RUNTIME_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("TMPDIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{out:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |name: &str| std::fs::read_to_string(home.join(name)).unwrap();
    let pid = read("pid").trim().to_string();
    // The shim put its page in a fresh private directory and said so in one line.
    let dirs = read("dirs");
    let fresh: Vec<&str> = dirs.lines().collect();
    assert_eq!(fresh.len(), 1, "{dirs}");
    let fresh = fresh[0];
    let err = read("err");
    let said: Vec<&str> = err.lines().filter(|l| l.contains("stats page")).collect();
    assert_eq!(
        said,
        [format!(
            "cuguard: the stats page: /tmp/cuguard-{VICTIM} belongs to another user (uid {ATTACKER}); using {fresh} (`cuguard top` and `cuguard exporter` look there too; CUGUARD_RUNTIME_DIR sets another)"
        )],
        "{err}"
    );
    let on_disk = shared.join(Path::new(fresh).file_name().unwrap());
    assert_eq!(std::fs::metadata(&on_disk).unwrap().uid(), VICTIM);
    assert_eq!(mode_of(&on_disk), 0o700);
    // `cuguard top` found it there, and said the attacker's directory once.
    let top = read("top");
    assert!(
        top.lines()
            .any(|l| l.split_whitespace().next() == Some(pid.as_str())),
        "{top}"
    );
    assert_eq!(
        read("top-err").trim_end(),
        format!(
            "cuguard: /tmp/cuguard-{VICTIM} belongs to another user (uid {ATTACKER}): not read (the shim puts this user's pages in a private /tmp/cuguard-{VICTIM}.XXXXXXXX then)"
        )
    );
    // The attacker's directory holds nothing of the victim's; the page went at the end.
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&on_disk).unwrap().count(), 0);
}

#[test]
fn a_report_directory_is_looked_in_by_the_default_name() {
    let dir = scratch_dir("shared-snap-dir");
    let mut template = dir.as_os_str().to_owned();
    template.push("/");
    let child = start(
        shim_command(&c_program("exit_paths"), Path::new(&template)),
        "wait",
    );
    let out = snapshot(child.id(), 10.0, Duration::from_secs(1));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let exe = c_program("exit_paths");
    let exe = exe.file_name().unwrap().to_str().unwrap();
    let want = dir.join(format!("cuguard.{exe}.{}.json", child.id()));
    assert_eq!(out.stdout.trim_end(), want.to_str().unwrap());
    stop(child);
}
