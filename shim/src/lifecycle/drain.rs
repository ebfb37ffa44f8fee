//! The history's file, shim side: its own thread drains every thread's ring
//! ([`crate::recorder::ring`]) every [`DRAIN_MS`] into a file beside the report ([`start`]), and
//! the final report drains the rest and closes it with an end.
//!
//! - The file is `NAME.history` beside the report `NAME.json` (the report template's path in
//!   this process), created exclusively (never through a link) with the report's mode (0600
//!   unless `CUGUARD_REPORT_MODE` says otherwise). A file of that name whose writer no longer
//!   runs and that is not of this run is replaced; any other (a process still running, of any
//!   run, or one of this run's) is kept, and this one numbered as reports are
//!   (`NAME.1.history`, …). The header names the process (pid, start, run tag) and the report
//!   names its own history by absolute path, so the command can refuse a history that is not
//!   the report's.
//! - Each drain appends whole chunks with one `write`: what is on disk is readable at any moment
//!   (a `kill -9` loses at most the last drain interval).
//! - Bounded: when the file passes half the bound it becomes `NAME.history.1` (replacing this
//!   writer's older one, which is let go; never a file it did not make) and a new segment begins, restating the modules, Python code, stacks
//!   and everything live ([`cuguard_history::Chunk::Live`]), so the newest segment and its
//!   predecessor are within the bound and the newer one reads on its own.
//! - A write that fails (a full disk) stops the history: the program runs on, and the report
//!   says why (`history.stopped`), with the file cut back to its last whole chunk.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use cuguard_history::live::Follow;
use cuguard_history::{Action, Chunk, Header, Raw, VERSION, write_chunk};

use crate::process::clock;

/// How often the cuguard thread drains the rings, milliseconds.
pub const DRAIN_MS: u64 = 50;

/// The longest list of loss windows kept for the report.
const MAX_LOST_WINDOWS: usize = 64;

use crate::recorder::{clock_now as now, first};

/// The writer's state.
struct Writer {
    file: Option<File>,
    /// The newest segment's path, and its predecessor's.
    path: PathBuf,
    /// The files this writer made, as (device, inode): the current segment's and the previous
    /// one's. Rotation touches a path only while it is still one of these (never another
    /// process's file that took its name).
    current_id: Option<(u64, u64)>,
    prev_id: Option<(u64, u64)>,
    segment: u32,
    seg_bytes: u64,
    prev_bytes: u64,
    /// When the current and the previous segment began, ns since the start.
    seg_start_ns: u64,
    prev_start_ns: u64,
    bound: u64,
    events: u64,
    stacks_done: u32,
    codes_done: u32,
    /// Phase names written to the current segment: ids below this.
    names_done: u32,
    modules_done: HashSet<(u64, String)>,
    /// What is live, as the events drained so far say (for a new segment's `Live` chunk and
    /// the checkpoints).
    follow: Follow,
    /// Events lost: (count, from ms, to ms).
    lost: Vec<(u64, u64, u64)>,
    let_go: u32,
    stopped: Option<String>,
    ended: bool,
    /// The bytes the current segment's beginning took (header, clocks, what it restates).
    seg_begin_bytes: u64,
    /// The latest clock pair written.
    last_clock: (u64, u64, u64),
}

static WRITER: AtomicPtr<Mutex<Option<Writer>>> = AtomicPtr::new(std::ptr::null_mut());

fn writer() -> &'static Mutex<Option<Writer>> {
    crate::process::global::get_or_create(&WRITER, || Mutex::new(None))
}

/// When the last drain ran, ms since the start.
/// How often a busy program's rings are drained, milliseconds (a ring more than 1/64 full).
pub const BUSY_DRAIN_MS: u64 = 5;
/// How often, when a ring was more than 1/8 full or one lost events.
pub const FULL_DRAIN_MS: u64 = 1;

static RUNNING: AtomicBool = AtomicBool::new(false);

/// Starts the history's thread, `cuguard-history`, which drains the rings every [`DRAIN_MS`]
/// ([`BUSY_DRAIN_MS`], [`FULL_DRAIN_MS`] while the rings fill faster). Its own thread,
/// apart from the cuguard thread, whose reports and names may take a while: the rings are
/// drained meanwhile. Started when the process arms (never at load), with every signal
/// blocked; a forked child starts its own.
pub fn start() {
    if RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    prepare();
    let spawned = crate::process::thread::spawn_masked("cuguard-history", drain_loop);
    if let Err(e) = spawned {
        RUNNING.store(false, Ordering::Release);
        crate::process::diag::log(|| format!("could not start the history's thread: {e}"));
    }
}

