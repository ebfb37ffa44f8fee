//! Allocation helpers and the line a leak is charged to (the command side).
//!
//! Programs wrap the driver's allocation in a helper of their own (`alloc()`, `make_buffer()`):
//! the shim's site for every allocation is then the helper's line. This module finds the line to
//! send a user to instead: the first frame, going outward from the site, that is not a helper.
//!
//! A frame is a *helper* when
//! - it is one every call path of a site goes through, on a site whose paths differ beyond it:
//!   the site's stacks (all the report's stacks with that site, freed allocations' too, since the
//!   report keeps every stack the program made) are followed outward through the user's own
//!   frames (the site rules' user tier: the frameworks' and the driver's frames are never on a
//!   path), and the frames they share, from the site on, are the helpers; each stack is charged
//!   to its first frame past them. A site that is reached by one path only is left as it is;
//! - or it is named: `--helper FUNCTION` (the analysis commands) or `CUGUARD_HELPERS`
//!   (comma-separated), each a function name or a glob (`make_*`) matching the whole name or a
//!   method's own (`alloc` names `Pool.alloc`). A named helper is passed over wherever it is on
//!   a path, with the frames it called.
//!
//! `--helper none` (or `CUGUARD_HELPERS=none`) turns the first rule off. A site charged to a
//! caller is keyed and printed with the helper it went through,
//! `step (spike.py:27) via alloc (spike.py:18)`, so two callers of one helper are two sites,
//! `diff` compares them one by one and a suppression can name one (see
//! [`crate::check::suppressions`]).

use std::collections::HashMap;
use std::sync::OnceLock;

use cuguard_symbolize::glob;
use cuguard_symbolize::mixed::Slot;

use crate::site_frames::{Site, SiteKind};
use cuguard_format::Stack;

/// How far outward from a site a path is followed (user frames).
pub(crate) const MAX_PATH: usize = 16;

/// Which helpers the analysis looks through: named ones, and whether shared frames are found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Helpers {
    /// Function names or globs of named helpers.
    pub named: Vec<String>,
    /// Whether the frames every path of a site shares are helpers (on unless `none` was named).
    pub found: bool,
}

impl Default for Helpers {
    fn default() -> Helpers {
        Helpers {
            named: Vec::new(),
            found: true,
        }
    }
}

impl Helpers {
    /// The helpers `--helper` (each may be a comma-separated list) and `CUGUARD_HELPERS` name;
    /// `none` among them turns finding helpers off.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Helpers {
        let mut helpers = Helpers::default();
        for name in names.into_iter().flat_map(|n| n.split(',')).map(str::trim) {
            match name {
                "" => {}
                "none" => helpers.found = false,
                n => {
                    if !helpers.named.iter().any(|h| h == n) {
                        helpers.named.push(n.to_string());
                    }
                }
            }
        }
        helpers
    }

    /// Whether `site`'s function is a named helper.
    pub(crate) fn names(&self, site: &Site) -> bool {
        site.function
            .as_deref()
            .is_some_and(|f| self.names_function(f))
    }

    /// Whether `function` is a named helper.
    pub fn names_function(&self, function: &str) -> bool {
        // Globs match the whole name, or a method's own name (`alloc` for `Pool.alloc` or
        // `Pool::alloc`).
        let short = function.rsplit(['.', ':']).next().unwrap_or(function);
        self.named
            .iter()
            .any(|p| glob::matches(p, function) || glob::matches(p, short))
    }
}

static HELPERS: OnceLock<Helpers> = OnceLock::new();

/// Sets the helpers for this process's analysis (`--helper`, with `CUGUARD_HELPERS`), once,
/// before any report is read; later calls are ignored.
pub fn configure(from_flags: &[String]) {
    let env = std::env::var("CUGUARD_HELPERS").unwrap_or_default();
    let names = from_flags
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(env.as_str()));
    let _ = HELPERS.set(Helpers::from_names(names));
}

/// The helpers in effect: what [`configure`] set, else `CUGUARD_HELPERS` alone.
pub fn helpers() -> &'static Helpers {
    HELPERS.get_or_init(|| {
        let env = std::env::var("CUGUARD_HELPERS").unwrap_or_default();
        Helpers::from_names([env.as_str()])
    })
}

