//! On a shared machine, the files cuguard writes for a user (the command's outputs, the shim's
//! snapshots, alerts and reports) go where that user asked and nowhere else: another local
//! user's links and files at the names they would use are never followed, a report is never
//! lost to a name that is too long, a directory, or a thousand names taken, and everything
//! written is 0600 (`docs/reliability.md`, "On a shared machine").
//!
//! The attacks run as they would on a real machine: the victim (uid 1000) runs the command or
//! program as pid 1 of a pid namespace, so the names derived from its pid are the ones an
//! attacker who watches `ps` plants links at; the attacker (uid 1001) owns the links, in a
//! world-writable sticky directory; `fs.protected_symlinks` is left as it is.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{self, ATTACKER, VICTIM};

fn fixture(name: &str) -> PathBuf {
    support::artifacts().root.join("tests/fixtures").join(name)
}

/// Runs `cmd` as the victim, pid 1 in its own pid namespace.
fn as_victim(cmd: &Command, dir: &Path) -> Output {
    support::run(
        &mut support::as_user_pid1(cmd, VICTIM, &dir.join("home")),
        false,
    )
}

fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Each command that writes a file, with where it writes (`out`) and the temporary name the
/// command used to write it through before (`.NAME.PID.tmp`, PID 1 here).
#[test]
fn the_commands_outputs_never_go_through_a_planted_link() {
    if !support::can_switch_users("the_commands_outputs_never_go_through_a_planted_link") {
        return;
    }
    let dir = support::shared_dir("shared-command-outputs");
    let a = support::artifacts();
    let report = fixture("sim-cudarc-leaks.json");
    let runtime = dir.join("home").join("run");
    std::fs::create_dir(&runtime).unwrap();
    support::chown(&runtime, VICTIM);
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let report = report.to_str().unwrap();
    let d = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let cases: [(&str, Vec<String>, &str); 5] = [
        (
            "view",
            vec!["view".into(), "-o".into(), d("out.html"), report.into()],
            "out.html",
        ),
        (
            "merge",
            vec!["merge".into(), "-o".into(), d("merged.json"), report.into()],
            "merged.json",
        ),
        (
            "suppressions",
            vec![
                "suppressions".into(),
                "-o".into(),
                d("supp.txt"),
                report.into(),
            ],
            "supp.txt",
        ),
        (
            "symbolize",
            vec![
                "symbolize".into(),
                "-o".into(),
                d("sym.json"),
                report.into(),
            ],
            "sym.json",
        ),
        (
            "exporter --textfile",
            vec![
                "exporter".into(),
                "--textfile".into(),
                d(""),
                "--once".into(),
            ],
            "cuguard.prom",
        ),
    ];
    for (what, args, out) in cases {
        let victim = support::victims_file(&dir, &format!("{out}.precious"));
        // The old temporary name, and a spread of pids around it, as an attacker plants them.
        for pid in 1..=8 {
            support::plant_link(&dir.join(format!(".{out}.{pid}.tmp")), &victim);
        }
        let mut cmd = Command::new(&a.cuguard);
        cmd.args(&args)
            .env("CUGUARD_RUNTIME_DIR", &runtime)
            .env_remove("XDG_RUNTIME_DIR");
        let got = as_victim(&cmd, &dir);
        support::assert_untouched(&victim, what);
        assert!(got.status.success(), "{what}: {}", text(&got));
        let written = dir.join(out);
        let meta = std::fs::symlink_metadata(&written).unwrap();
        assert!(
            meta.is_file(),
            "{what}: {} is not a file",
            written.display()
        );
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), VICTIM, "{what}");
        assert_eq!(support::mode_of(&written), 0o600, "{what}");
    }
}

