//! Whether the process a page names still runs, and when it started, from `kill(pid, 0)` and
//! `/proc/PID/stat`.

use std::path::Path;

/// What the system says of a pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// A process with that pid runs (or is stopped). `start_unix_ms` is when it started, in
    /// milliseconds since the Unix epoch, when `/proc` tells (to about a clock tick, 10 ms).
    Running {
        /// When the process now holding the pid started.
        start_unix_ms: Option<u64>,
    },
    /// No process has that pid, or only a zombie (it has ended and will write no more).
    Gone,
}

/// Whether `pid` runs, and since when. A pid that no process can have (0, or beyond
/// `i32::MAX`) is [`Liveness::Gone`]: it is never passed to `kill`, where 0 and negative
/// numbers name process groups.
pub fn probe(pid: u32) -> Liveness {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return Liveness::Gone;
    };
    if raw <= 0 {
        return Liveness::Gone;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks that the pid exists (and
    // whether we may signal it). `raw` is positive, so it names one process, not a group.
    let exists = unsafe { libc::kill(raw, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return Liveness::Gone;
    }
    match read_stat(Path::new(&format!("/proc/{pid}/stat"))) {
        Some(Stat { zombie: true, .. }) => Liveness::Gone,
        Some(Stat { start_ticks, .. }) => Liveness::Running {
            start_unix_ms: start_unix_ms(start_ticks),
        },
        // /proc hidden (hidepid) or the process ended between the two looks: trust kill.
        None => Liveness::Running {
            start_unix_ms: None,
        },
    }
}

struct Stat {
    zombie: bool,
    /// Field 22: the start time, in clock ticks after boot.
    start_ticks: u64,
}

fn read_stat(path: &Path) -> Option<Stat> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces and parentheses: the
    // fields after it start after the last ')'.
    let mut after = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = after.next()?;
    let start_ticks = after.nth(18)?.parse().ok()?;
    Some(Stat {
        zombie: matches!(state, "Z" | "X" | "x"),
        start_ticks,
    })
}

/// A process's start in Unix milliseconds, from its start in clock ticks after boot.
///
/// The kernel counts the start on the boot-time clock, so its age is `CLOCK_BOOTTIME` now minus
/// the start; its start is the real-time clock now minus that age. (`/proc/stat`'s `btime` is
/// whole seconds and drifts with clock adjustments; this does not.)
fn start_unix_ms(start_ticks: u64) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&hz| hz > 0)?;
    let start_ms = start_ticks.checked_mul(1000)? / hz;
    let age_ms = now_ms(libc::CLOCK_BOOTTIME).checked_sub(start_ms)?;
    now_ms(libc::CLOCK_REALTIME).checked_sub(age_ms)
}

fn now_ms(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter; clock_gettime writes only to it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms() -> u64 {
    now_ms(libc::CLOCK_REALTIME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_started_before_now() {
        let Liveness::Running {
            start_unix_ms: Some(start),
        } = probe(std::process::id())
        else {
            panic!("this process should be running with a start time");
        };
        let now = unix_ms();
        assert!(start <= now + 20, "start {start} after now {now}");
        // The test binary has not run for a day.
        assert!(now - start < 86_400_000, "start {start}, now {now}");
    }

    #[test]
    fn pids_that_name_groups_or_nothing_are_gone() {
        assert_eq!(probe(0), Liveness::Gone);
        assert_eq!(probe(u32::MAX), Liveness::Gone);
        assert_eq!(probe(i32::MAX as u32 + 1), Liveness::Gone);
    }

    #[test]
    fn a_reaped_child_is_gone_and_a_zombie_too() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: once it has exited it is a zombie.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while probe(pid) != Liveness::Gone {
            assert!(
                std::time::Instant::now() < deadline,
                "zombie not seen as gone"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert_eq!(probe(pid), Liveness::Gone);
    }

    #[test]
    fn stat_with_odd_command_names() {
        let dir = std::env::temp_dir().join(format!("cuguard-stat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stat");
        let mut fields = vec!["0"; 50];
        fields[0] = "S";
        fields[19] = "12345";
        std::fs::write(&path, format!("77 (a) b) (c) {}\n", fields.join(" "))).unwrap();
        let stat = read_stat(&path).unwrap();
        assert!(!stat.zombie);
        assert_eq!(stat.start_ticks, 12345);
        std::fs::write(&path, "77 (x) Z").unwrap();
        assert!(read_stat(&path).is_none(), "too short");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
