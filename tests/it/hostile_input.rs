//! Hostile input (`docs/reliability.md`, "Hostile input"): nothing the command opens because a
//! file or another process named it may block it or feed it without end. A FIFO or a device
//! where a report is read is refused in one line; a history naming a FIFO or a device as one of
//! its modules is read as if that module were missing, its frames left unnamed. And on a shared
//! machine, `cuguard jupyter install-kernel --prefix` goes through no other user's directory
//! and no link below the prefix (these need root, to act as the victim and the attacker).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::cli_history::spike_run;
use super::support::*;

/// What a command that would hang is given before it is killed and the test fails: far more
/// than the commands need (under a second each for a refusal; a few seconds to name a history's
/// stacks in a debug build on a loaded machine), far less than forever.
const HISTORY_LIMIT: Duration = Duration::from_secs(30);
const REFUSAL_LIMIT: Duration = Duration::from_secs(5);

/// Runs `cuguard ARGS` in `dir`; its output, or a failed test naming the command if it has not
/// ended within `limit` (it is killed then).
fn within(limit: Duration, dir: &Path, args: &[&str]) -> (Output, Duration) {
    let child = Command::new(&artifacts().cuguard)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("CUGUARD_MAX_REPORT_BYTES")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (out.unwrap(), started.elapsed()),
        Err(_) => {
            // SAFETY: kill has no memory preconditions; pid is our child's, not yet reaped
            // (its waiting thread is still blocked in wait).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!(
                "`cuguard {}` did not end within {limit:?}: it hangs",
                args.join(" ")
            );
        }
    }
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a NUL-terminated path.
    let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
}

/// `history` with every module chunk that names `program` naming `module` instead; how many
/// were changed.
fn with_module(history: &[u8], program: &Path, module: &str) -> (Vec<u8>, usize) {
    let reader = cuguard_history::Reader::new(history).unwrap();
    let mut out = reader.header().encode().to_vec();
    let mut changed = 0;
    for chunk in reader {
        let chunk = match chunk.unwrap() {
            cuguard_history::Chunk::Module {
                start,
                end,
                bias,
                path,
                build_id,
            } if Path::new(&path) == program => {
                changed += 1;
                cuguard_history::Chunk::Module {
                    start,
                    end,
                    bias,
                    path: module.to_owned(),
                    build_id,
                }
            }
            other => other,
        };
        cuguard_history::write_chunk(&mut out, &chunk);
    }
    (out, changed)
}

/// `text` with each size a command says it wrote (`(680 B,`) written `(SIZE,`: a compressed
/// file's size depends on every byte of it, the module's name included.
fn sizes_hidden(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('(') {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let after = &rest[digits..];
        let unit = ["B,", "KiB,", "MiB,"]
            .iter()
            .find(|u| after.strip_prefix(' ').is_some_and(|a| a.starts_with(**u)));
        if let (true, Some(unit)) = (digits > 0, unit) {
            out.push_str("SIZE,");
            rest = &after[1 + unit.len()..];
        }
    }
    out.push_str(rest);
    out
}

/// What `summary --at end`, `summary --at peak`, `view` and `export --format pprof` say of
/// `dir/h.history`: each one's exit status and output, with `from` written as `to`.
fn answers(dir: &Path, from: &str, to: &str) -> Vec<(Option<i32>, String, String)> {
    let commands: [&[&str]; 4] = [
        &["summary", "h.history", "--at", "end"],
        &["summary", "h.history", "--at", "peak"],
        &["view", "h.history", "-o", "page.html"],
        &["export", "--format", "pprof", "h.history", "-o", "h.pb.gz"],
    ];
    commands
        .iter()
        .map(|args| {
            // The file `view` and `export` write (`-o FILE`, last).
            let written = (args[0] != "summary").then(|| dir.join(args[args.len() - 1]));
            if let Some(w) = &written {
                let _ = std::fs::remove_file(w);
            }
            let (out, _) = within(HISTORY_LIMIT, dir, args);
            let (stdout, stderr) = text(&out);
            if let Some(w) = &written {
                let size = std::fs::metadata(w).map(|m| m.len()).unwrap_or(0);
                assert!(size > 0, "{args:?}: {stderr}");
            }
            (
                out.status.code(),
                stdout.replace(from, to),
                sizes_hidden(&stderr.replace(from, to)),
            )
        })
        .collect()
}

