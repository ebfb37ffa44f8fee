//! Labels the program sets about itself through the in-process API (`cuguard_label`: test id,
//! worker, rank, epoch): the last value of each key, for the report's `process.labels` (with
//! the launcher's, [`super::launcher`]), and copied into each out-of-memory record when it is
//! taken (`ooms[].labels`).
//!
//! Bounded ([`MAX_LABELS`] keys, [`MAX_KEY_BYTES`] and [`MAX_VALUE_BYTES`] each). Kept under a
//! short lock that the allocation path never takes; a forked child keeps the parent's labels
//! (they describe the process it was copied from) in a fresh lock ([`after_fork_child`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicPtr;

use super::global;

/// The most keys kept.
pub const MAX_LABELS: usize = 256;
/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// The longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 4096;

type Labels = Mutex<BTreeMap<String, String>>;

static LABELS: AtomicPtr<Labels> = AtomicPtr::new(std::ptr::null_mut());

/// Why a label was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The key is empty, or longer than [`MAX_KEY_BYTES`].
    Key,
    /// The value is longer than [`MAX_VALUE_BYTES`].
    Value,
    /// [`MAX_LABELS`] keys are set already and this is a new one.
    Full,
}

/// Sets label `key` to `value`.
pub fn set(key: &str, value: &str) -> Result<(), Refused> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Refused::Key);
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(Refused::Value);
    }
    let mut labels = global::lock(global::get_or_create(&LABELS, Default::default));
    if labels.len() >= MAX_LABELS && !labels.contains_key(key) {
        return Err(Refused::Full);
    }
    labels.insert(key.to_owned(), value.to_owned());
    Ok(())
}

/// The process's labels: the launcher's ([`super::launcher`]) and those set so far, a set one
/// winning over a launcher's of the same key; `None` when there are none.
pub fn all() -> Option<BTreeMap<String, String>> {
    let mut all: BTreeMap<String, String> = super::launcher::labels().iter().cloned().collect();
    if let Some(set) = global::get(&LABELS) {
        all.extend(
            global::lock(set)
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    (!all.is_empty()).then_some(all)
}

/// In the child of a fork: the parent's labels, in a lock of the child's own (the parent's may
/// be held by a thread the child does not have; then the child starts without labels).
pub fn after_fork_child() {
    let Some(old) = global::get(&LABELS) else {
        return;
    };
    let kept = old.try_lock().map(|l| l.clone()).unwrap_or_default();
    global::replace(&LABELS, Mutex::new(kept));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_keep_the_last_value_within_bounds() {
        set("test", "a").unwrap();
        set("test", "b").unwrap();
        set("rank", "0").unwrap();
        let all = all().unwrap();
        assert_eq!(all["test"], "b");
        assert_eq!(all["rank"], "0");
        assert_eq!(set("", "x"), Err(Refused::Key));
        assert_eq!(set(&"k".repeat(MAX_KEY_BYTES + 1), "x"), Err(Refused::Key));
        assert_eq!(
            set("k", &"v".repeat(MAX_VALUE_BYTES + 1)),
            Err(Refused::Value)
        );
        for i in 0..MAX_LABELS {
            let _ = set(&format!("key{i}"), "v");
        }
        assert_eq!(set("one more", "v"), Err(Refused::Full));
        assert!(set("test", "c").is_ok(), "an existing key may change");
        after_fork_child();
        assert_eq!(super::all().unwrap()["test"], "c");
    }
}
