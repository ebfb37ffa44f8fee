//! Clocks, the process's start and thread ids, cheap enough for the allocation path.

use std::sync::OnceLock;

/// When the shim started in this process: (Unix ns, monotonic ns). Taken when the settings are
/// read at load ([`crate::config`]), or at the first use of a clock if that came first.
static START: OnceLock<(u64, u64)> = OnceLock::new();

/// The shim's start in this process (Unix milliseconds, monotonic nanoseconds), taken now if it
/// was not yet.
pub fn start() -> (u64, u64) {
    let (unix_ns, mono) = start_ns();
    (unix_ns / 1_000_000, mono)
}

/// The shim's start in this process (Unix nanoseconds, monotonic nanoseconds), taken now if it
/// was not yet. Once taken, reading it is one load (async-signal-safe).
pub fn start_ns() -> (u64, u64) {
    *START.get_or_init(|| (read(libc::CLOCK_REALTIME), monotonic_ns()))
}

/// Nanoseconds on the monotonic clock.
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// The moment of a record that `cuguard summary --at` is asked about (a peak's breakdown, a
/// refusal, an event): milliseconds since the start on the precise monotonic clock, rounded up.
/// The history's times come from the same clock (its clock pairs), so every event before the
/// record reads at or before this moment, and `--at` at it finds what the record says. (The
/// coarse clock below lags by up to a tick, 4 ms on these machines: `--at` at its reading could
/// come before the very allocation that made a peak.) For cold paths: about 20 ns.
pub fn moment_ms() -> u64 {
    monotonic_ns().saturating_sub(start().1).div_ceil(1_000_000)
}

/// [`moment_ms`] in microseconds, rounded up: a moment `--at` reads back inside a peak that
/// lasted less than a millisecond (the millisecond rounded up can come after it ended).
pub fn moment_us() -> u64 {
    monotonic_ns().saturating_sub(start().1).div_ceil(1_000)
}

/// Milliseconds since the shim was loaded, from the coarse monotonic clock (a few ns to read).
pub fn since_start_ms() -> u64 {
    let now = read(libc::CLOCK_MONOTONIC_COARSE);
    now.saturating_sub(start().1) / 1_000_000
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    read(libc::CLOCK_REALTIME) / 1_000_000
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter; clock_gettime has no other effect.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's kernel thread id, cached per thread ([`super::local`]).
#[inline]
pub fn thread_id() -> u32 {
    thread_id_in(super::local::get())
}

/// [`thread_id`] of the thread whose words `l` are (already looked up: see [`super::local`]).
#[inline(always)]
pub fn thread_id_in(l: Option<&super::local::Local>) -> u32 {
    let Some(l) = l else {
        return gettid();
    };
    let v = l.tid.get();
    if v != 0 {
        return v;
    }
    let v = gettid();
    l.tid.set(v);
    v
}

/// Forgets the cached thread id; the child of a fork calls this, since its one thread has a new id.
pub fn reset_thread_id() {
    if let Some(l) = super::local::get() {
        l.tid.set(0);
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}
