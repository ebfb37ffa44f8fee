//! Long-running processes (issue 15), the shim's side: the stats page and the alerts.
//!
//! A program driven step by step on stdin (`harness/workloads/c/live_control.c`) is looked at
//! between steps:
//! - its page decodes (with `cuguard-page`'s own decoder) to exact figures while it runs, names
//!   its top sites, goes away when the process exits, and a forked child has its own;
//! - without a usable runtime directory the process says so in one line and goes on;
//! - `CUGUARD_WARN_AT` fires, clears and fires again with hysteresis, as JSON lines in a file, on
//!   stderr and to a syslog socket.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuguard_page::Page;
use serde_json::Value;

use crate::cli_schema::validate;
use crate::support::{c_program, read_report, scratch_dir, shim_command};

const MIB: u64 = 1 << 20;

/// The simulated driver's UUID of device 0, as `nvidia-smi` prints UUIDs.
const SIM_UUID: &str = "GPU-63756775-6172-642d-7369-6d0000000000";

/// A running `live_control`, with its stderr collected as it comes.
struct Control {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Control {
    fn start(report: &Path, env: &[(&str, &str)]) -> Control {
        let mut cmd = shim_command(&c_program("live_control"), report);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let lines = stderr.clone();
        let err = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                match line {
                    Ok(l) => lines.lock().unwrap().push(l),
                    Err(_) => break,
                }
            }
        });
        Control {
            child,
            stdin,
            stdout,
            stderr,
            reader: Some(reader),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command and returns its answer.
    fn send(&mut self, command: &str) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        assert!(
            answer.starts_with("ok"),
            "{command}: {answer:?}; stderr: {:?}",
            self.stderr_lines()
        );
        answer.trim().to_string()
    }

    fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Asks it to exit with `code`; returns its stderr.
    fn exit(mut self, code: i32) -> Vec<String> {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "x {code}").unwrap();
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert_eq!(status.code(), Some(code));
        self.reader.take().unwrap().join().unwrap();
        self.stderr_lines()
    }
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The page files in `dir`, by name.
fn page_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The page of `pid` in `dir`, decoded, if there is one (a torn read is read again).
fn page_of(dir: &Path, pid: u32) -> Option<Page> {
    let name = page_files(dir)
        .into_iter()
        .find(|n| cuguard_page::parse_file_name(n).is_some_and(|(p, _)| p == pid))?;
    for _ in 0..100 {
        let bytes = std::fs::read(dir.join(&name)).ok()?;
        match cuguard_page::decode(&bytes) {
            Ok(p) => return Some(p),
            Err(e) if e.is_transient() => continue,
            Err(e) => panic!("{name}: {e}"),
        }
    }
    panic!("{name}: torn 100 times");
}

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

