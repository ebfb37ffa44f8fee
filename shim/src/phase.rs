//! The shim's life in a process, as one state machine: every phase, and every transition between
//! phases, is here. The rest of the shim asks [`tracking`] (should a hook record what it sees?)
//! and [`get`]; [`crate::lifecycle`] and [`crate::guard`] make the transitions happen.
//!
//! | phase         | what the shim does                                                   | reached from                          | by                          |
//! |---------------|----------------------------------------------------------------------|---------------------------------------|-----------------------------|
//! | `Loading`     | tracks; nothing registered, no thread, no signal handler             | (start)                               | the library loading         |
//! | `Inert`       | forwards every call untouched; tracks and writes nothing             | `Loading`                             | [`make_inert`] (`CUGUARD_DISABLE=1`) |
//! | `Armed`       | tracks; exit handlers, the cuguard thread and signal handlers are in place | `Loading`, `ForkedChild`        | [`arm`] (first tracked allocation) |
//! | `Writing`     | the final report is being written; tracking has stopped               | `Loading`, `Armed`, `ForkedChild`, `Broken` | [`begin_final`] (exit, signal, unload) |
//! | `Final`       | the final report is written; forwards only                            | `Writing`                             | [`end_final`]               |
//! | `ForkedChild` | tracks afresh in the child of a fork, until its first allocation arms it | any but `Inert` and `Broken`       | [`forked`] (the one atfork handler) |
//! | `Broken`      | the shim's own code failed: forwards only; the final report is still written, with the fault | `Loading`, `Armed`, `ForkedChild` | [`break_down`] (a caught panic) |
//!
//! Transitions are compare-and-swap on one atomic: two threads racing to arm, or to write the final
//! report, agree on one winner. `Inert` and `Broken` are kept across a fork.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// A phase of the shim's life in this process (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Loading = 0,
    Inert = 1,
    Armed = 2,
    Writing = 3,
    Final = 4,
    ForkedChild = 5,
    Broken = 6,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Loading,
            1 => Phase::Inert,
            2 => Phase::Armed,
            3 => Phase::Writing,
            4 => Phase::Final,
            5 => Phase::ForkedChild,
            _ => Phase::Broken,
        }
    }

    /// Whether hooks record what they see in this phase.
    pub fn tracks(self) -> bool {
        matches!(self, Phase::Loading | Phase::Armed | Phase::ForkedChild)
    }
}

static PHASE: AtomicU8 = AtomicU8::new(Phase::Loading as u8);

/// The current phase.
#[inline]
pub fn get() -> Phase {
    Phase::from_u8(PHASE.load(Ordering::Acquire))
}

/// Whether hooks record what they see now: one load.
#[inline]
pub fn tracking() -> bool {
    get().tracks()
}

/// Whether the shim stands in for driver entries at all (everything but `Inert`): the lookup
/// doors hand out nothing in an inert process.
#[inline]
pub fn substitutes() -> bool {
    get() != Phase::Inert
}

/// Moves from any of `from` to `to`; returns the phase it left, or `None` when the phase was none
/// of `from`.
fn transition(from: &[Phase], to: Phase) -> Option<Phase> {
    let mut now = PHASE.load(Ordering::Acquire);
    loop {
        let phase = Phase::from_u8(now);
        if !from.contains(&phase) {
            return None;
        }
        match PHASE.compare_exchange_weak(now, to as u8, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(phase),
            Err(actual) => now = actual,
        }
    }
}

/// `Loading → Inert`: `CUGUARD_DISABLE=1`, read with the configuration.
pub fn make_inert() {
    transition(&[Phase::Loading], Phase::Inert);
}

/// `Loading | ForkedChild → Armed`: returns true for the one call that armed this process, which
/// must then set up what `Armed` promises.
pub fn arm() -> bool {
    transition(&[Phase::Loading, Phase::ForkedChild], Phase::Armed).is_some()
}

/// Whether this process (or the forked child) is armed, or was before its final report.
pub fn armed() -> bool {
    get() == Phase::Armed
}

/// `Loading | Armed | ForkedChild | Broken → Writing`: claims the final report. Returns true for
/// the one caller that claimed it; false when it was claimed already (or the shim is inert).
pub fn begin_final() -> bool {
    transition(
        &[
            Phase::Loading,
            Phase::Armed,
            Phase::ForkedChild,
            Phase::Broken,
        ],
        Phase::Writing,
    )
    .is_some()
}

/// `Writing → Final`: the final report is written.
pub fn end_final() {
    transition(&[Phase::Writing], Phase::Final);
}

/// Whether the final report is claimed (being written, or written): interim reports stop then.
pub fn final_claimed() -> bool {
    matches!(get(), Phase::Writing | Phase::Final)
}

/// Whether the final report is written completely.
pub fn final_done() -> bool {
    get() == Phase::Final
}

/// `Loading | Armed | ForkedChild → Broken`: the shim's own code failed. Returns true the first
/// time, for the caller to say so once.
pub fn break_down() -> bool {
    transition(
        &[Phase::Loading, Phase::Armed, Phase::ForkedChild],
        Phase::Broken,
    )
    .is_some()
}

/// Whether the shim's own code has failed.
#[inline]
pub fn broken() -> bool {
    get() == Phase::Broken
}

/// In the child of a fork: every phase but `Inert` and `Broken` becomes `ForkedChild` (the
/// child owns none of the parent's allocations, and writes its own report).
pub fn forked() {
    let now = get();
    if !matches!(now, Phase::Inert | Phase::Broken) {
        PHASE.store(Phase::ForkedChild as u8, Ordering::Release);
    }
}

/// The library's destructor is running (the process is ending without `exit`'s handlers having
/// written the report): the driver may already be finalized and must not be called. A fact about
/// the image beside the phase, not a phase of its own.
static UNLOADING: AtomicBool = AtomicBool::new(false);

/// Marks the library's destructor as running.
pub fn set_unloading() {
    UNLOADING.store(true, Ordering::Relaxed);
}

/// Whether the library's destructor is running (see [`set_unloading`]).
pub fn unloading() -> bool {
    UNLOADING.load(Ordering::Relaxed)
}

#[cfg(test)]
pub(crate) fn set_for_test(p: Phase) {
    PHASE.store(p as u8, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table, walked in one test (the phase is process-wide).
    #[test]
    fn transitions_follow_the_table() {
        set_for_test(Phase::Loading);
        assert!(tracking() && substitutes());
        assert!(arm(), "Loading arms");
        assert!(!arm(), "only once");
        assert!(tracking() && armed());
        assert!(break_down());
        assert!(!break_down(), "said once");
        assert!(!tracking() && broken());
        forked();
        assert_eq!(get(), Phase::Broken, "kept across a fork");
        assert!(begin_final(), "a broken shim still writes its final report");
        assert!(!begin_final(), "claimed once");
        assert!(final_claimed() && !final_done() && !tracking());
        end_final();
        assert!(final_done());
        forked();
        assert_eq!(get(), Phase::ForkedChild, "a child starts over");
        assert!(tracking());
        assert!(arm(), "a child arms at its first allocation");

        set_for_test(Phase::Loading);
        make_inert();
        assert_eq!(get(), Phase::Inert);
        assert!(!tracking() && !substitutes());
        assert!(!arm() && !begin_final() && !break_down());
        forked();
        assert_eq!(get(), Phase::Inert, "kept across a fork");
        set_for_test(Phase::Loading);
    }
}