/// The user's frames of `stack` from its site outward, innermost first, each as a site
/// (`function (file:line)`); the site's own frame first. Empty when the shim chose no user
/// frame (an operation's or a framework's site has no path to follow).
pub fn outward(stack: &Stack) -> Vec<Site> {
    let Some(chosen) = stack.site.as_ref() else {
        return Vec::new();
    };
    if !matches!(chosen.kind.as_deref(), None | Some("user")) {
        return Vec::new();
    }
    let start = match chosen.in_.as_str() {
        "python" => Slot::Python(chosen.index),
        "frames" => Slot::Native(chosen.index),
        _ => return Vec::new(),
    };
    let order: Vec<Slot> = crate::site_frames::mixed_order(stack).unwrap_or_else(|| match start {
        Slot::Python(_) => (0..stack.python.len()).map(Slot::Python).collect(),
        Slot::Native(_) => (0..stack.frames.len()).map(Slot::Native).collect(),
    });
    let Some(from) = order.iter().position(|s| *s == start) else {
        return Vec::new();
    };
    let rules = crate::site_frames::builtin_rules();
    let mut out = Vec::new();
    for slot in &order[from..] {
        let (frame, site) = match *slot {
            Slot::Native(i) => match stack.frames.get(i) {
                Some(f) => (
                    crate::site_frames::site_frame(f),
                    crate::site_frames::user_frame_site(f),
                ),
                None => continue,
            },
            Slot::Python(j) => match stack.python.get(j) {
                Some(f) => (
                    crate::site_frames::python_site_frame(f),
                    crate::site_frames::python_frame_site(f),
                ),
                None => continue,
            },
        };
        // The site's own frame is taken as the shim chose it; past it, the user's frames only.
        if !out.is_empty() && rules.tier(&frame).is_some() {
            continue;
        }
        let Some(site) = site else {
            if out.is_empty() {
                return Vec::new();
            }
            continue;
        };
        out.push(site);
        if out.len() == MAX_PATH {
            break;
        }
    }
    out
}

/// Charges each stack of `sites` (stack id → its site and stack) to its first frame outside
/// the helpers (see the module doc), in place.
pub fn resolve(sites: &mut HashMap<u64, (Site, &Stack)>, helpers: &Helpers) {
    if !helpers.found && helpers.named.is_empty() {
        return;
    }
    // The stacks of each user site. Without named helpers, a site reached by one stack has no
    // paths to tell apart: its path is not followed (a report holds up to a million stacks).
    let mut by_site: HashMap<&str, Vec<u64>> = HashMap::new();
    for (&id, (site, _)) in sites.iter() {
        if site.kind == Some(SiteKind::User) {
            by_site.entry(site.key.as_str()).or_default().push(id);
        }
    }
    let mut groups: Vec<Vec<(u64, Vec<Site>)>> = Vec::new();
    for (key, ids) in by_site {
        if ids.len() < 2 && helpers.named.is_empty() {
            continue;
        }
        let group: Vec<(u64, Vec<Site>)> = ids
            .into_iter()
            .filter_map(|id| {
                let path = outward(sites[&id].1);
                // A path whose first frame is not the site (a name the report did not resolve
                // alike) is not followed.
                (path.first().is_some_and(|first| first.key == key)).then_some((id, path))
            })
            .collect();
        groups.push(group);
    }
    for group in groups {
        let shared = if helpers.found {
            shared_prefix(&group)
        } else {
            None
        };
        for (id, path) in group {
            // Past the frames every path shares, and past the outermost named helper: what a
            // named helper calls is the helper's.
            let named = path
                .iter()
                .rposition(|f| helpers.names(f))
                .map_or(0, |k| k + 1);
            let at = shared.unwrap_or(0).max(named).min(path.len() - 1);
            if at == 0 {
                continue;
            }
            let helper = &path[at - 1];
            let mut place = path[at].clone();
            place.key = format!("{} via {}", place.key, helper.key);
            place.via = Some(Box::new(helper.clone()));
            if let Some((site, _)) = sites.get_mut(&id) {
                *site = place;
            }
        }
    }
}

/// How many frames every path of a group shares, from the site on, when the paths differ past
/// them; `None` when all paths are one (nothing to tell apart).
pub(crate) fn shared_prefix(group: &[(u64, Vec<Site>)]) -> Option<usize> {
    let (_, first) = group.first()?;
    let mut shared = first.len();
    let mut differ = false;
    for (_, path) in &group[1..] {
        let same = first
            .iter()
            .zip(path)
            .take_while(|(a, b)| a.key == b.key)
            .count();
        if same < shared {
            shared = same;
        }
        if same < first.len().max(path.len()) {
            differ = true;
        }
    }
    (differ && shared > 0).then_some(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_on_commas_and_none_turns_finding_off() {
        let h = Helpers::from_names(["alloc, make_*", "", "none", "alloc"]);
        assert_eq!(h.named, ["alloc", "make_*"]);
        assert!(!h.found);
        assert_eq!(Helpers::from_names([""]), Helpers::default());
    }
}
