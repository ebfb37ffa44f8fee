//! The program's phases, read from a history: every NVTX range (pushed and popped on a thread,
//! or started and ended anywhere) and every `cuguard.phase`, as a [`Phase`] with its name, its
//! thread, when it began and ended, its payload, and which occurrence of its name it is.
//!
//! The shim records a phase's beginning and end as [`Action::PhaseBegin`] and
//! [`Action::PhaseEnd`] events in [`crate::Chunk::Phases`] chunks, its names in
//! [`crate::Chunk::Name`] chunks; [`Phases::pair`] matches them. What does not pair is counted,
//! never guessed: a pop on a thread with nothing pushed, an end of a range never started, a
//! range still open when the history ends (its `end_ns` is `None`).
//!
//! ```
//! use cuguard_history::{Action, MemoryKind, Raw, kind};
//! use cuguard_history::phases::{PUSHED, Phases};
//! let ev = |tsc, action, key, name| Raw { tsc, addr: key, size: name, stack: u32::MAX, context: u16::MAX, kind: kind(action, MemoryKind::Device), device: 0, stream: 0 };
//! let events = vec![
//!     (1, ev(10, Action::PhaseBegin, PUSHED, 1)),
//!     (1, ev(20, Action::PhaseBegin, PUSHED, 2)),
//!     (1, ev(30, Action::PhaseEnd, PUSHED, 0)),
//!     (1, ev(40, Action::PhaseEnd, PUSHED, 0)),
//!     (1, ev(50, Action::PhaseEnd, PUSHED, 0)),
//! ];
//! let names = [(1, "step".to_string()), (2, "forward".to_string())].into_iter().collect();
//! let p = Phases::pair(events, names, |tsc| tsc);
//! assert_eq!(p.list.len(), 2);
//! assert_eq!((p.name(&p.list[0]), p.list[0].start_ns, p.list[0].end_ns), ("step", 10, Some(40)));
//! assert_eq!((p.name(&p.list[1]), p.list[1].depth), ("forward", 1));
//! assert_eq!(p.odd.pops_without_push, 1);
//! ```

use std::collections::HashMap;

use crate::{Action, Raw};

/// The bit of a pushed range's key (`nvtxRangePush`: ended by its thread's next pop in its
/// domain), or'ed with its domain's id; a started range's key (`nvtxRangeStart`) is its id,
/// below it.
pub const PUSHED: u64 = 1 << 63;

/// The most phase events a reader keeps: past them, phases are not read (and the reader says
/// so, [`Odd::unread`]).
pub const MAX_EVENTS: usize = 1 << 21;

/// One phase: one occurrence of a named range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phase {
    /// Its name's id ([`Phases::names`]).
    pub name: u32,
    /// Which occurrence of its name it is, counting from 1 in the order they began.
    pub occurrence: u32,
    /// The thread that began it.
    pub thread: u32,
    /// When it began and ended, nanoseconds since the process started; `None`: it never ended
    /// (still open when the history ends).
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    /// The range's own number (an NVTX payload), if it gave one.
    pub payload: Option<u64>,
    /// How many ranges of its thread were open around it (0: none).
    pub depth: u32,
    /// Whether it was a started range (`nvtxRangeStart`: it may end on any thread) rather than a
    /// pushed one.
    pub started: bool,
}

impl Phase {
    /// Whether `t_ns` falls in it.
    pub fn holds(&self, t_ns: u64) -> bool {
        self.start_ns <= t_ns && self.end_ns.is_none_or(|e| t_ns <= e)
    }
}

/// What did not pair, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Odd {
    /// Pops on a thread with no pushed range open.
    pub pops_without_push: u64,
    /// Ends of a range never started (or started before the kept history).
    pub ends_without_start: u64,
    /// Ranges still open when the history ends.
    pub never_ended: u64,
    /// Started ranges ended on another thread than the one that started them (allowed: said).
    pub ended_elsewhere: u64,
    /// Phase events past [`MAX_EVENTS`], not read.
    pub unread: u64,
}

impl Odd {
    /// Whether anything did not pair.
    pub fn any(&self) -> bool {
        self.pops_without_push + self.ends_without_start + self.never_ended + self.unread > 0
    }
}

