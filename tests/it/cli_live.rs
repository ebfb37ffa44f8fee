//! `cuguard top --once` and `cuguard exporter` as a user runs them, on directories of pages
//! encoded here with `cuguard_page::encode` for running `sleep` processes: exact frames, a
//! scrape over real HTTP with exact values, the textfile, stale and bad pages, a port in use.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cuguard_page::{DevicePage, Page, SitePage};

use crate::support;

fn cuguard() -> Command {
    let mut cmd = Command::new(&support::artifacts().cuguard);
    cmd.env("NO_COLOR", "1").env_remove("CUGUARD_RUNTIME_DIR");
    cmd
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A running process to write a page for, killed when dropped.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("120").spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A killed child's reaped pid: no process has it.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

fn write_page(dir: &Path, page: &Page) -> PathBuf {
    let path = dir.join(cuguard_page::file_name(page.pid, page.start_unix_ms));
    std::fs::write(&path, &cuguard_page::encode(page, 2)[..]).unwrap();
    path
}

/// The first process: two devices, a rank, a pool, a site.
fn trainer(pid: u32, start: u64) -> Page {
    Page {
        pid,
        start_unix_ms: start,
        updated_unix_ms: unix_ms(),
        rank: Some(1),
        oom_total: 2,
        alerts_total: 3,
        live_allocations: 5,
        contexts_live: 2,
        exe: "/usr/bin/python3.12".into(),
        host: "node-a".into(),
        report: "/tmp/cuguard.python3.12.json".into(),
        devices: vec![
            DevicePage {
                ordinal: 0,
                total_bytes: 16 << 30,
                live_bytes: 3 << 20,
                peak_bytes: 5 << 20,
                reserved_bytes: 64 << 20,
                growth_bytes: 1 << 20,
                history_interval_ms: 1000,
                history: vec![2 << 20, 3 << 20],
                uuid: Some("GPU-11111111-2222-3333-4444-555555555555".into()),
                name: "NVIDIA H200".into(),
            },
            DevicePage {
                ordinal: 1,
                live_bytes: 1536,
                peak_bytes: 4096,
                growth_bytes: -512,
                ..DevicePage::default()
            },
        ],
        sites: vec![SitePage {
            device: 0,
            live_bytes: 3 << 20,
            allocations: 4,
            owner: "program".into(),
            label: "step (train.py:42)".into(),
            ..SitePage::default()
        }],
        ..Page::default()
    }
}

/// The second process: a Dask worker, no device yet.
fn worker(pid: u32, start: u64) -> Page {
    Page {
        pid,
        start_unix_ms: start,
        updated_unix_ms: unix_ms(),
        exe: "/opt/bin/dask-worker".into(),
        worker: Some("tcp://10.0.0.5:40001".into()),
        host: "node-a".into(),
        ..Page::default()
    }
}

/// Two running processes' pages, a dead process's page and a zeroed page of a running one.
struct Pages {
    dir: PathBuf,
    a: Sleeper,
    b: Sleeper,
    dead: PathBuf,
    zeroed: PathBuf,
}

fn pages(test: &str) -> Pages {
    let dir = support::scratch_dir(test);
    let (a, b) = (Sleeper::start(), Sleeper::start());
    let now = unix_ms();
    write_page(&dir, &trainer(a.pid(), now));
    write_page(&dir, &worker(b.pid(), now));
    let dead = write_page(&dir, &trainer(dead_pid(), now));
    let zeroed = dir.join(cuguard_page::file_name(a.pid(), now + 1));
    std::fs::write(&zeroed, [0u8; cuguard_page::PAGE_SIZE]).unwrap();
    Pages {
        dir,
        a,
        b,
        dead,
        zeroed,
    }
}

fn sorted_pids(p: &Pages) -> (u32, u32) {
    (p.a.pid(), p.b.pid())
}

#[test]
fn top_once_prints_one_line_per_process_and_device() {
    let p = pages("top-once");
    let out = cuguard()
        .args(["top", "--once", "--dir"])
        .arg(&p.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (a, b) = sorted_pids(&p);
    let mut want = vec![
        format!("{a:>7}     1    0     3.0 MiB     5.0 MiB    64.0 MiB     +1.0 MiB  python3.12"),
        format!("{a:>7}     1    1     1.5 KiB     4.0 KiB         0 B       -512 B  python3.12"),
        format!(
            "{b:>7}     -    -           -           -           -            -  dask-worker (worker tcp://10.0.0.5:40001)"
        ),
    ];
    if b < a {
        want.rotate_left(2);
    }
    want.insert(
        0,
        "    PID  RANK  DEV        LIVE        PEAK    RESERVED       GROWTH  EXE".into(),
    );
    let got = stdout(&out);
    assert_eq!(got.lines().collect::<Vec<_>>(), want, "{got}");
    assert!(!got.contains('\x1b'), "no escape codes");
    // The bad page is said once, on standard error; the dead process's page is gone.
    assert_eq!(
        stderr(&out),
        format!(
            "cuguard: page {}: not a cuguard page (bad magic); skipped\n",
            p.zeroed.display()
        )
    );
    assert!(!p.dead.exists(), "the page of an ended process is removed");
    assert!(p.zeroed.exists(), "a bad page of a running process stays");
}

#[test]
fn top_once_with_no_process_says_so() {
    let dir = support::scratch_dir("top-none");
    for d in [dir.clone(), dir.join("never-made")] {
        let out = cuguard()
            .args(["top", "--once", "--dir"])
            .arg(&d)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            stdout(&out),
            format!(
                "no process under cuguard found (no readable page in {})\n",
                d.display()
            )
        );
        assert_eq!(stderr(&out), "");
    }
    // The runtime directory the shim uses, from CUGUARD_RUNTIME_DIR.
    let out = cuguard()
        .args(["top", "--once"])
        .env("CUGUARD_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    assert!(
        stdout(&out).contains(&dir.display().to_string()),
        "{}",
        stdout(&out)
    );
    // Without a terminal, the live view refuses plainly.
    let out = cuguard()
        .args(["top", "--dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "cuguard: error: the terminal: standard output is not a terminal; `cuguard top --once` prints one frame as plain text\n"
    );
}

/// The exposition lines for the two running processes, in pid order.
fn expected_metrics(p: &Pages) -> String {
    let (a, b) = sorted_pids(p);
    let pa = format!("pid=\"{a}\",exe=\"python3.12\",rank=\"1\",worker=\"\",host=\"node-a\"");
    let pb = format!(
        "pid=\"{b}\",exe=\"dask-worker\",rank=\"\",worker=\"tcp://10.0.0.5:40001\",host=\"node-a\""
    );
    let d0 = ",device=\"0\",UUID=\"GPU-11111111-2222-3333-4444-555555555555\"";
    let d1 = ",device=\"1\",UUID=\"\"";
    let per_process = |name: &str, va: u64, vb: u64| {
        let mut lines = [
            format!("{name}{{{pa}}} {va}"),
            format!("{name}{{{pb}}} {vb}"),
        ];
        if b < a {
            lines.swap(0, 1);
        }
        lines.join("\n")
    };
    format!(
        "# HELP cuguard_live_bytes Device memory the program holds now, in bytes, per process and device (what its report would list as leaked if it ended now).
# TYPE cuguard_live_bytes gauge
cuguard_live_bytes{{{pa}{d0}}} 3145728
cuguard_live_bytes{{{pa}{d1}}} 1536
# HELP cuguard_peak_bytes The highest cuguard_live_bytes of the process on the device so far, in bytes.
# TYPE cuguard_peak_bytes gauge
cuguard_peak_bytes{{{pa}{d0}}} 5242880
cuguard_peak_bytes{{{pa}{d1}}} 4096
# HELP cuguard_reserved_bytes Device memory cuguard's pool holds from the driver for the process (in use and idle), in bytes; 0 with the pool off.
# TYPE cuguard_reserved_bytes gauge
cuguard_reserved_bytes{{{pa}{d0}}} 67108864
cuguard_reserved_bytes{{{pa}{d1}}} 0
# HELP cuguard_leaks Live allocations of the process: what its report would list as leaks if it ended now.
# TYPE cuguard_leaks gauge
{}
# HELP cuguard_oom_total Allocations that returned out of memory to the program.
# TYPE cuguard_oom_total counter
{}
# HELP cuguard_alerts_total Alerts the process fired (CUGUARD_WARN_AT crossings).
# TYPE cuguard_alerts_total counter
{}
# HELP cuguard_tag_live_bytes Device memory live under a tag the program gave (cuguard.tag), in bytes, per process and tag (the process's top 16 tags).
# TYPE cuguard_tag_live_bytes gauge
# HELP cuguard_tag_live_allocations Device allocations live under a tag the program gave (cuguard.tag), per process and tag.
# TYPE cuguard_tag_live_allocations gauge
",
        per_process("cuguard_leaks", 5, 0),
        per_process("cuguard_oom_total", 2, 0),
        per_process("cuguard_alerts_total", 3, 0),
    )
}

/// A running exporter, ended when dropped.
struct Exporter {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_exporter(dir: &Path) -> Exporter {
    let mut child = cuguard()
        .args(["exporter", "--listen", "127.0.0.1:0", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = Vec::new();
    let addr = loop {
        let mut line = String::new();
        assert_ne!(
            err.read_line(&mut line).unwrap(),
            0,
            "exporter ended: {said:?}"
        );
        if let Some(rest) = line.strip_prefix("cuguard exporter: serving http://") {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
        said.push(line);
    };
    // Keep reading its standard error so it never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    Exporter { child, addr }
}

/// One HTTP/1.1 GET over a plain TCP connection: (status line, headers, body).
fn get(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a whole response");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

#[test]
fn exporter_is_scraped_over_http_with_exact_values() {
    let p = pages("exporter-http");
    let exporter = start_exporter(&p.dir);
    assert!(exporter.addr.ip().is_loopback());
    let (status, headers, body) = get(exporter.addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{headers}"
    );
    assert_eq!(body, expected_metrics(&p));
    assert!(!p.dead.exists(), "the page of an ended process is removed");

    // A process ends: its series go at the next scrape, and so does its page.
    let gone = p.b.pid();
    let mut p = p;
    drop(std::mem::replace(&mut p.b, Sleeper::start()));
    let (_, _, body) = get(exporter.addr, "/metrics");
    assert!(!body.contains(&format!("pid=\"{gone}\"")), "{body}");
    assert_eq!(body.matches("cuguard_leaks{").count(), 1, "{body}");

    let (status, _, body) = get(exporter.addr, "/");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    assert_eq!(body, "not found; the metrics are at /metrics\n");
    let (status, _, _) = get(exporter.addr, "/metrics/extra");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
}

#[test]
fn exporter_textfile_holds_the_same_text() {
    let p = pages("exporter-textfile");
    let out_dir = p.dir.join("textfile");
    std::fs::create_dir(&out_dir).unwrap();
    let out = cuguard()
        .args(["exporter", "--once", "--textfile"])
        .arg(&out_dir)
        .arg("--dir")
        .arg(&p.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let files: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files, vec!["cuguard.prom"], "no temporary file left");
    assert_eq!(
        std::fs::read_to_string(out_dir.join("cuguard.prom")).unwrap(),
        expected_metrics(&p)
    );
    // A textfile directory that does not exist: exit 2, said in one line.
    let out = cuguard()
        .args(["exporter", "--once", "--textfile"])
        .arg(p.dir.join("nowhere"))
        .arg("--dir")
        .arg(&p.dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("cuguard: error: writing ") && last.contains("nowhere/cuguard.prom"),
        "{err}"
    );
}

#[test]
fn exporter_on_a_port_in_use_exits_2_saying_so() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = support::scratch_dir("exporter-port");
    let out = cuguard()
        .args(["exporter", "--listen", &addr.to_string(), "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "cuguard: error: cannot listen on {addr}: the address is in use (another exporter?); choose another with --listen HOST:PORT\n"
        )
    );
    assert_eq!(stdout(&out), "");
}
