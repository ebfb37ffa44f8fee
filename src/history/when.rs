//! When a user asks about a moment of a history: the moments a history knows ([`Moments`]:
//! its span, its peak, its first refusal, its phases), and the text a user gives for one
//! ([`parse_time`]: `12.5s`, `peak`, `phase:step#3`, ...) or for a window ([`parse_window`]).

use cuguard_history::replay::Replay;

use super::phases;
use super::{Opened, span_text};

/// The moments a history's times are read against ([`parse_time`]).
pub trait Moments {
    fn begins_ns(&self) -> u64;
    fn ends_ns(&self) -> u64;
    fn peak_ns(&self) -> u64;
    fn first_oom_ns(&self) -> Option<u64>;
    /// The program's phases.
    fn phases(&self) -> &cuguard_history::phases::Phases;
    /// The moment of the most live memory while `p` ran.
    fn phase_peak_ns(&self, p: &cuguard_history::phases::Phase) -> Result<u64, String>;
}

impl Moments for Replay {
    fn begins_ns(&self) -> u64 {
        self.begins_ns
    }
    fn ends_ns(&self) -> u64 {
        self.ends_ns
    }
    fn peak_ns(&self) -> u64 {
        self.peak(None).0
    }
    fn first_oom_ns(&self) -> Option<u64> {
        Replay::first_oom_ns(self)
    }
    fn phases(&self) -> &cuguard_history::phases::Phases {
        &self.phases
    }
    fn phase_peak_ns(&self, p: &cuguard_history::phases::Phase) -> Result<u64, String> {
        let end = p.end_ns.unwrap_or(self.ends_ns);
        Ok(phases::peak_between(self, p.start_ns, end))
    }
}

impl Moments for Opened {
    fn begins_ns(&self) -> u64 {
        self.meta().begins_ns
    }
    fn ends_ns(&self) -> u64 {
        self.meta().ends_ns
    }
    fn peak_ns(&self) -> u64 {
        self.history.peak().0
    }
    fn first_oom_ns(&self) -> Option<u64> {
        self.history.first_oom_ns()
    }
    fn phases(&self) -> &cuguard_history::phases::Phases {
        &self.meta().phases
    }
    fn phase_peak_ns(&self, p: &cuguard_history::phases::Phase) -> Result<u64, String> {
        phases::peak_in(self, p).map_err(|e| e.to_string())
    }
}

/// What a user gives for a moment, turned into nanoseconds since the start: `12.5s`, `840ms`,
/// `2m`, a plain number of seconds, `peak`, `oom` (the first), `end`, or `phase:NAME[#N]` (the
/// moment of that phase's peak).
pub fn parse_time(text: &str, replay: &impl Moments) -> Result<u64, String> {
    if let Some(asked) = phases::Asked::parse(text) {
        let p = asked?.find(replay.phases())?;
        return replay.phase_peak_ns(p);
    }
    let t = text.trim();
    let (begins_ns, ends_ns) = (replay.begins_ns(), replay.ends_ns());
    let ns = match t {
        "peak" => replay.peak_ns(),
        "end" => ends_ns,
        "oom" => replay.first_oom_ns().ok_or_else(|| {
            "no allocation was refused for lack of memory in this history".to_string()
        })?,
        _ => {
            let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
                (n, 1e6)
            } else if let Some(n) = t.strip_suffix("us") {
                (n, 1e3)
            } else if let Some(n) = t.strip_suffix('s') {
                (n, 1e9)
            } else if let Some(n) = t.strip_suffix('m') {
                (n, 60e9)
            } else {
                (t, 1e9)
            };
            let v: f64 = num.trim().parse().map_err(|_| {
                format!("{text:?} is not a time (12.5s, 840ms, 2m, peak, oom, end or phase:NAME#N)")
            })?;
            if v < 0.0 {
                return Err(format!(
                    "{text:?} is before the process started: times count from its start, and \
                     the history spans {} to {}",
                    span_text(begins_ns),
                    span_text(ends_ns)
                ));
            }
            if !v.is_finite() {
                return Err(format!(
                    "{text:?} is not a time (12.5s, 840ms, 2m, peak, oom or end)"
                ));
            }
            (v * scale).round() as u64
        }
    };
    if ns < begins_ns || ns > ends_ns {
        return Err(format!(
            "{text} is outside the history: it spans {} to {}",
            span_text(begins_ns),
            span_text(ends_ns)
        ));
    }
    Ok(ns)
}

/// A window a user gives (`--between`): two moments ([`parse_time`]), or one phase
/// (`phase:NAME[#N]`: from its beginning to its end). With the phase, for people (`step #3`).
pub fn parse_window(
    texts: &[String],
    replay: &impl Moments,
) -> Result<(u64, u64, Option<String>), String> {
    match texts {
        [one] => match phases::Asked::parse(one) {
            Some(asked) => {
                let p = asked?.find(replay.phases())?;
                let end = p.end_ns.unwrap_or(replay.ends_ns());
                Ok((p.start_ns, end, Some(phases::label(replay.phases(), p))))
            }
            None => Err(format!(
                "{one}: give two moments (--between 12s 14s) or one phase (--between phase:NAME#N)"
            )),
        },
        [a, b] => {
            let (from, to) = (parse_time(a, replay)?, parse_time(b, replay)?);
            if from > to {
                return Err(format!("{a} {b}: the first moment is after the second"));
            }
            Ok((from, to, None))
        }
        _ => {
            Err("give two moments (--between 12s 14s) or one phase (--between phase:NAME#N)".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay() -> Replay {
        Replay {
            begins_ns: 0,
            ends_ns: 3_200_000_000,
            ..Replay::default()
        }
    }

    #[test]
    fn times_read_as_people_write_them() {
        let r = replay();
        assert_eq!(parse_time("12.5ms", &r), Ok(12_500_000));
        assert_eq!(parse_time("1.25s", &r), Ok(1_250_000_000));
        assert_eq!(parse_time("2", &r), Ok(2_000_000_000));
        assert_eq!(parse_time(" 840ms ", &r), Ok(840_000_000));
        assert_eq!(parse_time("end", &r), Ok(3_200_000_000));
        assert_eq!(parse_time("peak", &r), Ok(0));
        assert_eq!(
            parse_time("99s", &r),
            Err("99s is outside the history: it spans 0 ms to 3.2 s".into())
        );
        assert!(
            parse_time("soon", &r)
                .unwrap_err()
                .contains("is not a time")
        );
        assert!(
            parse_time("-1s", &r)
                .unwrap_err()
                .starts_with("\"-1s\" is before the process started: times count from its start, and the history spans ")
        );
        assert!(parse_time("nan", &r).unwrap_err().contains("is not a time"));
        assert!(
            parse_time("oom", &r)
                .unwrap_err()
                .contains("no allocation was refused")
        );
    }
}