/// Lets a full ring drain itself through the writer ([`make_room`]): before anything else when
/// the process arms, since its other threads record from then on.
pub fn prepare() {
    crate::recorder::ring::set_make_room(make_room);
}

fn drain_loop() {
    // Inside the shim for good: nothing this thread does is tracked.
    std::mem::forget(crate::guard::Guard::enter());
    let mut every = DRAIN_MS;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(every));
        if crate::phase::final_claimed() {
            RUNNING.store(false, Ordering::Release);
            return;
        }
        let d = crate::guard::shield(Drained::default(), || drain(false));
        // A busy program: drain more often, so that no ring fills between two drains and one
        // drain stays a small part of the bound.
        every = if d.lost > 0 || d.fullest >= crate::recorder::ring::CAP / 8 {
            FULL_DRAIN_MS
        } else if d.fullest >= crate::recorder::ring::CAP / 64
            || d.bytes > crate::config::get().history_bytes / 64
        {
            BUSY_DRAIN_MS
        } else {
            DRAIN_MS
        };
    }
}

/// Drains every ring into the file now (a report is about to be written: what it says and the
/// history agree).
pub fn drain_now() {
    if crate::recorder::on() {
        drain(false);
    }
}

/// Drains the rest and ends the history (the final report).
pub fn finish() {
    if crate::recorder::on() {
        drain(true);
    }
}

/// What one drain found.
#[derive(Default)]
struct Drained {
    /// Bytes written.
    bytes: u64,
    /// Events taken from the fullest ring.
    fullest: usize,
    /// Events lost since the drain before.
    lost: u64,
}

/// Back-pressure: the calling thread's ring is full. Drains every ring now, as the history's
/// thread would (what the rings hold is written in time order), unless a drain that ran while
/// this thread waited for the writer made room already. The caller is on the allocation path,
/// inside the shim; the wait is for the drain in progress, at most [`WRITER_WAIT`].
fn make_room(ring: &crate::recorder::ring::Ring) {
    crate::guard::shield((), || {
        let Some(mut guard) = lock_writer() else {
            return;
        };
        if !ring.has_room() {
            drain_locked(&mut guard, false);
        }
    });
}

