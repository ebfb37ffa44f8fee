//! The phases' names, shim side: each distinct name gets an id once ([`intern`]), which its
//! [`cuguard_history::Action::PhaseBegin`] events carry; the history's writer writes each new
//! name once per segment ([`since`]) before the events that use it.
//!
//! Bounded: a name is cut at [`MAX_NAME_BYTES`], and past [`MAX_NAMES`] distinct names every
//! new one is [`OTHER`], whose text says so ([`OTHER_TEXT`]: the readers list it as a phase name
//! of its own), so a program that names a million ranges apart (a loop counter in the message)
//! keeps the table, and the history, small.
//!
//! A thread keeps the last few short names it asked for ([`RECENT`]: bytes and id), so that a
//! loop's `nvtxRangePushA("step")` finds its id without the table's lock, the UTF-8 check and
//! the hash: a name is found there only when its bytes are the same (a pointer can be reused
//! for another string), and only while the table is the one that gave the id (a forked child
//! starts a table of its own: [`GENERATION`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use crate::process::global::{get_or_create, lock, replace};

/// The most distinct names kept.
pub const MAX_NAMES: usize = 4096;
/// The longest name kept, in bytes (cut at a character's boundary).
pub const MAX_NAME_BYTES: usize = 256;
/// The id of every name past [`MAX_NAMES`]: its text is [`OTHER_TEXT`].
pub const OTHER: u32 = 0;
/// [`OTHER`]'s text.
pub const OTHER_TEXT: &str = "(other names: past 4096 distinct names)";

struct Names {
    ids: HashMap<Box<str>, u32>,
    /// By id ([`OTHER`] first).
    texts: Vec<Box<str>>,
}

static NAMES: AtomicPtr<Mutex<Names>> = AtomicPtr::new(std::ptr::null_mut());

fn fresh() -> Mutex<Names> {
    Mutex::new(Names {
        ids: HashMap::new(),
        texts: vec![OTHER_TEXT.into()],
    })
}

/// The longest name a thread keeps among its recent ones, in bytes.
const RECENT_BYTES: usize = 48;
/// How many names a thread keeps.
const RECENT_NAMES: usize = 4;

/// One of a thread's recent names: its bytes as asked (the first `len` of `bytes`), the id the
/// table gave them, and the table's [`GENERATION`] then.
#[derive(Clone, Copy)]
struct Recent {
    len: u8,
    bytes: [u8; RECENT_BYTES],
    id: u32,
    generation: u32,
}

/// The table's generation: a forked child's table is a new one, whose ids are not the parent's.
static GENERATION: AtomicU32 = AtomicU32::new(1);

/// No name (generation 0 is never the table's).
const NO_NAME: Recent = Recent {
    len: 0,
    bytes: [0; RECENT_BYTES],
    id: 0,
    generation: 0,
};

thread_local! {
    /// The thread's recent names, the latest first.
    static RECENT: RefCell<[Recent; RECENT_NAMES]> = const { RefCell::new([NO_NAME; RECENT_NAMES]) };
}

/// The id of the name `bytes`, from the thread's recent names when there.
fn recent(bytes: &[u8], generation: u32) -> Option<u32> {
    RECENT
        .try_with(|r| {
            let r = r.try_borrow().ok()?;
            r.iter()
                .find(|e| {
                    e.generation == generation
                        && usize::from(e.len) == bytes.len()
                        && e.bytes[..bytes.len()] == *bytes
                })
                .map(|e| e.id)
        })
        .ok()
        .flatten()
}

/// Keeps `bytes` (at most [`RECENT_BYTES`]) and its id among the thread's recent names.
fn keep(bytes: &[u8], id: u32, generation: u32) {
    if bytes.len() > RECENT_BYTES {
        return;
    }
    let _ = RECENT.try_with(|r| {
        if let Ok(mut r) = r.try_borrow_mut() {
            r.copy_within(..RECENT_NAMES - 1, 1);
            let mut e = Recent {
                len: bytes.len() as u8,
                bytes: [0; RECENT_BYTES],
                id,
                generation,
            };
            e.bytes[..bytes.len()].copy_from_slice(bytes);
            r[0] = e;
        }
    });
}