#[test]
fn a_running_process_has_an_exact_page_and_a_forked_child_its_own() {
    for pool in ["0", "1"] {
        let dir = scratch_dir(&format!("live-page-{pool}"));
        let run = dir.join("run");
        let report = dir.join("r.%p.json");
        let mut p = Control::start(
            &report,
            &[
                ("CUGUARD_POOL", pool),
                ("CUGUARD_RUNTIME_DIR", run.to_str().unwrap()),
                ("RANK", "3"),
            ],
        );
        let pid = p.pid();
        p.send(&format!("w 0 {}", 3 * MIB));
        // The page is made when the cuguard thread starts, at the first allocation; wait for
        // its second publish, so that the timeline has taken its first sample too.
        let first = wait_for("the page", || page_of(&run, pid));
        wait_for("a second publish", || {
            page_of(&run, pid).filter(|q| q.updated_unix_ms > first.updated_unix_ms)
        });
        assert_eq!(first.devices[0].history[0], 3 * MIB, "{first:?}");
        p.send(&format!("c 1 {MIB}"));
        p.send(&format!("c 2 {}", 2 * MIB));
        p.send("f 2");
        let page = wait_for("the page after the steps", || {
            page_of(&run, pid).filter(|q| {
                q.devices[0].history.last() == Some(&(4 * MIB))
                    && q.snapshot_signal.is_some()
                    && q.sites.len() == 2
            })
        });

        assert_eq!(page.pid, pid);
        assert_eq!(page.uid, uid());
        assert!(page.exe.contains("c-live_control"), "{}", page.exe);
        assert!(!page.host.is_empty());
        assert_eq!(page.rank, Some(3));
        assert_eq!(page.worker, None);
        assert_eq!(
            page.report,
            dir.join(format!("r.{pid}.json")).to_str().unwrap()
        );
        assert_eq!(page.snapshot_signal, Some(libc::SIGRTMIN() + 7));
        assert_eq!((page.oom_total, page.alerts_total), (0, 0));
        assert_eq!(page.live_allocations, 2);
        assert_eq!(page.contexts_live, 1);
        assert_eq!(page.contexts.len(), 1);
        assert!(page.contexts[0].primary && page.contexts[0].device == 0);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert!(page.start_unix_ms <= page.updated_unix_ms && page.updated_unix_ms <= now_ms);
        assert!(
            now_ms - page.updated_unix_ms < 2000,
            "published at least once a second"
        );

        assert_eq!(page.devices.len(), 1);
        let d = &page.devices[0];
        assert_eq!(d.ordinal, 0);
        assert_eq!(d.name, "NVIDIA H200");
        assert_eq!(d.uuid.as_deref(), Some(SIM_UUID));
        assert_eq!(d.total_bytes, 16 << 30);
        assert_eq!((d.live_bytes, d.peak_bytes), (4 * MIB, 6 * MIB));
        if pool == "0" {
            assert_eq!(d.reserved_bytes, 0);
        } else {
            assert!(d.reserved_bytes >= 4 * MIB, "{}", d.reserved_bytes);
        }
        assert_eq!(d.history_interval_ms, 1000);
        assert!(d.history.iter().all(|&v| v <= 6 * MIB), "{:?}", d.history);
        // Growth: the last sample less the first (3 MiB when the page was made).
        assert_eq!(d.growth_bytes, MIB as i64);

        let weights = &page.sites[0];
        assert!(
            weights.label.starts_with("grow_weights (live_control.c:"),
            "{:?}",
            page.sites
        );
        assert_eq!((weights.live_bytes, weights.allocations), (3 * MIB, 1));
        assert_eq!(
            weights.growth_bytes, 0,
            "it held 3 MiB when the window began"
        );
        assert_eq!(weights.owner, "program");
        let cache = &page.sites[1];
        assert!(
            cache.label.starts_with("grow_cache (live_control.c:"),
            "{cache:?}"
        );
        assert_eq!(
            (cache.live_bytes, cache.allocations, cache.device),
            (MIB, 1, 0)
        );
        assert_eq!(
            cache.growth_bytes, MIB as i64,
            "nothing when the window began"
        );

        // A forked child: its own page, under its own pid; the parent's stays the parent's.
        let answer = p.send(&format!("k {}", 5 * MIB));
        let child: u32 = answer.trim_start_matches("ok ").parse().unwrap();
        let cp = wait_for("the child's page", || {
            page_of(&run, child).filter(|q| q.devices.first().is_some_and(|d| d.live_bytes > 0))
        });
        assert_eq!((cp.pid, cp.devices[0].live_bytes), (child, 5 * MIB));
        assert_eq!(cp.sites[0].live_bytes, 5 * MIB);
        assert!(
            cp.sites[0].label.starts_with("child_buffers ("),
            "{:?}",
            cp.sites
        );
        assert!(
            cp.start_unix_ms > page.start_unix_ms,
            "the child started at the fork"
        );
        let parent = page_of(&run, pid).unwrap();
        assert_eq!(parent.devices[0].live_bytes, 4 * MIB);
        // SAFETY: kill to a process this test started (through the workload).
        assert_eq!(unsafe { libc::kill(child as i32, libc::SIGTERM) }, 0);
        wait_for("the child's page to go", || {
            page_of(&run, child).is_none().then_some(())
        });
        let r = wait_for("the child's report", || {
            let path = dir.join(format!("r.{child}.json"));
            std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .filter(|r| r["complete"] == true)
        });
        assert_eq!(r["leaks"].as_array().unwrap().len(), 1);
        assert!(
            page_of(&run, pid).is_some(),
            "the parent's page is still there"
        );

        let stderr = p.exit(0);
        assert!(
            page_files(&run).is_empty(),
            "removed at exit: {:?}",
            page_files(&run)
        );
        let r = read_report(&dir.join(format!("r.{pid}.json")));
        validate(&r).unwrap();
        assert_eq!(r["leaks"].as_array().unwrap().len(), 2);
        assert!(
            stderr.iter().all(|l| l.contains("; report: ")),
            "nothing but the summary line: {stderr:?}"
        );
        let mode = std::fs::metadata(&run).map(|m| {
            use std::os::unix::fs::PermissionsExt;
            m.permissions().mode() & 0o777
        });
        assert_eq!(mode.unwrap(), 0o700);
    }
}