/// The longest a thread waits for the writer's lock: a drain takes milliseconds; a holder that
/// keeps it longer (a thread stopped by a signal while it drained) is not waited for.
const WRITER_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The writer's lock, taken within [`WRITER_WAIT`] (`None` past it); a poisoned lock is taken
/// back.
fn lock_writer() -> Option<std::sync::MutexGuard<'static, Option<Writer>>> {
    use std::sync::TryLockError;
    let started = std::time::Instant::now();
    loop {
        match writer().try_lock() {
            Ok(g) => return Some(g),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if started.elapsed() < WRITER_WAIT => {
                std::thread::sleep(std::time::Duration::from_micros(20))
            }
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// Drains every ring into the file.
fn drain(end: bool) -> Drained {
    match lock_writer() {
        Some(mut guard) => drain_locked(&mut guard, end),
        None => Drained::default(),
    }
}

/// Drains every ring into the file, the writer's lock held.
fn drain_locked(guard: &mut Option<Writer>, end: bool) -> Drained {
    if guard.is_none() {
        *guard = Some(Writer::new());
    }
    let w = guard.as_mut().expect("just set");
    if w.ended {
        return Drained::default();
    }
    let before = w.seg_bytes + w.prev_bytes;
    let mut batches: Vec<(u32, Vec<Raw>)> = Vec::new();
    let mut lost: Vec<(u64, u64, u64)> = Vec::new();
    for ring in crate::recorder::ring::rings() {
        ring.drain(
            &mut |thread, events| batches.push((thread, events.to_vec())),
            &mut |n, a, b| lost.push((n, a, b)),
        );
    }
    let (orphans, orphans_lost) = crate::recorder::ring::take_orphans();
    let mut by_thread: HashMap<u32, Vec<Raw>> = HashMap::new();
    for (thread, raw) in orphans {
        by_thread.entry(thread).or_default().push(raw);
    }
    batches.extend(by_thread);
    if orphans_lost > 0 {
        let t = crate::recorder::now_tsc();
        lost.push((orphans_lost, t, t));
    }
    w.write(&batches, &lost, end);
    if end {
        w.ended = true;
        w.file = None;
    }
    crate::recorder::set_status(w.status());
    Drained {
        bytes: (w.seg_bytes + w.prev_bytes).saturating_sub(before),
        fullest: batches.iter().map(|(_, e)| e.len()).max().unwrap_or(0),
        lost: lost.iter().map(|l| l.0).sum(),
    }
}

/// Events with their threads.
type Events = Vec<(u32, Raw)>;

/// Events by thread, the threads in the order they first appear, each thread's in order.
fn by_thread(events: &[(u32, Raw)]) -> Vec<(u32, Vec<Raw>)> {
    let mut out: Vec<(u32, Vec<Raw>)> = Vec::new();
    for (thread, e) in events {
        match out.iter_mut().find(|(t, _)| t == thread) {
            Some((_, list)) => list.push(*e),
            None => out.push((*thread, vec![*e])),
        }
    }
    out
}

impl Writer {
    fn new() -> Writer {
        Writer {
            file: None,
            path: PathBuf::new(),
            current_id: None,
            prev_id: None,
            segment: 0,
            seg_bytes: 0,
            prev_bytes: 0,
            seg_start_ns: 0,
            prev_start_ns: 0,
            bound: crate::config::get().history_bytes,
            events: 0,
            stacks_done: 0,
            codes_done: 0,
            names_done: 0,
            modules_done: HashSet::new(),
            follow: Follow::default(),
            lost: Vec::new(),
            let_go: 0,
            stopped: None,
            seg_begin_bytes: 0,
            ended: false,
            last_clock: first(),
        }
    }

    fn write(&mut self, batches: &[(u32, Vec<Raw>)], lost: &[(u64, u64, u64)], end: bool) {
        let clock_now = now();
        self.last_clock = clock_now;
        for &(count, a, b) in lost {
            self.note_lost(count, a, b);
        }
        if self.stopped.is_some() || (self.file.is_none() && !self.open()) {
            return;
        }
        // What is new to name, and the clock, first.
        let mut head = Vec::new();
        self.names(&mut head, false);
        write_chunk(
            &mut head,
            &Chunk::Clock {
                tsc: clock_now.0,
                since_start_ns: clock_now.1,
                unix_ns: clock_now.2,
            },
        );
        if !self.put(&head) {
            // What the events name must be there: past the bound rather than without it.
            self.append(&head);
        }
        // Then the events in time order (the rings are drained one after another, so a free of
        // an address and the next allocation that received it may be drained in either order),
        // in pieces small beside the bound: each piece goes whole into the current segment, or
        // into a new one that restates what was live before it ([`Self::put`]), so that neither
        // segment passes half the bound and the live sets follow the pieces in order.
        let mut all: Vec<(u32, Raw)> = batches
            .iter()
            .flat_map(|(thread, events)| events.iter().map(|e| (*thread, *e)))
            .collect();
        all.sort_by_key(|(_, e)| e.tsc);
        // Phases go apart, in their own chunks, ahead of this drain's allocations (a reader
        // finds them without decoding every event; each keeps its moment).
        // A program that marked no phase yet keeps its events as they are (no pass over them).
        let (phases, all): (Events, Events) = if crate::recorder::phases_seen() {
            all.into_iter()
                .partition(|(_, e)| Action::of(e.kind).is_some_and(Action::is_phase))
        } else {
            (Vec::new(), all)
        };
        let piece_events = (self.bound / 2 / 64 / std::mem::size_of::<Raw>() as u64)
            .clamp(1 << 10, 1 << 16) as usize;
        let mut let_go: Vec<(u64, u64, u64)> = self.write_phases(&phases).into_iter().collect();
        for part in all.chunks(piece_events) {
            let mut buf = Vec::new();
            for (thread, events) in by_thread(part) {
                write_chunk(&mut buf, &Chunk::Events { thread, events });
            }
            if self.put(&buf) {
                if self.stopped.is_none() {
                    self.events += part.len() as u64;
                }
                for (thread, e) in part {
                    self.follow.follow(*thread, e);
                }
            } else if let (Some(first), Some(last)) = (part.first(), part.last()) {
                // Not even a new segment holds it (what it restates takes the room): let go,
                // and said as lost, in the file too.
                self.note_lost(part.len() as u64, first.1.tsc, last.1.tsc);
                let_go.push((part.len() as u64, first.1.tsc, last.1.tsc));
                for (thread, e) in part {
                    self.follow.follow(*thread, e);
                }
            }
        }
        // A checkpoint every so many events: a reader reaches any moment from the one before.
        if self.follow.due() && self.stopped.is_none() {
            let mut buf = Vec::new();
            write_chunk(&mut buf, &self.follow.checkpoint());
            if self.put(&buf) {
                self.follow.checkpointed();
            } else {
                self.follow.postpone();
            }
        }
        let mut tail = Vec::new();
        for &(count, first_tsc, last_tsc) in lost.iter().chain(&let_go) {
            write_chunk(
                &mut tail,
                &Chunk::Dropped {
                    count,
                    first_tsc,
                    last_tsc,
                },
            );
        }
        if end {
            write_chunk(&mut tail, &Chunk::End { tsc: clock_now.0 });
        }
        if !self.put(&tail) {
            // The losses and the end are a few bytes each: past the bound rather than unsaid.
            self.append(&tail);
        }
    }

    /// Writes a drain's phase events in chunks of their own, before its allocations; when not
    /// even a new segment holds them, they are let go and said lost: (count, first, last tsc).
    fn write_phases(&mut self, phases: &[(u32, Raw)]) -> Option<(u64, u64, u64)> {
        let (first, last) = (phases.first()?.1.tsc, phases.last()?.1.tsc);
        let mut buf = Vec::new();
        for (thread, events) in by_thread(phases) {
            write_chunk(&mut buf, &Chunk::Phases { thread, events });
        }
        if self.put(&buf) {
            return None;
        }
        self.note_lost(phases.len() as u64, first, last);
        Some((phases.len() as u64, first, last))
    }

    /// Appends `buf` (whole chunks) to the current segment, after starting a new one when it
    /// would take the current one past half the bound; false when it fits in neither (a new
    /// segment's restatement leaves it no room): it is not written.
    fn put(&mut self, buf: &[u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        let half = self.bound / 2;
        let len = buf.len() as u64;
        if self.seg_bytes + len > half && self.seg_bytes > 0 {
            // A segment that holds only its own beginning gains nothing from another.
            if self.seg_bytes > self.seg_begin_bytes {
                self.rotate();
            }
            if self.seg_bytes + len > half {
                return false;
            }
        }
        self.append(buf);
        true
    }

    fn note_lost(&mut self, count: u64, a: u64, b: u64) {
        let (from_ms, to_ms) = (self.ms(a), self.ms(b));
        let full = self.lost.len() >= MAX_LOST_WINDOWS;
        match self.lost.last_mut() {
            Some(l) if full => {
                l.0 += count;
                l.2 = l.2.max(to_ms);
            }
            _ => self.lost.push((count, from_ms, to_ms)),
        }
    }

    /// A time-stamp-counter reading in ms since the start, between the first and latest clock.
    fn ms(&self, tsc: u64) -> u64 {
        let (t0, n0, _) = first();
        let (t1, n1, _) = self.last_clock;
        if t1 <= t0 {
            return n1 / 1_000_000;
        }
        let ns = n0 as f64 + (tsc as f64 - t0 as f64) * (n1 as f64 - n0 as f64) / (t1 - t0) as f64;
        (ns.max(0.0) / 1e6) as u64
    }

    /// Modules, Python code, stacks and phase names not yet written (all of them with `all`, for a new
    /// segment).
    fn names(&mut self, buf: &mut Vec<u8>, all: bool) {
        if all {
            self.stacks_done = 0;
            self.codes_done = 0;
            self.names_done = 0;
            self.modules_done.clear();
        }
        let (names, next) = crate::recorder::names::since(self.names_done);
        for (id, text) in names {
            write_chunk(buf, &Chunk::Name { id, text });
        }
        self.names_done = next;
        let stacks = crate::stack::stacks_since(self.stacks_done);
        let codes_now = crate::stack::python::code_count();
        if !stacks.is_empty() {
            for m in crate::stack::modules() {
                if self.modules_done.insert((m.start, m.path.clone())) {
                    write_chunk(
                        buf,
                        &Chunk::Module {
                            start: m.start,
                            end: m.end,
                            bias: m.base,
                            path: m.path,
                            build_id: m.build_id.unwrap_or_default(),
                        },
                    );
                }
            }
        }
        if codes_now > self.codes_done {
            for c in crate::stack::python::codes()
                .into_iter()
                .skip(self.codes_done as usize)
            {
                write_chunk(
                    buf,
                    &Chunk::Code {
                        id: c.id(),
                        file: c.file.to_string(),
                        function: c.function.to_string(),
                    },
                );
                self.codes_done += 1;
            }
        }
        for (id, words) in stacks {
            write_chunk(buf, &Chunk::Stack { id, frames: words });
            self.stacks_done = self.stacks_done.max(id + 1);
        }
    }

    fn append(&mut self, buf: &[u8]) {
        let Some(f) = self.file.as_mut() else { return };
        match f.write_all(buf) {
            Ok(()) => self.seg_bytes += buf.len() as u64,
            Err(e) => {
                // What was written of these chunks goes: the file ends at a whole chunk.
                let _ = f.set_len(self.seg_bytes);
                self.stop(format!("writing {} failed: {e}", self.path.display()))
            }
        }
    }

    fn stop(&mut self, why: String) {
        crate::process::diag::log(|| format!("the history stops: {why}"));
        crate::process::faults::record(format!("history: {why}"));
        self.stopped = Some(why);
        self.file = None;
    }

    /// Creates the first segment; false (and the history stopped) when it cannot.
    fn open(&mut self) -> bool {
        let report = crate::writer::report_path();
        let path = history_path(&report, 0);
        // The report's name, numbered as reports are when another process of the run has it.
        let mut file = create(&path).map(|f| (f, path.clone()));
        for n in 1..MAX_NUMBERED {
            match &file {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let numbered = history_path(&report, n);
                    file = create(&numbered).map(|f| (f, numbered));
                }
                _ => break,
            }
        }
        match file {
            Ok((f, path)) => {
                self.current_id = file_id(&f);
                self.file = Some(f);
                self.path = path;
                self.seg_start_ns = first().1;
                self.begin_segment(false);
                true
            }
            Err(e) => {
                self.stop(format!("{} could not be created: {e}", path.display()));
                false
            }
        }
    }

    /// Writes a segment's beginning: header, first clock, and for a later segment everything
    /// named so far and what is live.
    fn begin_segment(&mut self, restate: bool) {
        let (start_unix, _) = clock::start_ns();
        let mut buf = Header {
            version: VERSION,
            pid: crate::process::identity::pid(),
            start_unix_ns: start_unix,
            segment: self.segment,
            run: run_tag(),
        }
        .encode()
        .to_vec();
        let (tsc, since, unix) = first();
        write_chunk(
            &mut buf,
            &Chunk::Clock {
                tsc,
                since_start_ns: since,
                unix_ns: unix,
            },
        );
        if restate {
            let (tsc, since, unix) = self.last_clock;
            write_chunk(
                &mut buf,
                &Chunk::Clock {
                    tsc,
                    since_start_ns: since,
                    unix_ns: unix,
                },
            );
            self.names(&mut buf, true);
            self.follow.begin_segment();
            let live = self.follow.live();
            for part in live.chunks(1 << 16) {
                write_chunk(
                    &mut buf,
                    &Chunk::Live {
                        events: part.to_vec(),
                    },
                );
            }
        }
        self.seg_bytes = 0;
        self.append(&buf);
        self.seg_begin_bytes = self.seg_bytes;
    }

    /// Starts a new segment: the current one becomes `NAME.history.1`. Only this writer's own
    /// files are renamed or removed: when `NAME.history.1` is a file this process did not make
    /// (planted there, or another process's), the current segment cannot become it, so it is let
    /// go (counted and said) rather than renamed over that file or silently deleted.
    fn rotate(&mut self) {
        let prev = previous(&self.path);
        let had_prev = self.prev_bytes > 0;
        let ours = |id: Option<(u64, u64)>, p: &Path| id.is_some() && path_id(p) == id;
        if !ours(self.current_id, &self.path) {
            // The name no longer holds this writer's file: nothing there is touched.
            self.stop(format!(
                "{} was replaced by another file while it was written",
                self.path.display()
            ));
            return;
        }
        // This writer's own older segment goes first (it is let go); anything else at that name
        // stays.
        if had_prev && ours(self.prev_id, &prev) {
            let _ = std::fs::remove_file(&prev);
        }
        if had_prev {
            self.let_go += 1;
        }
        match crate::writer::file::rename_noreplace(&self.path, &prev) {
            Ok(()) => {
                self.prev_bytes = self.seg_bytes;
                self.prev_id = self.current_id;
            }
            Err(e) => {
                // The segment cannot be kept under its older name: it is let go, and said.
                let _ = std::fs::remove_file(&self.path);
                if self.seg_bytes > 0 {
                    self.let_go += 1;
                }
                self.prev_bytes = 0;
                self.prev_id = None;
                let why = format!(
                    "{} could not take the older segment ({e}): the segment before {} ms was let go",
                    prev.display(),
                    self.last_clock.1 / 1_000_000
                );
                crate::process::diag::log(|| format!("the history: {why}"));
                crate::process::faults::record(format!("history: {why}"));
            }
        }
        self.prev_start_ns = self.seg_start_ns;
        self.seg_start_ns = self.last_clock.1;
        self.segment += 1;
        match create(&self.path) {
            Ok(f) => {
                self.current_id = file_id(&f);
                self.file = Some(f);
                self.begin_segment(true);
            }
            Err(e) => self.stop(format!(
                "a new segment {} could not be created: {e}",
                self.path.display()
            )),
        }
    }

    /// What the report says of the history ([`crate::recorder::Status`]).
    fn status(&self) -> crate::recorder::Status {
        let mut files = Vec::new();
        if self.prev_bytes > 0 {
            files.push(previous(&self.path));
        }
        if !self.path.as_os_str().is_empty() && (self.file.is_some() || self.seg_bytes > 0) {
            files.push(self.path.clone());
        }
        crate::recorder::Status {
            files,
            events: self.events,
            bytes: self.seg_bytes + self.prev_bytes,
            bound: self.bound,
            let_go: self.let_go,
            begins_ms: if self.let_go > 0 {
                self.prev_start_ns / 1_000_000
            } else {
                0
            },
            lost: self.lost.clone(),
            stopped: self.stopped.clone(),
        }
    }
}

/// How many numbered names a history tries when the first is another process's of its run.
const MAX_NUMBERED: u32 = 1000;

/// `NAME.history` for the report `NAME.json` (any other report name gets `.history` added),
/// `NAME.N.history` for `n` > 0.
fn history_path(report: &Path, n: u32) -> PathBuf {
    let name = report
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cuguard".into());
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    let file = if n == 0 {
        format!("{stem}.history")
    } else {
        format!("{stem}.{n}.history")
    };
    report.with_file_name(file)
}

/// This process's run tag for the header ([`cuguard_history::run_tag`]), 0 outside a run.
fn run_tag() -> u32 {
    crate::config::get()
        .run_id
        .as_deref()
        .map_or(0, cuguard_history::run_tag)
}

fn previous(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".1");
    PathBuf::from(p)
}

/// Creates `path` exclusively, with the report's mode (`CUGUARD_REPORT_MODE`, 0600 by default);
/// a history file there of this user's of an earlier run whose writer no longer runs is removed
/// first, with its older segment.
fn create(path: &Path) -> std::io::Result<File> {
    let mode = crate::config::get().report_mode;
    match cuguard_files::create_new(path, mode) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && stale(path) => {
            let _ = std::fs::remove_file(previous(path));
            std::fs::remove_file(path)?;
            cuguard_files::create_new(path, mode)
        }
        other => other,
    }
}