#[test]
fn a_history_naming_a_fifo_or_a_device_as_a_module_reads_as_if_the_module_were_missing() {
    let dir = scratch_dir("hostile-module");
    spike_run(&dir);
    let history = std::fs::read(dir.join("r.history")).unwrap();
    let program = c_program("history_spike");
    // Each hostile module path, beside a missing one of the same length and file name (the
    // outputs name the module and say how many bytes they wrote).
    let fifo = dir.join("module");
    let fifo = fifo.to_str().unwrap();
    for (missing, hostile) in [(fifo, fifo), ("/nx_/zero", "/dev/zero")] {
        let write = |module: &str| {
            let (bytes, changed) = with_module(&history, &program, module);
            assert!(changed > 0, "no module chunk names {}", program.display());
            std::fs::write(dir.join("h.history"), bytes).unwrap();
        };
        write(missing);
        let want = answers(&dir, "", "");
        for (code, stdout, stderr) in &want {
            assert_eq!(*code, Some(0), "{stdout}{stderr}");
        }
        // The spike is there, at the frames the module's offsets name (none of its names).
        let peak = &want[1].1;
        assert!(
            peak.contains("512.0 MiB") && !peak.contains("spike_site"),
            "{peak}"
        );
        write(hostile);
        if hostile == fifo {
            mkfifo(Path::new(fifo));
        }
        let got = answers(&dir, hostile, missing);
        assert_eq!(got, want, "a module at {hostile}");
        if hostile == fifo {
            std::fs::remove_file(fifo).unwrap();
        }
    }
}

#[test]
fn a_fifo_or_a_device_given_as_a_report_is_refused_in_one_line() {
    let dir = scratch_dir("hostile-report");
    let fifo: PathBuf = dir.join("r.json");
    mkfifo(&fifo);
    for (path, what) in [
        (fifo.to_str().unwrap(), "a FIFO"),
        ("/dev/zero", "a character device"),
    ] {
        for command in [
            vec!["summary", path],
            vec!["check", path],
            vec!["view", path, "-o", "page.html"],
        ] {
            let (out, took) = within(REFUSAL_LIMIT, &dir, &command);
            let (stdout, stderr) = text(&out);
            assert_eq!(out.status.code(), Some(2), "{command:?}: {stdout}{stderr}");
            assert_eq!(
                stderr,
                format!("cuguard: error: {path}: not a regular file ({what})\n"),
                "{command:?}"
            );
            assert!(stdout.is_empty(), "{command:?}: {stdout}");
            assert!(took < Duration::from_secs(2), "{command:?} took {took:?}");
        }
    }
    assert!(!dir.join("page.html").exists());
}

/// `python -m cuguard jupyter install-kernel --prefix PREFIX --name NAME`, run as the victim
/// with the system's Python and the checkout's package.
fn install_kernel_as_victim(home: &Path, prefix: &Path, name: &str) -> Output {
    let python = ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .expect("a system python3 the victim can run");
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "cuguard", "jupyter", "install-kernel", "--prefix"])
        .arg(prefix)
        .args(["--name", name, "--python"])
        .arg(&python)
        .env("PYTHONPATH", artifacts().root.join("src/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run(&mut as_user(&cmd, VICTIM, home), false)
}

/// Directories `parts` deep below `base`, each owned by `uid` with mode `mode`; the last.
fn dirs_of(base: &Path, parts: &[&str], uid: u32, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let mut p = base.to_path_buf();
    for part in parts {
        p = p.join(part);
        std::fs::create_dir(&p).unwrap();
        chown(&p, uid);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    p
}

#[test]
fn install_kernel_goes_through_no_other_users_directory_and_no_link_below_its_prefix() {
    let test = "install_kernel_goes_through_no_other_users_directory_and_no_link_below_its_prefix";
    if !can_switch_users(test) {
        return;
    }
    let d = shared_dir("hostile-kernel");
    let home = d.join("home");
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();

    // The attacker made `share/jupyter/kernels` in the shared directory, the last one open to
    // all (sticky, as /tmp): the victim's kernel directory would be the victim's, in a
    // directory the attacker owns, who may rename it and put their own in its place.
    let open = d.join("open");
    std::fs::create_dir(&open).unwrap();
    let kernels = dirs_of(&open, &["share", "jupyter"], ATTACKER, 0o755);
    let kernels = dirs_of(&kernels, &["kernels"], ATTACKER, 0o1777);
    let out = install_kernel_as_victim(&home, &open, "mine");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "cuguard jupyter install-kernel: {}: belongs to another user (uid 1001), who could \
             change the kernel's command; give another --prefix or --name\n",
            open.join("share").display()
        )
    );
    assert!(
        !kernels.join("mine").exists(),
        "nothing made in the attacker's directory"
    );

    // A team's prefix of the victim's, open to all (sticky): the attacker planted a link at
    // `share`, to a directory of the victim's that the kernel would be written into.
    let team = dirs_of(&d, &["team"], VICTIM, 0o1777);
    let target = dirs_of(&home, &["elsewhere"], VICTIM, 0o755);
    plant_link(&team.join("share"), &target);
    let out = install_kernel_as_victim(&home, &team, "mine");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "cuguard jupyter install-kernel: {}: is a symbolic link; cuguard never writes \
             through a link\n",
            team.join("share").display()
        )
    );
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing made through the link"
    );

    // The same team prefix without the link: installed.
    std::fs::remove_file(team.join("share")).unwrap();
    let out = install_kernel_as_victim(&home, &team, "mine");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        mode_of(&team.join("share/jupyter/kernels/mine/kernel.json")),
        0o600
    );
}
