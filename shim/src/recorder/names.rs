//! The phases' names, shim side: each distinct name gets an id once ([`intern`]), which its
//! [`cuguard_history::Action::PhaseBegin`] events carry; the history's writer writes each new
//! name once per segment ([`since`]) before the events that use it.
//!
//! Bounded: a name is cut at [`MAX_NAME_BYTES`], and past [`MAX_NAMES`] distinct names every
//! new one is [`OTHER`], whose text says so ([`OTHER_TEXT`]: the readers list it as a phase name
//! of its own), so a program that names a million ranges apart (a loop counter in the message)
//! keeps the table, and the history, small.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicPtr;

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

/// The id of the name `bytes` (UTF-8, invalid bytes replaced; cut at [`MAX_NAME_BYTES`]).
pub fn intern(bytes: &[u8]) -> u32 {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_once_cut_and_bounded() {
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
}