/// The phases of a history.
#[derive(Clone, Debug, Default)]
pub struct Phases {
    /// By the moment each began.
    pub list: Vec<Phase>,
    /// Names by id.
    pub names: HashMap<u32, String>,
    pub odd: Odd,
}

impl Phases {
    /// Pairs phase events (with their threads, in any order: sorted here by moment) into
    /// phases; `ns` converts an event's tsc to nanoseconds since the start.
    pub fn pair(
        mut events: Vec<(u32, Raw)>,
        names: HashMap<u32, String>,
        ns: impl Fn(u64) -> u64,
    ) -> Phases {
        events.sort_by_key(|(_, e)| e.tsc);
        let mut out = Phases {
            names,
            ..Phases::default()
        };
        let mut pushed: HashMap<(u32, u64), Vec<usize>> = HashMap::new();
        let mut started: HashMap<u64, usize> = HashMap::new();
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for (thread, e) in events {
            let t = ns(e.tsc);
            match Action::of(e.kind) {
                Some(Action::PhaseBegin) => {
                    let name = u32::try_from(e.size).unwrap_or(u32::MAX);
                    let n = counts.entry(name).or_insert(0);
                    *n += 1;
                    let is_pushed = e.addr & PUSHED != 0;
                    let depth: usize = pushed
                        .iter()
                        .filter(|((th, _), _)| *th == thread)
                        .map(|(_, s)| s.len())
                        .sum();
                    out.list.push(Phase {
                        name,
                        occurrence: *n,
                        thread,
                        start_ns: t,
                        end_ns: None,
                        payload: e.stream.checked_sub(1),
                        depth: depth as u32,
                        started: !is_pushed,
                    });
                    let i = out.list.len() - 1;
                    if is_pushed {
                        pushed.entry((thread, e.addr)).or_default().push(i);
                    } else {
                        started.insert(e.addr, i);
                    }
                }
                Some(Action::PhaseEnd) if e.addr & PUSHED != 0 => {
                    match pushed.get_mut(&(thread, e.addr)).and_then(Vec::pop) {
                        Some(i) => out.list[i].end_ns = Some(t),
                        None => out.odd.pops_without_push += 1,
                    }
                }
                Some(Action::PhaseEnd) => match started.remove(&e.addr) {
                    Some(i) => {
                        out.list[i].end_ns = Some(t);
                        if out.list[i].thread != thread {
                            out.odd.ended_elsewhere += 1;
                        }
                    }
                    None => out.odd.ends_without_start += 1,
                },
                _ => {}
            }
        }
        out.odd.never_ended = out.list.iter().filter(|p| p.end_ns.is_none()).count() as u64;
        out
    }

    /// A phase's name (`?` for an id no chunk named).
    pub fn name(&self, p: &Phase) -> &str {
        self.names.get(&p.name).map_or("?", String::as_str)
    }