#[test]
fn without_a_usable_runtime_directory_the_process_says_so_once_and_goes_on() {
    let dir = scratch_dir("live-no-dir");
    std::fs::write(dir.join("a-file"), b"").unwrap();
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::os::unix::fs::symlink(&open, dir.join("link")).unwrap();
    let cases: [(&str, PathBuf, &str); 3] = [
        ("under a file", dir.join("a-file/run"), "cannot create"),
        ("a symbolic link", dir.join("link"), "is a symbolic link"),
        ("writable by all", open.clone(), "is writable by others"),
    ];
    for (case, run, why) in cases {
        let report = dir.join(format!("r-{}.json", case.replace(' ', "-")));
        let mut p = Control::start(&report, &[("CUGUARD_RUNTIME_DIR", run.to_str().unwrap())]);
        p.send(&format!("w 0 {MIB}"));
        wait_for("the line", || {
            p.stderr_lines()
                .iter()
                .any(|l| l.contains("no stats page"))
                .then_some(())
        });
        p.send(&format!("c 1 {MIB}"));
        let stderr = p.exit(0);
        assert_eq!(
            stderr.len(),
            2,
            "{case}: the line and the summary: {stderr:?}"
        );
        assert!(
            stderr[0].starts_with("cuguard: no stats page") && stderr[0].contains(why),
            "{case}: {stderr:?}"
        );
        assert!(stderr[1].contains("; report: "), "{case}: {stderr:?}");
        let r = read_report(&report);
        validate(&r).unwrap();
        assert_eq!(r["leaks"].as_array().unwrap().len(), 2, "{case}");
        assert!(
            r["faults"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f.as_str().unwrap().contains("no stats page")),
            "{case}"
        );
        assert!(
            page_files(&open).is_empty(),
            "{case}: nothing left in {open:?}"
        );
    }
    // CUGUARD_PAGE=0: no page, no line, no directory made.
    let run = dir.join("never");
    let mut p = Control::start(
        &dir.join("r-off.json"),
        &[
            ("CUGUARD_RUNTIME_DIR", run.to_str().unwrap()),
            ("CUGUARD_PAGE", "0"),
        ],
    );
    p.send(&format!("w 0 {MIB}"));
    std::thread::sleep(Duration::from_millis(700));
    let stderr = p.exit(0);
    assert_eq!(stderr.len(), 1, "{stderr:?}");
    assert!(!run.exists());
}

