//! Owners: who holds an allocation (the program, a framework's cache, a CUDA library, the driver),
//! and the spec syntax of user owner rules (`CUGUARD_OWNERS`).

use super::pattern::{Pattern, PatternError};

/// What kind of holder an owner is: the report format's own type (`owners[].kind`).
pub use cuguard_format::OwnerKind;

/// Who holds an allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Stable identifier (`pytorch_caching_allocator`), for reports and tools.
    pub id: String,
    pub kind: OwnerKind,
    /// For people: "PyTorch's caching allocator".
    pub label: String,
    /// What holding by this owner means and how to see past it (every framework cache has one:
    /// "its cache, not necessarily your tensors; PYTORCH_NO_CUDA_MEMORY_CACHING=1 shows each
    /// tensor").
    pub hint: Option<String>,
}

/// The hint of a framework cache that a user rule defines.
pub(crate) const USER_CACHE_HINT: &str = "its cache, not necessarily your data";

/// An owner rule: frames matching `pattern` are held by the owner at `owner` (an index into the
/// owners list).
#[derive(Clone, Debug)]
pub(crate) struct OwnerRule {
    pub(crate) owner: usize,
    pub(crate) pattern: Pattern,
}

/// The bad entries of an owner spec (see [`crate::rules`]'s module doc for the syntax), all in
/// one error so that the caller reports them once. The good entries of the same spec are kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerSpecError {
    /// One line per bad entry: the entry and what is wrong with it.
    pub problems: Vec<String>,
}

impl std::fmt::Display for OwnerSpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.problems.as_slice() {
            [one] => write!(f, "bad owner rule {one}"),
            many => write!(f, "{} bad owner rules: {}", many.len(), many.join("; ")),
        }
    }
}

impl std::error::Error for OwnerSpecError {}

/// What one entry of an owner spec says.
pub(crate) enum Entry {
    /// Rules for an owner known by id.
    Known { id: String, pattern: Pattern },
    /// A new owner (label = id) and its rule.
    New {
        id: String,
        kind: OwnerKind,
        pattern: Pattern,
    },
}

pub(crate) const SYNTAX: &str = "expected OWNER=CONDITION[&CONDITION…], where OWNER is an owner's \
     id or NEW_ID:KIND (KIND: program, framework_cache, library or driver) and a CONDITION is \
     [!]module:GLOB, [!]function:GLOB, [!]file:GLOB or [!]memory:GLOB";

/// Parses one entry `OWNER=CONDITIONS` (`OWNER` = `id` or `id:kind`).
pub(crate) fn parse_entry(entry: &str) -> Result<Entry, String> {
    let quoted = |why: &str| format!("{entry:?}: {why}");
    let (owner, conditions) = entry.split_once('=').ok_or_else(|| quoted(SYNTAX))?;
    let owner = owner.trim();
    let pattern = Pattern::parse(conditions, true).map_err(|PatternError { reason, .. }| {
        quoted(&format!("{reason} (in {:?})", conditions.trim()))
    })?;
    let valid_id = |id: &str| {
        !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    match owner.split_once(':') {
        None if valid_id(owner) => Ok(Entry::Known {
            id: owner.to_owned(),
            pattern,
        }),
        Some((id, kind)) if valid_id(id.trim()) => {
            let kind = OwnerKind::parse(kind.trim()).ok_or_else(|| {
                quoted(&format!(
                    "unknown owner kind {:?} (program, framework_cache, library or driver)",
                    kind.trim()
                ))
            })?;
            Ok(Entry::New {
                id: id.trim().to_owned(),
                kind,
                pattern,
            })
        }
        _ => Err(quoted(&format!(
            "bad owner {owner:?} (ids are lowercase letters, digits and _); {SYNTAX}"
        ))),
    }
}
