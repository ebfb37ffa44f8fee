//! The reports' turn: the final report, written once per process however it ends
//! ([`final_report`]), and the interim ones ([`interim_report`], [`with_writer_turn`]), one at a
//! time under the writer's turn (a lock a forked child resets).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{drain, page};
use crate::phase;
use crate::writer::{self, Occasion};

/// The thread id holding the writer's turn, or 0.
pub(super) static WRITER: AtomicU32 = AtomicU32::new(0);
/// The thread id writing the final report (0: none yet).
pub(super) static FINAL_WRITER: AtomicU32 = AtomicU32::new(0);

/// How long an exit waits for a report another thread is writing.
const WAIT_FOR_WRITER: Duration = Duration::from_secs(30);

fn tid() -> u32 {
    crate::process::clock::thread_id()
}

/// The writer's turn: reports are written one at a time. Released on drop.
struct Turn(bool);

impl Drop for Turn {
    fn drop(&mut self) {
        if self.0 {
            WRITER.store(0, Ordering::Release);
        }
    }
}

/// Waits (up to `max`) for the writer's turn. On timeout the caller goes ahead without it (the
/// holder is stuck; two writers use different temporary files).
fn writer_turn(max: Duration) -> Turn {
    let me = tid().max(1);
    let start = Instant::now();
    loop {
        match WRITER.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Turn(true),
            Err(holder) if holder == me => return Turn(false),
            Err(_) if start.elapsed() >= max => return Turn(false),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Writes the final report, once per process, if the process used the driver. A second caller
/// (another thread exiting, a fatal signal while exiting) waits for the first to finish, and a
/// terminating signal meanwhile is held until it is written ([`super::held`]), so that the
/// process does not end under a half-written report. Returns whether this call wrote it.
pub fn final_report(occasion: Occasion) -> bool {
    let Some(t) = crate::tracker::if_any() else {
        return false;
    };
    if !phase::begin_final() {
        wait_for_final();
        return false;
    }
    FINAL_WRITER.store(tid().max(1), Ordering::Release);
    // No give-back from another thread while the runtime and the driver tear down. A fatal
    // signal's report does not wait for the give-back thread's call in progress.
    let wait = occasion.signal.is_none();
    crate::guard::shield((), || crate::serving::giveback::stop_for_exit(wait));
    // Inside the shim while writing, so nothing the writing does is tracked. A thread whose
    // thread-locals are gone writes without it: tracking has stopped (`Writing`) anyway.
    let _guard = crate::guard::Guard::enter();
    // The first refusal's line, if the cuguard thread had not said it yet: before the summary
    // (waiting for the cuguard thread's, but not at a fatal signal), with the other processes
    // it had not listed yet (NVML is not called in a signal's handler).
    if wait {
        crate::guard::shield((), || t.ooms.fill_others());
    }
    crate::guard::shield((), || super::oom_line::say_pending(wait));
    {
        let _turn = writer_turn(WAIT_FOR_WRITER);
        crate::guard::shield((), drain::finish);
        writer::write_and_say(t, &occasion);
    }
    page::remove();
    phase::end_final();
    super::held::release(occasion.signal.is_some());
    true
}

pub(super) fn wait_for_final() {
    let writer = FINAL_WRITER.load(Ordering::Acquire);
    if writer == 0 || writer == tid() {
        return;
    }
    let start = Instant::now();
    while !phase::final_done() && start.elapsed() < WAIT_FOR_WRITER {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Writes an interim report (checkpoint, snapshot on request, or a signal report before the
/// program's own handler runs): tracking goes on. Skipped once the final report is claimed.
pub fn interim_report(occasion: Occasion) -> bool {
    let Some(t) = crate::tracker::if_any() else {
        return false;
    };
    if phase::final_claimed() {
        return false;
    }
    let _turn = writer_turn(WAIT_FOR_WRITER);
    if phase::final_claimed() {
        return false;
    }
    crate::guard::shield((), drain::drain_now);
    writer::write_and_say(t, &occasion).is_some()
}

/// Runs `f` under the writer's turn, for a report the in-process API asks for
/// ([`crate::api`]); `None` once the final report is claimed.
pub fn with_writer_turn<T>(f: impl FnOnce() -> T) -> Option<T> {
    if phase::final_claimed() {
        return None;
    }
    let _turn = writer_turn(WAIT_FOR_WRITER);
    if phase::final_claimed() {
        return None;
    }
    crate::guard::shield((), drain::drain_now);
    Some(f())
}