/// The JSON lines in `path`.
fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The steps of the hysteresis test, with a threshold of 4 MiB (re-armed below 90% of it,
/// 3.6 MiB): each step's commands, and the kinds of alert lines there must be once it is done.
/// Steps that must add nothing are held for 1.5 s (the check runs at least once a second).
fn hysteresis_steps(p: &mut Control, lines: &mut dyn FnMut() -> Vec<String>) {
    let kinds_after = |p: &mut Control,
                       lines: &mut dyn FnMut() -> Vec<String>,
                       commands: &[String],
                       want: &[&str]| {
        for c in commands {
            p.send(c);
        }
        if want.len() == lines().len() {
            std::thread::sleep(Duration::from_millis(1500));
        }
        wait_for(&format!("alerts {want:?}"), || {
            let got = lines();
            (got.len() >= want.len()).then_some(got)
        });
        let got = lines();
        assert_eq!(got, want, "after {commands:?}");
    };
    let m = |k: u64| k * MIB / 4; // quarters of a MiB
    // 3 MiB: below.
    kinds_after(p, lines, &[format!("w 0 {}", m(12))], &[]);
    // 4 MiB: fires.
    kinds_after(p, lines, &[format!("c 1 {}", m(4))], &["warn_at"]);
    // 4.75 then 3.75 MiB: fired, and above the re-arm level: nothing.
    kinds_after(
        p,
        lines,
        &[format!("c 2 {}", m(3)), "f 1".into()],
        &["warn_at"],
    );
    // 4.25 MiB: above the threshold again, but not re-armed: nothing.
    kinds_after(p, lines, &[format!("c 3 {}", m(2))], &["warn_at"]);
    // 3.75, then 3 MiB: below 3.6 MiB, cleared.
    kinds_after(
        p,
        lines,
        &["f 3".into(), "f 2".into()],
        &["warn_at", "cleared"],
    );
    // 5 MiB: fires again.
    kinds_after(
        p,
        lines,
        &[format!("c 4 {}", m(8))],
        &["warn_at", "cleared", "warn_at"],
    );
}

#[test]
fn warn_at_fires_clears_and_fires_again_into_a_file() {
    let dir = scratch_dir("live-alerts-file");
    let run = dir.join("run");
    let report = dir.join("r.json");
    let sink = format!("file:{}/alerts.%p.log", dir.display());
    let mut p = Control::start(
        &report,
        &[
            ("CUGUARD_WARN_AT", "4MiB"),
            ("CUGUARD_ALERT", &sink),
            ("CUGUARD_RUNTIME_DIR", run.to_str().unwrap()),
        ],
    );
    let pid = p.pid();
    let log = dir.join(format!("alerts.{pid}.log"));
    let kinds = |log: &Path| {
        json_lines(log)
            .iter()
            .map(|v| v["kind"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    hysteresis_steps(&mut p, &mut || kinds(&log));
    let page = wait_for("alerts_total on the page", || {
        page_of(&run, pid).filter(|q| q.alerts_total == 2)
    });
    assert_eq!(page.devices[0].live_bytes, 5 * MIB);
    let stderr = p.exit(0);
    assert_eq!(stderr.len(), 1, "alerts went to the file only: {stderr:?}");

    let lines = json_lines(&log);
    assert_eq!(lines.len(), 3);
    let threshold = 4 * MIB;
    for (line, (kind, live, total)) in lines.iter().zip([
        ("warn_at", 4 * MIB, 1),
        ("cleared", 3 * MIB, 1),
        ("warn_at", 5 * MIB, 2),
    ]) {
        assert_eq!(line["source"], "cuguard");
        assert_eq!(line["kind"], kind, "{line}");
        assert_eq!(line["live_bytes"], live, "{line}");
        assert_eq!(line["alerts_total"], total, "{line}");
        assert_eq!(line["pid"], pid);
        assert!(line["exe"].as_str().unwrap().contains("c-live_control"));
        assert!(line["rank"].is_null());
        assert_eq!(line["device"], 0);
        assert_eq!(line["device_uuid"], SIM_UUID);
        assert_eq!(line["threshold_bytes"], threshold);
        assert_eq!(line["rearm_bytes"], threshold - threshold / 10);
        assert_eq!(line["setting"], threshold.to_string());
        assert_eq!(line["report"], report.to_str().unwrap());
        let time = line["time"].as_str().unwrap();
        assert!(time.len() == 24 && time.ends_with('Z'), "{time}");
        assert!(line["unix_ms"].as_u64().unwrap() > 1_700_000_000_000);
        let sites = line["top_sites"].as_array().unwrap();
        if kind == "warn_at" {
            assert!(
                line["message"]
                    .as_str()
                    .unwrap()
                    .contains("crossed CUGUARD_WARN_AT")
            );
            assert!(
                sites[0]["label"]
                    .as_str()
                    .unwrap()
                    .starts_with("grow_weights (live_control.c:"),
                "{line}"
            );
            assert_eq!(sites[0]["live_bytes"], 3 * MIB);
            assert_eq!(sites[0]["allocations"], 1);
            assert_eq!(sites[0]["owner"], "program");
        } else {
            assert!(sites.is_empty());
            assert!(line["message"].as_str().unwrap().contains("fell below 90%"));
        }
    }
    let r = read_report(&report);
    validate(&r).unwrap();
    let events: Vec<u64> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "warn_threshold_crossed")
        .map(|e| e["size"].as_u64().unwrap())
        .collect();
    assert_eq!(events, [4 * MIB, 5 * MIB]);
}

#[test]
fn alerts_go_to_stderr_as_json_and_to_syslog() {
    // json: the alert lines on stderr are JSON objects, nothing else is.
    let dir = scratch_dir("live-alerts-json");
    let mut p = Control::start(
        &dir.join("r.json"),
        &[("CUGUARD_WARN_AT", "4MiB"), ("CUGUARD_ALERT", "json")],
    );
    let stderr = p.stderr.clone();
    let mut json = move || {
        stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["kind"].as_str().unwrap().to_string()
            })
            .collect::<Vec<_>>()
    };
    hysteresis_steps(&mut p, &mut json);
    let stderr = p.exit(0);
    assert_eq!(stderr.len(), 4, "three alerts and the summary: {stderr:?}");

    // syslog: one datagram per alert, as glibc's syslog would send it, ident cuguard.
    let socket = dir.join("log.sock");
    let server = std::os::unix::net::UnixDatagram::bind(&socket).unwrap();
    server
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut p = Control::start(
        &dir.join("r2.json"),
        &[
            ("CUGUARD_WARN_AT", "4MiB"),
            ("CUGUARD_ALERT", "syslog"),
            ("CUGUARD_TEST_SYSLOG_SOCKET", socket.to_str().unwrap()),
        ],
    );
    let pid = p.pid();
    p.send(&format!("w 0 {}", 5 * MIB));
    let mut buf = vec![0u8; 65536];
    let n = server.recv(&mut buf).unwrap();
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    let prefix_end = message.find(": {").unwrap();
    let (head, body) = (&message[..prefix_end], &message[prefix_end + 2..]);
    assert!(head.starts_with("<12>"), "user.warning: {message}");
    assert!(head.ends_with(&format!(" cuguard[{pid}]")), "{message}");
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["live_bytes"].as_u64()),
        (Some("warn_at"), Some(5 * MIB))
    );
    let stderr = p.exit(0);
    assert_eq!(stderr.len(), 1, "{stderr:?}");

    // syslog without a socket: said once, and the alert goes to stderr.
    let mut p = Control::start(
        &dir.join("r3.json"),
        &[
            ("CUGUARD_WARN_AT", "4MiB"),
            ("CUGUARD_ALERT", "syslog"),
            (
                "CUGUARD_TEST_SYSLOG_SOCKET",
                dir.join("no.sock").to_str().unwrap(),
            ),
        ],
    );
    p.send(&format!("w 0 {}", 5 * MIB));
    wait_for("the alert", || {
        p.stderr_lines()
            .iter()
            .any(|l| l.contains("crossed CUGUARD_WARN_AT"))
            .then_some(())
    });
    let stderr = p.exit(0);
    assert_eq!(stderr.len(), 3, "{stderr:?}");
    assert!(
        stderr[0].contains("CUGUARD_ALERT=syslog: cannot send to"),
        "{stderr:?}"
    );
    assert!(stderr[1].starts_with("cuguard: device 0: live device memory 5.0 MiB crossed"));
}

