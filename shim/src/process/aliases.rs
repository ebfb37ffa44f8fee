//! Names the program gives its source files for people, through the in-process API
//! (`cuguard_file_alias`): IPython's `Cell In[2]` for the file it compiled a notebook cell as
//! (`/tmp/ipykernel_4242/817962334.py`, `<ipython-input-2-…>`). Every report written afterwards
//! gives its Python frames in such a file a `display` name (`report/stacks.rs`), and `cuguard`
//! writes their locations `Cell In[2], line 5`.
//!
//! Bounded ([`MAX_ALIASES`] files, [`MAX_FILE_BYTES`] and [`MAX_DISPLAY_BYTES`] each); a file
//! named again gets the new name. Kept under a short lock that the allocation path never
//! takes; a forked child keeps the parent's aliases in a fresh lock ([`after_fork_child`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicPtr;

use super::global;

/// The most files named.
pub const MAX_ALIASES: usize = 4096;
/// The longest file, in bytes.
pub const MAX_FILE_BYTES: usize = 4096;
/// The longest display name, in bytes.
pub const MAX_DISPLAY_BYTES: usize = 256;

type Aliases = Mutex<HashMap<String, String>>;

static ALIASES: AtomicPtr<Aliases> = AtomicPtr::new(std::ptr::null_mut());

/// Why an alias was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The file or the display name is empty or too long.
    Invalid,
    /// [`MAX_ALIASES`] files are named already and this is a new one.
    Full,
}

/// Names `file` `display` for people from now on.
pub fn set(file: &str, display: &str) -> Result<(), Refused> {
    if file.is_empty()
        || file.len() > MAX_FILE_BYTES
        || display.is_empty()
        || display.len() > MAX_DISPLAY_BYTES
    {
        return Err(Refused::Invalid);
    }
    let mut aliases = global::lock(global::get_or_create(&ALIASES, Default::default));
    if aliases.len() >= MAX_ALIASES && !aliases.contains_key(file) {
        return Err(Refused::Full);
    }
    aliases.insert(file.to_owned(), display.to_owned());
    Ok(())
}

/// Every file named so far and its name (empty when none is).
pub fn all() -> HashMap<String, String> {
    global::get(&ALIASES)
        .map(|a| global::lock(a).clone())
        .unwrap_or_default()
}

/// In the child of a fork: the parent's aliases, in a lock of the child's own (the parent's may
/// be held by a thread the child does not have; then the child starts without them).
pub fn after_fork_child() {
    let Some(old) = global::get(&ALIASES) else {
        return;
    };
    let kept = old.try_lock().map(|a| a.clone()).unwrap_or_default();
    global::replace(&ALIASES, Mutex::new(kept));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_keep_the_last_name_within_bounds() {
        set("/tmp/ipykernel_1/817962334.py", "Cell In[1]").unwrap();
        set("/tmp/ipykernel_1/817962334.py", "Cell In[2]").unwrap();
        assert_eq!(all()["/tmp/ipykernel_1/817962334.py"], "Cell In[2]");
        assert_eq!(set("", "x"), Err(Refused::Invalid));
        assert_eq!(set("f", ""), Err(Refused::Invalid));
        assert_eq!(
            set(&"f".repeat(MAX_FILE_BYTES + 1), "x"),
            Err(Refused::Invalid)
        );
        assert_eq!(
            set("f", &"d".repeat(MAX_DISPLAY_BYTES + 1)),
            Err(Refused::Invalid)
        );
        for i in 0..MAX_ALIASES {
            let _ = set(&format!("file{i}"), "d");
        }
        assert_eq!(set("one more", "d"), Err(Refused::Full));
        assert!(set("/tmp/ipykernel_1/817962334.py", "Cell In[3]").is_ok());
        after_fork_child();
        assert_eq!(all()["/tmp/ipykernel_1/817962334.py"], "Cell In[3]");
    }
}