/// The text of name `id`, if the table has it.
pub fn text(id: u32) -> Option<String> {
    let names = crate::process::global::get(&NAMES)?;
    lock(names).texts.get(id as usize).map(|t| t.to_string())
}

/// The id of the name `bytes` (UTF-8, invalid bytes replaced; cut at [`MAX_NAME_BYTES`]).
pub fn intern(bytes: &[u8]) -> u32 {
    let generation = GENERATION.load(Ordering::Acquire);
    if let Some(id) = recent(bytes, generation) {
        return id;
    }
    let id = intern_in_table(bytes);
    keep(bytes, id, generation);
    id
}

/// The id of the name `bytes`, from the process's table (under its lock).
fn intern_in_table(bytes: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(bytes);
    let text = cut(&text);
    let mut names = lock(get_or_create(&NAMES, fresh));
    if let Some(&id) = names.ids.get(text) {
        return id;
    }
    if names.texts.len() > MAX_NAMES {
        return OTHER;
    }
    let id = names.texts.len() as u32;
    names.texts.push(text.into());
    names.ids.insert(text.into(), id);
    id
}

fn cut(text: &str) -> &str {
    if text.len() <= MAX_NAME_BYTES {
        return text;
    }
    let mut end = MAX_NAME_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Names with ids from `done` on, and the next id to ask from.
pub fn since(done: u32) -> (Vec<(u32, String)>, u32) {
    let Some(names) = crate::process::global::get(&NAMES) else {
        return (Vec::new(), done);
    };
    let names = lock(names);
    let out: Vec<(u32, String)> = names
        .texts
        .iter()
        .enumerate()
        .skip(done as usize)
        .map(|(id, t)| (id as u32, t.to_string()))
        .collect();
    (out, names.texts.len() as u32)
}

/// In the child of a fork: the table may be locked by a thread the child does not have; the
/// child's history is its own, and names its phases afresh.
pub fn reset_after_fork() {
    replace(&NAMES, fresh());
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is the process's: its tests take turns.
    static TURN: Mutex<()> = Mutex::new(());

    #[test]
    fn names_are_kept_once_cut_and_bounded() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        reset_after_fork();
        let a = intern(b"step");
        assert_eq!(intern(b"step"), a);
        let long = "\u{e9}".repeat(200);
        let id = intern(long.as_bytes());
        let (names, next) = since(0);
        assert_eq!(names[0], (OTHER, OTHER_TEXT.to_string()));
        assert_eq!(names[id as usize].1.len(), 256);
        assert_eq!(since(next).0, vec![]);
        for i in 0..MAX_NAMES + 10 {
            intern(format!("n{i}").as_bytes());
        }
        assert_eq!(intern(b"one more"), OTHER);
        reset_after_fork();
    }

    #[test]
    fn a_thread_s_recent_names_give_the_table_s_ids_and_never_another_table_s() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        reset_after_fork();
        let step = intern(b"step");
        let load = intern(b"load");
        // Found among the recent names: the same ids, and nothing new in the table.
        let (_, next) = since(0);
        assert_eq!((intern(b"step"), intern(b"load")), (step, load));
        assert_eq!(since(next).0, vec![]);
        // Same length, other bytes: another name.
        let stop = intern(b"stop");
        assert_ne!(stop, step);
        assert_eq!(since(next).0, vec![(stop, "stop".to_string())]);
        // A new table (a forked child's): its own ids, none kept from before.
        reset_after_fork();
        let first = intern(b"load");
        assert_eq!(since(0).0[first as usize].1, "load");
        assert_eq!(first, 1);
        reset_after_fork();
    }
}
