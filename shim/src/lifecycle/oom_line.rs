//! The one stderr line at a process's first refusal for lack of memory (`crate::hooks`'s
//! out-of-memory record): where it was asked, how much, what was live, what held the most, what
//! other processes held where NVML listed any, and the card's verdict. Naming the stacks can
//! take long the first time (the binaries' debug information is read: 105–121 ms measured,
//! `docs/benchmarks.md`), so the refused call only marks the line due ([`pending`]); the
//! cuguard thread says it when it wakes for the refusal, or the final report does first,
//! whichever comes first ([`say_pending`]).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::tracker::NONE;
use crate::tracker::ooms::{Oom, RefusedBy};

/// Where the first refusal's line is: [`UNSAID`], [`PENDING`] (to be said), [`SAYING`] (a
/// thread is naming its stacks) or [`SAID`].
static LINE: AtomicU8 = AtomicU8::new(UNSAID);
const UNSAID: u8 = 0;
const PENDING: u8 = 1;
const SAYING: u8 = 2;
const SAID: u8 = 3;

/// Says the first refusal's line, if it is still to be said: on the cuguard thread when it
/// wakes for the refusal, or at the final report, whichever comes first. With `wait` (the final
/// report), a line another thread is saying is waited for (up to 5 s), so that it comes before
/// the summary line and before the process ends.
pub fn say_pending(wait: bool) {
    if LINE
        .compare_exchange(PENDING, SAYING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        if let Some(t) = crate::tracker::if_any() {
            // A driver's refusal inside a framework's allocator that then refused the request
            // itself: the framework's record explains it. Where a framework's observer is
            // registered, a driver's refusal's line waits for it (its record wakes this thread
            // again), or for the final report (the framework may have recovered).
            let list = t.ooms.snapshot().0;
            let first = list.iter().find(|o| o.within.is_none()).or(list.first());
            if !wait
                && crate::tracker::ooms::framework_watched()
                && first.is_some_and(|o| o.refused_by == RefusedBy::Driver)
            {
                LINE.store(PENDING, Ordering::Release);
                return;
            }
            if let Some(first) = first {
                say(first);
            }
        }
        LINE.store(SAID, Ordering::Release);
        return;
    }
    if wait {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while LINE.load(Ordering::Acquire) == SAYING && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// The first refusal was recorded: its line is due, said by the cuguard thread when
/// `reporter_runs`, else now.
pub fn pending(reporter_runs: bool) {
    LINE.store(PENDING, Ordering::Release);
    if !reporter_runs {
        say_pending(false);
    }
}

/// The one stderr line: where it was asked, how much, what was live, what held the most, what
/// other processes held (unless the verdict says it), and the verdict.
fn say(oom: &Oom) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let top: Vec<(u32, u64)> = oom.stacks.iter().take(3).map(|s| (s.0, s.1)).collect();
    let mut ids: Vec<u32> = vec![oom.stack];
    ids.extend(top.iter().map(|t| t.0));
    let names = crate::writer::stacks::sites_now(&ids);
    let at = names.first().cloned().flatten();
    let human = crate::writer::human_bytes;
    let mut line = format!(
        "out of memory{} asking {} ({})",
        at.map(|s| format!(" at {s}")).unwrap_or_default(),
        human(oom.size),
        oom.api
    );
    line.push_str(&format!(
        "; {} live",
        human(cuguard_format::verdict::live_outside_idle(
            oom.live_bytes,
            &oom.idle
        ))
    ));
    let parts: Vec<String> = top
        .iter()
        .zip(names.iter().skip(1))
        .map(|((id, bytes), name)| {
            let name = match (name, *id) {
                (Some(n), _) => n.clone(),
                (None, NONE) => "(no stack)".into(),
                (None, id) => format!("stack {id}"),
            };
            format!("{name} {}", human(*bytes))
        })
        .collect();
    if !parts.is_empty() {
        line.push_str(&format!(", top: {}", parts.join(", ")));
    }
    match oom.refused_by {
        RefusedBy::PoolLimit => line.push_str(" (CUGUARD_POOL_LIMIT)"),
        RefusedBy::Limit => line.push_str(" (CUGUARD_LIMIT)"),
        RefusedBy::Framework(f) => line.push_str(&format!(" ({})", f.words)),
        RefusedBy::Driver => {}
    }
    if let Ok((_, held)) = &oom.others
        && *held > 0
        && oom.verdict.action != cuguard_format::verdict::OTHER_PROCESSES
    {
        line.push_str(&format!("; other processes hold {}", human(*held)));
    }
    if oom.verdict.action != "unknown" {
        line.push_str(&format!("; {}", oom.verdict.text));
    }
    crate::process::diag::warn(&line);
}
