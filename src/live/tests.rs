//! The reader against pages written here with `cuguard_page::encode`: kept, removed, skipped
//! and said once.

use std::path::{Path, PathBuf};

use cuguard_page::{BODY_OFFSET, CHECKSUM_OFFSET, DevicePage, PAGE_SIZE, Page, SEQ_OFFSET};

use super::process::{self, Liveness};
use super::*;

fn dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cuguard-live-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn page(pid: u32, start: u64) -> Page {
    Page {
        pid,
        start_unix_ms: start,
        updated_unix_ms: process::unix_ms(),
        exe: "/usr/bin/python3".into(),
        devices: vec![DevicePage {
            ordinal: 0,
            live_bytes: 3 << 20,
            ..DevicePage::default()
        }],
        ..Page::default()
    }
}

fn write(dir: &Path, page: &Page) -> PathBuf {
    write_bytes(
        dir,
        page.pid,
        page.start_unix_ms,
        &cuguard_page::encode(page, 2)[..],
    )
}

fn write_bytes(dir: &Path, pid: u32, start: u64, bytes: &[u8]) -> PathBuf {
    let path = dir.join(cuguard_page::file_name(pid, start));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn me() -> u32 {
    std::process::id()
}

fn my_start() -> u64 {
    match process::probe(me()) {
        Liveness::Running {
            start_unix_ms: Some(s),
        } => s,
        other => panic!("{other:?}"),
    }
}

/// A pid no process has: a child's, after it was reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_page_of_a_running_process_is_read_and_kept() {
    let dir = dir("running");
    let mine = page(me(), process::unix_ms());
    let path = write(&dir, &mine);
    std::fs::write(dir.join("notes.txt"), "not a page").unwrap();
    std::fs::write(dir.join(".12-34.page.tmp"), "not a page either").unwrap();
    let mut reader = Reader::new(dir.clone());
    let scan = reader.scan().unwrap();
    assert_eq!(
        scan.processes,
        vec![LiveProcess {
            path: path.clone(),
            page: mine
        }]
    );
    assert!(scan.notes.is_empty(), "{:?}", scan.notes);
    assert_eq!(scan.removed, 0);
    assert!(path.exists());
    assert!(dir.join("notes.txt").exists(), "other files are left alone");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_page_of_an_ended_process_is_removed_quietly() {
    let dir = dir("ended");
    let pid = dead_pid();
    let stale = write(&dir, &page(pid, process::unix_ms()));
    // Even a bad page is removed when its process has ended: it is not read.
    let zeroed = write_bytes(&dir, pid, 7, &[0u8; PAGE_SIZE]);
    let mine = write(&dir, &page(me(), process::unix_ms()));
    let mut reader = Reader::new(dir.clone());
    let scan = reader.scan().unwrap();
    assert_eq!(scan.removed, 2);
    assert!(scan.notes.is_empty(), "{:?}", scan.notes);
    assert!(!stale.exists() && !zeroed.exists());
    assert_eq!(scan.processes.len(), 1);
    assert!(mine.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_page_whose_pid_was_reused_is_removed() {
    let dir = dir("reused");
    // Written an hour before this process started: its writer was another process.
    let old = my_start() - 3_600_000;
    let mut stale = page(me(), old);
    stale.updated_unix_ms = old + 1000;
    let path = write(&dir, &stale);
    // Named with an old start but written since: a forked child that kept its parent's start
    // would look like this, and is kept.
    let mut child = page(me(), old - 5);
    child.updated_unix_ms = process::unix_ms();
    let kept = write(&dir, &child);
    let scan = Reader::new(dir.clone()).scan().unwrap();
    assert_eq!(scan.removed, 1);
    assert!(!path.exists());
    assert!(kept.exists());
    assert_eq!(scan.processes.len(), 1);
    assert_eq!(scan.processes[0].page, child);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad pages of a running process: each skipped with one line, said once over many scans.
#[test]
fn bad_pages_are_skipped_and_said_once() {
    let dir = dir("bad");
    let now = process::unix_ms();
    let good = cuguard_page::encode(&page(me(), now), 2);
    let truncated = write_bytes(&dir, me(), now + 1, &good[..1000]);
    let zeroed = write_bytes(&dir, me(), now + 2, &[0u8; PAGE_SIZE]);
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&2u32.to_le_bytes());
    let newer = write_bytes(&dir, me(), now + 3, &newer[..]);
    let garbage: Vec<u8> = (0..PAGE_SIZE).map(|i| (i * 7919 % 251) as u8).collect();
    let garbage = write_bytes(&dir, me(), now + 4, &garbage);
    // A device count beyond the slots, with a checksum that matches (a hostile writer).
    let mut hostile = good.clone();
    hostile[BODY_OFFSET + 4 * 4 + 8 * 6 + 4..][..4].copy_from_slice(&1000u32.to_le_bytes());
    let sum = cuguard_page::checksum(&hostile[BODY_OFFSET..]);
    hostile[CHECKSUM_OFFSET..][..8].copy_from_slice(&sum.to_le_bytes());
    let hostile = write_bytes(&dir, me(), now + 5, &hostile[..]);
    // Caught mid-write at every read: the writer stopped in the middle.
    let mut writing = good.clone();
    writing[SEQ_OFFSET..][..8].copy_from_slice(&3u64.to_le_bytes());
    let writing = write_bytes(&dir, me(), now + 6, &writing[..]);
    // A page whose name and contents disagree.
    let other = write(&dir, &page(me(), now + 100));
    let renamed = dir.join(cuguard_page::file_name(me(), now + 7));
    std::fs::rename(&other, &renamed).unwrap();

    let mut reader = Reader::new(dir.clone());
    let scan = reader.scan().unwrap();
    assert!(scan.processes.is_empty(), "{:?}", scan.processes);
    assert_eq!(scan.removed, 0, "the process runs: its pages stay");
    let mut notes = scan.notes.clone();
    notes.sort();
    let name = |p: &Path| p.display().to_string();
    let mut want = vec![
        format!(
            "page {}: truncated (1000 of 16384 bytes); skipped",
            name(&truncated)
        ),
        format!(
            "page {}: not a cuguard page (bad magic); skipped",
            name(&zeroed)
        ),
        format!(
            "page {}: layout version 2, this cuguard reads 1; skipped",
            name(&newer)
        ),
        format!(
            "page {}: not a cuguard page (bad magic); skipped",
            name(&garbage)
        ),
        format!(
            "page {}: garbage in the device count; skipped",
            name(&hostile)
        ),
        format!("page {}: being written; skipped", name(&writing)),
        format!(
            "page {}: holds pid {} started at {}, not what its name says; skipped",
            name(&renamed),
            me(),
            now + 100
        ),
    ];
    want.sort();
    assert_eq!(notes, want);
    for _ in 0..3 {
        let again = reader.scan().unwrap();
        assert!(again.notes.is_empty(), "said once: {:?}", again.notes);
    }
    // A page that goes away and comes back bad is said again.
    std::fs::remove_file(&zeroed).unwrap();
    assert!(reader.scan().unwrap().notes.is_empty());
    write_bytes(&dir, me(), now + 2, &[0u8; PAGE_SIZE]);
    assert_eq!(reader.scan().unwrap().notes.len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn links_and_odd_files_are_not_followed() {
    let dir = dir("links");
    let now = process::unix_ms();
    let target = dir.join("elsewhere");
    std::fs::write(&target, &cuguard_page::encode(&page(me(), now), 2)[..]).unwrap();
    let link = dir.join(cuguard_page::file_name(me(), now));
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let sub = dir.join(cuguard_page::file_name(me(), now + 1));
    std::fs::create_dir(&sub).unwrap();
    let zero_pid = write(&dir, &page(0, now));
    let scan = Reader::new(dir.clone()).scan().unwrap();
    assert!(scan.processes.is_empty());
    let mut notes = scan.notes;
    notes.sort();
    assert_eq!(
        notes,
        vec![
            format!(
                "page {}: its name holds pid 0, which no process can have; skipped",
                zero_pid.display()
            ),
            format!(
                "page {}: a symbolic link, not followed; skipped",
                link.display()
            ),
            format!("page {}: not a regular file; skipped", sub.display()),
        ]
    );
    assert!(
        zero_pid.exists(),
        "pid 0 is never probed nor its page removed"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn another_users_page_is_not_read() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to make a file of another user");
        return;
    }
    let dir = dir("other-user");
    let path = write(&dir, &page(me(), process::unix_ms()));
    std::os::unix::fs::chown(&path, Some(4_000_000), None).unwrap();
    let scan = Reader::new(dir.clone()).scan().unwrap();
    assert!(scan.processes.is_empty());
    assert_eq!(
        scan.notes,
        vec![format!(
            "page {}: owned by uid 4000000, not by you (uid 0): not read; skipped",
            path.display()
        )]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_directory_is_no_processes_and_an_unlistable_one_an_error() {
    let dir = dir("missing").join("not-there");
    let scan = Reader::new(dir.clone()).scan().unwrap();
    assert!(scan.no_directory && scan.processes.is_empty());
    let file = dir.parent().unwrap().join("a-file");
    std::fs::write(&file, "").unwrap();
    let err = Reader::new(file.clone()).scan().unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("reading the page directory {}: ", file.display())),
        "{err}"
    );
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

#[test]
fn exe_names() {
    assert_eq!(exe_name("/usr/bin/python3.12"), "python3.12");
    assert_eq!(exe_name("train"), "train");
    assert_eq!(exe_name(""), "");
}

#[test]
fn the_shared_directory_and_the_private_ones_beside_it_are_read() {
    use std::os::unix::fs::PermissionsExt;
    let root = dir("shared");
    let asked = root.join("cuguard-7");
    let private = |name: &str, mode: u32| {
        let d = root.join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        d
    };
    // Where the shim puts pages when another user took the shared name (and an older one).
    let fresh = private("cuguard-7.0123abcd", 0o700);
    let older = private("cuguard-7.fedcba98", 0o700);
    // Not the shim's: open to others, or not its name.
    let open = private("cuguard-7.00000000", 0o777);
    let other = private("cuguard-7.nothex00", 0o700);
    let mine = page(me(), process::unix_ms());
    let a = write(&fresh, &mine);
    let b = write(&older, &page(me(), mine.start_unix_ms + 1));
    write(&open, &page(me(), mine.start_unix_ms + 2));
    write(&other, &page(me(), mine.start_unix_ms + 3));
    let mut reader = Reader::of(RuntimeDir::Shared(asked.clone()));
    assert_eq!(reader.dir(), asked);
    let scan = reader.scan().unwrap();
    let mut paths: Vec<&Path> = scan.processes.iter().map(|p| p.path.as_path()).collect();
    paths.sort();
    assert_eq!(paths, [a.as_path(), b.as_path()]);
    assert!(scan.notes.is_empty() && !scan.no_directory, "{scan:?}");
    // The shared name taken by a link (or another user's directory): not read, said once.
    let elsewhere = private("elsewhere", 0o700);
    write(&elsewhere, &page(me(), mine.start_unix_ms + 4));
    std::os::unix::fs::symlink(&elsewhere, &asked).unwrap();
    let scan = reader.scan().unwrap();
    assert_eq!(scan.processes.len(), 2);
    let shown = asked.display();
    assert_eq!(
        scan.notes,
        [format!(
            "{shown} is a symbolic link: not read (the shim puts this user's pages in a private {shown}.XXXXXXXX then)"
        )]
    );
    assert!(reader.scan().unwrap().notes.is_empty(), "said once");
    std::fs::remove_file(&asked).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let theirs = private("cuguard-7", 0o755);
        std::os::unix::fs::chown(&theirs, Some(4_000_000), None).unwrap();
        let scan = reader.scan().unwrap();
        assert_eq!(scan.processes.len(), 2);
        assert_eq!(
            scan.notes,
            [format!(
                "{shown} belongs to another user (uid 4000000): not read (the shim puts this user's pages in a private {shown}.XXXXXXXX then)"
            )]
        );
        // This user's own, closed to others: read with the rest.
        std::os::unix::fs::chown(&theirs, Some(0), None).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        write(&theirs, &page(me(), mine.start_unix_ms + 5));
        assert_eq!(reader.scan().unwrap().processes.len(), 3);
    }
    // Nothing there at all: no directory.
    std::fs::remove_dir_all(&root).unwrap();
    assert!(reader.scan().unwrap().no_directory);
}