/// A link at the output itself, or another user's file there: refused with a line that says
/// so, and exit status 2; the link's target is untouched.
#[test]
fn a_link_or_another_users_file_at_the_output_is_refused() {
    if !support::can_switch_users("a_link_or_another_users_file_at_the_output_is_refused") {
        return;
    }
    let dir = support::shared_dir("shared-command-destination");
    let a = support::artifacts();
    let victim = support::victims_file(&dir, "precious");
    support::plant_link(&dir.join("out.html"), &victim);
    let theirs = dir.join("theirs.json");
    std::fs::write(&theirs, "the attacker's").unwrap();
    support::chown(&theirs, ATTACKER);
    let report = fixture("sim-cudarc-leaks.json");
    let mut view = Command::new(&a.cuguard);
    view.args(["view", "-o"])
        .arg(dir.join("out.html"))
        .arg(&report);
    let got = as_victim(&view, &dir);
    assert_eq!(got.status.code(), Some(2), "{}", text(&got));
    assert_eq!(
        String::from_utf8_lossy(&got.stderr),
        format!(
            "cuguard: error: writing {}: is a symbolic link; cuguard never writes through a link \
             (remove it, or give the path it points to)\n",
            dir.join("out.html").display()
        )
    );
    support::assert_untouched(&victim, "view");
    // As root too: another user's file is theirs.
    let mut merge = Command::new(&a.cuguard);
    merge.args(["merge", "-o"]).arg(&theirs).arg(&report);
    let got = support::run(&mut merge, false);
    assert_eq!(got.status.code(), Some(2), "{}", text(&got));
    assert!(
        String::from_utf8_lossy(&got.stderr).contains(
            "belongs to another user (uid 1001); cuguard does not replace another user's file"
        ),
        "{}",
        text(&got)
    );
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "the attacker's");
}

/// The shim's snapshot through the in-process API (`cuguard.snapshot(path)` in Python) and its
/// alert file (`CUGUARD_ALERT=file:PATH`): a link planted at the snapshot's old temporary name
/// (`PATH.cuguard-tmp.PID`) or at the alert file itself is never written through.
#[test]
fn the_shims_snapshot_and_alert_file_never_go_through_a_planted_link() {
    if !support::can_switch_users(
        "the_shims_snapshot_and_alert_file_never_go_through_a_planted_link",
    ) {
        return;
    }
    let dir = support::shared_dir("shared-shim-writers");
    let program = support::c_program("shared_writer");
    let snap_victim = support::victims_file(&dir, "snap.precious");
    let alert_victim = support::victims_file(&dir, "alerts.precious");
    for pid in 1..=8 {
        support::plant_link(
            &dir.join(format!("snap.json.cuguard-tmp.{pid}")),
            &snap_victim,
        );
    }
    support::plant_link(&dir.join("alerts.log"), &alert_victim);
    let report = dir.join("home").join("r.json");
    let mut cmd = support::shim_command(&program, &report);
    cmd.args(["2", "400"])
        .arg(dir.join("snap.json"))
        .env("CUGUARD_WARN_AT", "1MiB")
        .env(
            "CUGUARD_ALERT",
            format!("file:{}", dir.join("alerts.log").display()),
        )
        .env("CUGUARD_RUNTIME_DIR", dir.join("home").join("run"));
    let got = as_victim(&cmd, &dir);
    support::assert_untouched(&snap_victim, "the in-process snapshot");
    support::assert_untouched(&alert_victim, "the alert file");
    assert!(got.status.success(), "{}", text(&got));
    assert_eq!(support::mode_of(&dir.join("snap.json")), 0o600);
    assert_eq!(support::mode_of(&report), 0o600);
    let stderr = String::from_utf8_lossy(&got.stderr);
    assert!(
        stderr.contains(&format!(
            "cuguard: CUGUARD_ALERT=file: cannot append to {}: is a symbolic link; cuguard never \
             writes through a link (remove it, or give the path it points to); alerts go to stderr\n",
            dir.join("alerts.log").display()
        )),
        "{stderr}"
    );
    // Without the link, the alert file is made, 0600, the victim's.
    std::fs::remove_file(dir.join("alerts.log")).unwrap();
    let got = as_victim(&cmd, &dir);
    assert!(got.status.success(), "{}", text(&got));
    let alerts = dir.join("alerts.log");
    assert_eq!(support::mode_of(&alerts), 0o600);
    let line = std::fs::read_to_string(&alerts).unwrap();
    assert!(line.contains("\"kind\":\"warn_at\""), "{line}");
}