/// `cuguard top --once` and the exporter over a real running workload (not pages made by a test):
/// both show its live, peak and reserved bytes exactly, and follow it when it allocates more.
#[test]
fn top_and_the_exporter_watch_a_running_workload() {
    use std::io::Read;
    use std::net::TcpStream;

    for pool in ["0", "1"] {
        let dir = scratch_dir(&format!("live-watch-{pool}"));
        let run = dir.join("run");
        let mut p = Control::start(
            &dir.join("r.%p.json"),
            &[
                ("CUGUARD_POOL", pool),
                ("CUGUARD_RUNTIME_DIR", run.to_str().unwrap()),
                ("RANK", "2"),
            ],
        );
        let pid = p.pid();
        p.send(&format!("w 0 {}", 3 * MIB));
        p.send(&format!("c 1 {}", 2 * MIB));
        p.send("f 1");
        let page = wait_for("the page after the steps", || {
            page_of(&run, pid).filter(|q| {
                q.devices
                    .first()
                    .is_some_and(|d| (d.live_bytes, d.peak_bytes) == (3 * MIB, 5 * MIB))
            })
        });
        let reserved = page.devices[0].reserved_bytes;
        if pool == "0" {
            assert_eq!(reserved, 0);
        } else {
            assert!(reserved >= 3 * MIB, "{page:?}");
        }

        let cuguard = || {
            let mut c = std::process::Command::new(&crate::support::artifacts().cuguard);
            c.env("NO_COLOR", "1").env_remove("CUGUARD_RUNTIME_DIR");
            c
        };
        // top --once: one line for the process, its columns as a user reads them.
        let out = cuguard()
            .args(["top", "--once", "--dir"])
            .arg(&run)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(
            lines[0],
            "    PID  RANK  DEV        LIVE        PEAK    RESERVED       GROWTH  EXE"
        );
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        let human = cuguard_format::human_bytes;
        let want_live = human(3 * MIB);
        let want_peak = human(5 * MIB);
        let want_reserved = human(reserved);
        let (live, peak, res): (Vec<&str>, Vec<&str>, Vec<&str>) = (
            want_live.split(' ').collect(),
            want_peak.split(' ').collect(),
            want_reserved.split(' ').collect(),
        );
        let mut want: Vec<&str> = vec![];
        let pid_s = pid.to_string();
        want.push(&pid_s);
        want.extend(["2", "0"]);
        want.extend(&live);
        want.extend(&peak);
        want.extend(&res);
        assert_eq!(&cols[..want.len()], &want[..], "{text}");
        assert!(cols.last().unwrap().starts_with("c-live_control"), "{text}");

        // The exporter, scraped over HTTP: the same figures, exact in bytes.
        let mut child = cuguard()
            .args(["exporter", "--listen", "127.0.0.1:0", "--dir"])
            .arg(&run)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let addr: std::net::SocketAddr = loop {
            let mut line = String::new();
            assert_ne!(err.read_line(&mut line).unwrap(), 0, "the exporter ended");
            if let Some(rest) = line.strip_prefix("cuguard exporter: serving http://") {
                break rest.split('/').next().unwrap().parse().unwrap();
            }
        };
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        let scrape = || {
            let mut s = TcpStream::connect(addr).unwrap();
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut response = String::new();
            s.read_to_string(&mut response).unwrap();
            assert!(response.starts_with("HTTP/1.1 200"), "{response}");
            response
        };
        let labels = |body: &str, name: &str| -> Vec<(String, u64)> {
            body.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .map(|l| {
                    let (k, v) = l.rsplit_once(' ').unwrap();
                    (k.to_string(), v.parse().unwrap())
                })
                .collect()
        };
        let body = scrape();
        let live_lines = labels(&body, "cuguard_live_bytes");
        assert_eq!(live_lines.len(), 1, "{body}");
        assert!(
            live_lines[0].0.contains(&format!("pid=\"{pid}\""))
                && live_lines[0].0.contains("rank=\"2\"")
                && live_lines[0].0.contains(&format!("UUID=\"{SIM_UUID}\"")),
            "{body}"
        );
        assert_eq!(live_lines[0].1, 3 * MIB, "{body}");
        assert_eq!(labels(&body, "cuguard_peak_bytes")[0].1, 5 * MIB, "{body}");
        assert_eq!(
            labels(&body, "cuguard_reserved_bytes")[0].1,
            reserved,
            "{body}"
        );
        assert_eq!(labels(&body, "cuguard_leaks")[0].1, 1, "{body}");

        // It follows the process: more memory, then scraped again.
        p.send(&format!("w 2 {}", 4 * MIB));
        wait_for("the exporter to see 7 MiB", || {
            let body = scrape();
            (labels(&body, "cuguard_live_bytes")[0].1 == 7 * MIB
                && labels(&body, "cuguard_peak_bytes")[0].1 == 7 * MIB
                && labels(&body, "cuguard_leaks")[0].1 == 2)
                .then_some(())
        });
        p.exit(0);
        // The page goes with the process, and the exporter stops listing it.
        wait_for("the exporter to drop the ended process", || {
            labels(&scrape(), "cuguard_live_bytes")
                .is_empty()
                .then_some(())
        });
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Tags on a running workload (issue 55): memory made inside `cuguard_tag_push("kv_cache")` is
/// on the stats page under its tag and in the exporter's per-tag gauges, exact in bytes, and
/// leaves them when it is freed; memory made outside any tag is in no tag's.
#[test]
fn the_exporter_counts_live_bytes_by_tag() {
    for pool in ["0", "1"] {
        let dir = scratch_dir(&format!("live-tags-{pool}"));
        let run = dir.join("run");
        let mut p = Control::start(
            &dir.join("r.%p.json"),
            &[
                ("CUGUARD_POOL", pool),
                ("CUGUARD_RUNTIME_DIR", run.to_str().unwrap()),
            ],
        );
        let pid = p.pid();
        assert_eq!(p.send("t kv_cache"), "ok 0");
        p.send(&format!("w 0 {}", 3 * MIB));
        p.send(&format!("c 1 {}", 2 * MIB));
        assert_eq!(p.send("t weights"), "ok 0");
        p.send(&format!("w 2 {}", 5 * MIB));
        assert_eq!(p.send("u"), "ok 0");
        assert_eq!(p.send("u"), "ok 0");
        assert_eq!(p.send("u"), "ok -1", "a pop with no tag open");
        p.send(&format!("w 3 {}", 7 * MIB));
        let tags = |q: &cuguard_page::Page| -> Vec<(String, u64, u64)> {
            q.tags
                .iter()
                .map(|t| (t.name.clone(), t.live_bytes, t.allocations))
                .collect()
        };
        // The most bytes first; a tie in the order the names were first given.
        let want = vec![
            ("kv_cache".to_string(), 5 * MIB, 2),
            ("weights".to_string(), 5 * MIB, 1),
        ];
        wait_for("the page's tags", || {
            page_of(&run, pid).filter(|q| tags(q) == want)
        });
        let textfile = dir.join("prom");
        std::fs::create_dir_all(&textfile).unwrap();
        let out = std::process::Command::new(&crate::support::artifacts().cuguard)
            .args(["exporter", "--once", "--dir"])
            .arg(&run)
            .arg("--textfile")
            .arg(&textfile)
            .env_remove("CUGUARD_RUNTIME_DIR")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let text = std::fs::read_to_string(textfile.join("cuguard.prom")).unwrap();
        let series = |name: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .map(|l| {
                    let tag = l.split("tag=\"").nth(1).unwrap().split('"').next().unwrap();
                    format!("{tag} {}", l.rsplit_once(' ').unwrap().1)
                })
                .collect()
        };
        assert_eq!(
            series("cuguard_tag_live_bytes"),
            [
                format!("kv_cache {}", 5 * MIB),
                format!("weights {}", 5 * MIB)
            ],
            "{text}"
        );
        assert_eq!(
            series("cuguard_tag_live_allocations"),
            ["kv_cache 2", "weights 1"],
            "{text}"
        );
        // Freed: out of its tag's count.
        p.send("f 0");
        p.send("f 2");
        wait_for("the page's tags after the frees", || {
            page_of(&run, pid).filter(|q| tags(q) == vec![("kv_cache".to_string(), 2 * MIB, 1)])
        });
        p.exit(0);
    }
}