/// Whether `path` is this user's regular history file of an earlier process that no longer
/// runs, and not of this run (a run's processes each keep theirs). A history whose writer still
/// runs is never stale, whatever run it is of: concurrent runs given one report name each keep
/// their own.
fn stale(path: &Path) -> bool {
    use std::io::Read as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    else {
        return false;
    };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    match f.metadata() {
        Ok(m) if m.is_file() && m.uid() == uid => {}
        _ => return false,
    }
    let mut head = [0u8; cuguard_history::HEADER_LEN];
    if f.read_exact(&mut head).is_err() {
        return false;
    }
    let Ok(h) = Header::decode(&head) else {
        return false;
    };
    if h.pid == crate::process::identity::pid() {
        // This pid's earlier owner (the pid was reused): stale; this very process: never.
        return h.start_unix_ns != clock::start_ns().0;
    }
    let mine = run_tag();
    if mine != 0 && h.run == mine {
        return false;
    }
    // SAFETY: kill with signal 0 only checks whether the process exists.
    let r = unsafe { libc::kill(h.pid as libc::pid_t, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The (device, inode) of an open file.
fn file_id(f: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

/// The (device, inode) of what `path` names, without following a link.
fn path_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| (m.dev(), m.ino()))
}

/// In the child of a fork: a fresh writer (the parent's lock may be held, its file is the
/// parent's).
pub fn reset_after_fork() {
    crate::process::global::replace(&WRITER, Mutex::new(None));
    RUNNING.store(false, Ordering::Release);
}