/// Report paths that lost the report: a name of 250 bytes (its temporary name passed 255), a
/// directory (`CUGUARD_REPORT=out/` or `.`: the report went to the parent as `out.1`), and a
/// thousand names taken (no report, and a message without the path).
#[test]
fn report_paths_that_lost_reports_keep_them() {
    let dir = support::scratch_dir("shared-report-paths");
    let program = support::c_program("shared_writer");
    let run_with = |report: &str, cwd: &Path| {
        let mut cmd = support::shim_command(&program, Path::new(report));
        cmd.arg("1").current_dir(cwd);
        let out = support::run(&mut cmd, true);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // 250 bytes: written at its name; taken, beside it as NAME.1.json within 255 bytes.
    let long = format!("{}.json", "r".repeat(245));
    let stderr = run_with(dir.join(&long).to_str().unwrap(), &dir);
    assert!(
        stderr.contains(&format!("; report: {}\n", dir.join(&long).display())),
        "{stderr}"
    );
    support::read_report(&dir.join(&long));
    // Another file there (not a report of an earlier run, which would be replaced).
    std::fs::write(dir.join(&long), "taken").unwrap();
    let stderr = run_with(dir.join(&long).to_str().unwrap(), &dir);
    let second = format!("{}.1.json", "r".repeat(245));
    assert!(
        stderr.contains(&format!("; report: {}", dir.join(&second).display())),
        "{stderr}"
    );
    support::read_report(&dir.join(&second));
    // A directory, named with a slash or as `.`: the report goes into it, by its default name.
    let out = dir.join("out");
    std::fs::create_dir(&out).unwrap();
    for (template, cwd) in [
        (format!("{}/", out.display()), dir.as_path()),
        (".".into(), out.as_path()),
    ] {
        let stderr = run_with(&template, cwd);
        let names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("cuguard.c-shared_writer"))
            .collect();
        assert!(!names.is_empty(), "{template}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "; report: {}/cuguard.c-shared_writer",
                out.display()
            )),
            "{template}: {stderr}"
        );
        for n in names {
            std::fs::remove_file(out.join(n)).unwrap();
        }
    }
    assert!(!dir.join("out.1").exists());
    // A thousand names taken: a name no one could guess, said.
    let full = dir.join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("r.json"), "taken").unwrap();
    for n in 1..1000 {
        std::fs::write(full.join(format!("r.{n}.json")), "taken").unwrap();
    }
    let stderr = run_with(full.join("r.json").to_str().unwrap(), &dir);
    let line = stderr
        .lines()
        .find(|l| l.contains("; report: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    let path = PathBuf::from(line.rsplit("; report: ").next().unwrap());
    assert_eq!(path.parent(), Some(full.as_path()), "{line}");
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("r.") && name.ends_with(".json") && name.len() == "r..json".len() + 16,
        "{name}"
    );
    support::read_report(&path);
}

/// A bad `CUGUARD_REPORT_MODE` is said in one line, as the README promises, and 0600 is used.
#[test]
fn a_bad_report_mode_is_said() {
    let dir = support::scratch_dir("shared-report-mode");
    let program = support::c_program("shared_writer");
    let report = dir.join("r.json");
    let mut cmd = support::shim_command(&program, &report);
    cmd.arg("1").env("CUGUARD_REPORT_MODE", "garbage");
    let out = support::run(&mut cmd, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().next(),
        Some(
            "cuguard: CUGUARD_REPORT_MODE=\"garbage\" is not a file mode in octal (as 600 or 0640); using 0600"
        ),
        "{stderr}"
    );
    assert_eq!(support::mode_of(&report), 0o600);
}

/// An executable whose name holds an escape sequence and a right-to-left override: the shim's
/// line on stderr shows them escaped, never raw.
#[test]
fn names_from_the_program_are_escaped_on_stderr() {
    let dir = support::scratch_dir("shared-escapes");
    let program = support::c_program("shared_writer");
    let named = dir.join("ev\u{1b}[2Jil\u{202e}fdp.exe");
    // A hard link, not a copy: a copy's open file, inherited by another test's child forked
    // meanwhile, would make it busy to run (ETXTBSY).
    std::fs::hard_link(&program, &named).unwrap();
    let mut cmd = support::shim_command(&named, &dir.join("cuguard.%e.json"));
    cmd.arg("1");
    let out = support::run(&mut cmd, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{202e}'),
        "{stderr:?}"
    );
    assert!(
        stderr.contains("ev\\u{1b}[2Jil\\u{202e}fdp.exe"),
        "{stderr:?}"
    );
}