    /// The occurrences of `name`, in the order they began.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Phase> + 'a {
        self.list.iter().filter(move |p| self.name(p) == name)
    }

    /// The occurrence `n` of `name`: the one whose payload is `n` where the name's ranges
    /// carry payloads, else the `n`th (from 1); with no `n`, the only one, or the first.
    pub fn find(&self, name: &str, n: Option<u64>) -> Option<&Phase> {
        let named = |p: &&Phase| self.name(p) == name;
        let Some(n) = n else {
            return self.list.iter().find(named);
        };
        if self.list.iter().filter(named).any(|p| p.payload.is_some()) {
            return self
                .list
                .iter()
                .filter(named)
                .find(|p| p.payload == Some(n));
        }
        self.list
            .iter()
            .filter(named)
            .find(|p| u64::from(p.occurrence) == n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryKind, kind};

    fn ev(tsc: u64, action: Action, key: u64, name: u64, payload: Option<u64>) -> Raw {
        Raw {
            tsc,
            addr: key,
            size: name,
            stack: u32::MAX,
            context: u16::MAX,
            kind: kind(action, MemoryKind::Device),
            device: 0,
            stream: payload.map_or(0, |p| p + 1),
        }
    }

    fn names() -> HashMap<u32, String> {
        [(1, "step".to_string()), (2, "load".to_string())]
            .into_iter()
            .collect()
    }

    #[test]
    fn occurrences_count_from_one_and_payloads_choose_where_given() {
        let events = (0..3)
            .flat_map(|i| {
                [
                    (7, ev(i * 10, Action::PhaseBegin, PUSHED, 1, Some(100 + i))),
                    (7, ev(i * 10 + 5, Action::PhaseEnd, PUSHED, 0, None)),
                ]
            })
            .collect();
        let p = Phases::pair(events, names(), |t| t);
        assert_eq!(p.list.len(), 3);
        assert_eq!(p.list[2].occurrence, 3);
        assert_eq!(p.find("step", Some(101)).map(|p| p.start_ns), Some(10));
        // With payloads, a number is a payload, not an occurrence.
        assert_eq!(p.find("step", Some(2)), None);
        assert_eq!(p.find("step", None).map(|p| p.start_ns), Some(0));
        assert!(!p.odd.any());
    }

    #[test]
    fn started_ranges_pair_by_key_across_threads_and_what_does_not_pair_is_counted() {
        let events = vec![
            (1, ev(10, Action::PhaseBegin, 77, 2, None)),
            (2, ev(20, Action::PhaseEnd, 77, 0, None)),
            (2, ev(30, Action::PhaseEnd, 78, 0, None)),
            (3, ev(40, Action::PhaseBegin, PUSHED, 1, None)),
            (3, ev(50, Action::PhaseEnd, PUSHED, 0, None)),
            (3, ev(60, Action::PhaseEnd, PUSHED, 0, None)),
            (4, ev(70, Action::PhaseBegin, PUSHED, 1, None)),
        ];
        let p = Phases::pair(events, names(), |t| t);
        assert_eq!(p.list.len(), 3);
        assert_eq!((p.list[0].end_ns, p.list[0].started), (Some(20), true));
        assert_eq!(
            p.odd,
            Odd {
                pops_without_push: 1,
                ends_without_start: 1,
                never_ended: 1,
                ended_elsewhere: 1,
                unread: 0,
            }
        );
        assert_eq!(p.find("step", Some(2)).map(|p| p.end_ns), Some(None));
    }

    #[test]
    fn a_history_file_carries_its_phases_and_names_to_the_reader() {
        use crate::bounded::History;
        use crate::{Chunk, Header, write_chunk};
        let mut file = Header {
            version: crate::VERSION,
            pid: 7,
            start_unix_ns: 0,
            segment: 0,
            run: 0,
        }
        .encode()
        .to_vec();
        for tsc in [0, 1_000] {
            let clock = Chunk::Clock {
                tsc,
                since_start_ns: tsc * 2,
                unix_ns: tsc,
            };
            write_chunk(&mut file, &clock);
        }
        let name = |id: u32, text: &str| Chunk::Name {
            id,
            text: text.into(),
        };
        write_chunk(&mut file, &name(1, "step"));
        write_chunk(&mut file, &name(2, "load"));
        let events = vec![
            ev(100, Action::PhaseBegin, PUSHED, 1, Some(12)),
            ev(200, Action::PhaseBegin, 5, 2, None),
            ev(300, Action::PhaseEnd, PUSHED, 0, None),
        ];
        write_chunk(&mut file, &Chunk::Phases { thread: 9, events });
        write_chunk(&mut file, &Chunk::End { tsc: 1_000 });
        let h = History::open(vec![&file[..]]).unwrap();
        let p = &h.meta().phases;
        assert_eq!(p.list.len(), 2);
        let step = p.find("step", Some(12)).unwrap();
        assert_eq!(
            (step.thread, step.start_ns, step.end_ns, step.payload),
            (9, 200, Some(600), Some(12))
        );
        assert_eq!(p.find("load", None).unwrap().end_ns, None);
        assert_eq!(p.odd.never_ended, 1);
        // The allocations' reader is not disturbed by them.
        assert_eq!(h.replay().unwrap().blocks.len(), 0);
    }
}
