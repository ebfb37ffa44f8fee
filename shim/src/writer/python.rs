//! The writer's `python` section of the report: where a Python program's code ended and what held each
//! allocation live then ([`crate::tracker::end`], marked by cuguard's Python bootstrap), or why
//! that end is not known.

use std::collections::{HashMap, HashSet};

use cuguard_format as format;
use cuguard_format::wire::device_ordinal;
use cuguard_format::{Addr, HeldClass};

use super::occasion::{Occasion, Reason, id, signal_name};
use crate::tracker::Record;
use crate::tracker::end::{self, Mark};

/// Why the end is not known though the bootstrap promised to mark it.
const NO_MARK: &str = "the program left without running its atexit handlers (os._exit, a \
     fatal signal, or an exit from a native thread): cuguard could not see where its code ended, \
     so this report only has what was live at exit";
/// Why the end is not known when the process left through `_exit` (`{}`: its status).
fn left_by_exit(status: i32) -> String {
    format!(
        "the program left through _exit({status}) (os._exit, or native code) without running its \
         atexit handlers, before cuguard's bootstrap could look: nothing was torn down, so what \
         was live at exit is what the program held, but held and lost are not told apart"
    )
}

/// Why the end is not known in a Python process where the bootstrap did not run, when
/// [`end::why_not`] (the bootstrap's hand-over) has no better reason.
const NO_BOOTSTRAP: &str = "cuguard's Python bootstrap did not run in this interpreter: \
     this report only has what was live at exit, after the interpreter's teardown";

/// The section for a report written for `occasion`, with the end's records already given their
/// dense order (`dense`, one per `mark.live` entry) and owners (`owner_of`). `live_now` is the
/// set of (address, raw order key) of the allocations still live as the report is written.
pub(super) fn section(
    occasion: &Occasion,
    mark: Option<&Mark>,
    dense: &[u64],
    owner_of: &HashMap<(u32, &'static str), String>,
    live_now: &HashSet<(u64, u64)>,
) -> Option<format::Python> {
    let Some(mark) = mark else {
        let last = matches!(occasion.reason, Reason::Exit | Reason::Signal);
        if !last {
            return None;
        }
        let why = if end::expected() {
            match occasion.signal {
                Some(sig) => format!(
                    "the process was ended by {} before its code ended",
                    signal_name(sig)
                ),
                None => match crate::process::leaving::exit_status() {
                    Some(status) => left_by_exit(status),
                    None => NO_MARK.to_string(),
                },
            }
        } else if let Some(why) = end::why_not() {
            why
        } else if python_present() {
            NO_BOOTSTRAP.to_string()
        } else {
            return None;
        };
        return Some(format::Python {
            end: format::PyEnd {
                recorded: false,
                why: Some(why),
                ..format::PyEnd::default()
            },
            view: None,
        });
    };
    let classes: HashMap<u64, &format::Classified> = mark
        .classification
        .iter()
        .flat_map(|c| c.allocations.iter())
        .map(|c| (c.address.0, c))
        .collect();
    let mut allocations: Vec<(u64, format::PyAllocation)> = mark
        .live
        .iter()
        .zip(dense)
        .map(|((address, rec), seq)| {
            (
                rec.seq,
                entry(*address, rec, *seq, owner_of, live_now, &classes),
            )
        })
        .collect();
    allocations.sort_by_key(|(raw, a)| (a.seq, *raw));
    let (complete, elapsed_ms, mut notes, caches) = match &mark.classification {
        Some(c) => (c.complete, c.elapsed_ms, c.notes.clone(), c.caches.clone()),
        None => (
            false,
            None,
            vec![
                "the look at what held each allocation did not finish (the process was \
                 interrupted or the look failed): every allocation is unclassified"
                    .to_string(),
            ],
            Vec::new(),
        ),
    };
    if mark
        .classification
        .as_ref()
        .is_some_and(|c| !c.allocations.is_empty())
        && allocations
            .iter()
            .any(|(_, a)| a.class == HeldClass::Unclassified)
    {
        notes.push("allocations made while the end was looked at are unclassified".into());
    }
    Some(format::Python {
        end: format::PyEnd {
            recorded: true,
            how: Some(mark.how.clone()),
            exception: mark.exception.clone(),
            time_ms: Some(mark.time_ms),
            why: None,
        },
        view: Some(format::PyView {
            at: "end".into(),
            time_ms: mark.time_ms,
            complete,
            elapsed_ms,
            notes,
            caches,
            allocations: allocations.into_iter().map(|(_, a)| a).collect(),
        }),
    })
}

/// One allocation live at the end, with its class.
fn entry(
    address: u64,
    rec: &Record,
    seq: u64,
    owner_of: &HashMap<(u32, &'static str), String>,
    live_now: &HashSet<(u64, u64)>,
    classes: &HashMap<u64, &format::Classified>,
) -> format::PyAllocation {
    let (class, holders, blocks) = match classes.get(&address) {
        Some(c) => (c.class.clone(), c.holders.clone(), c.blocks.clone()),
        None => (HeldClass::Unclassified, Vec::new(), Vec::new()),
    };
    format::PyAllocation {
        allocation: cuguard_format::Allocation {
            address: Addr(address),
            size: rec.size,
            requested: rec.requested,
            api: rec.api.name().into(),
            memory: rec.memory.into(),
            device: device_ordinal(rec.device),
            context: id(rec.context),
            thread: rec.thread.into(),
            seq,
            time_ms: rec.time_ms,
            stack: id(rec.stack).map(u64::from),
            tag: crate::tracker::tags::text(
                &mut HashMap::new(),
                crate::tracker::tags::of(address, rec),
            ),
        },
        owner: owner_of.get(&(rec.stack, rec.memory.as_str())).cloned(),
        freed_after: !live_now.contains(&(address, rec.seq)),
        class,
        holders,
        blocks,
    }
}

/// Whether a Python interpreter is in the process (its frames read, or declined).
fn python_present() -> bool {
    crate::stack::python::present() || crate::stack::python::declined().is_some()
}
