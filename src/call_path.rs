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
    outward_frames(stack)
        .into_iter()
        .map(PathFrame::site)
        .collect()
}

/// One of the user's frames on a path, as the stack holds it: a site is made of it only where
/// one is needed, since most frames of a path are only compared.
#[derive(Clone, Copy, Debug)]
enum PathFrame<'s> {
    Native(&'s cuguard_format::Frame),
    Python(&'s cuguard_format::PyFrame),
}

impl<'s> PathFrame<'s> {
    /// The frame as a site; a frame on a path has a name.
    fn site(self) -> Site {
        let site = match self {
            PathFrame::Native(f) => crate::site_frames::user_frame_site(f),
            PathFrame::Python(f) => crate::site_frames::python_frame_site(f),
        };
        site.expect("a frame on a path has a name")
    }

    /// The site's key ([`Site::key`]) of the frame.
    fn key(self) -> String {
        self.site().key
    }

    /// The frame's function.
    fn function(self) -> Option<&'s str> {
        match self {
            PathFrame::Native(f) => f.function.as_deref(),
            PathFrame::Python(f) => Some(&f.function),
        }
    }

    /// Whether two frames are one site (their keys are equal): frames of the same function,
    /// file name, line (and display name) are, without their keys being made.
    fn same(self, other: PathFrame<'_>) -> bool {
        use crate::site_frames::file_name;
        let alike = match (self, other) {
            (PathFrame::Native(a), PathFrame::Native(b)) => {
                a.function == b.function
                    && a.line == b.line
                    && a.file.as_deref().map(file_name) == b.file.as_deref().map(file_name)
            }
            (PathFrame::Python(a), PathFrame::Python(b)) => {
                a.function == b.function
                    && a.line == b.line
                    && a.display == b.display
                    && file_name(&a.file) == file_name(&b.file)
            }
            _ => false,
        };
        alike || self.key() == other.key()
    }
}

/// [`outward`]'s frames, as the stack holds them.
fn outward_frames(stack: &Stack) -> Vec<PathFrame<'_>> {
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
    let mut out = Vec::new();
    for slot in &order[from..] {
        let (frame, named) = match *slot {
            Slot::Native(i) => match stack.frames.get(i) {
                Some(f) => (
                    crate::site_frames::site_frame(f),
                    f.function.as_deref().is_some_and(|n| !n.is_empty()),
                ),
                None => continue,
            },
            Slot::Python(j) => match stack.python.get(j) {
                Some(f) => (
                    crate::site_frames::python_site_frame(f),
                    !f.function.is_empty(),
                ),
                None => continue,
            },
        };
        // The site's own frame is taken as the shim chose it; past it, the user's frames only.
        if !out.is_empty() && crate::site_frames::tier(&frame).is_some() {
            continue;
        }
        if !named {
            if out.is_empty() {
                return Vec::new();
            }
            continue;
        }
        out.push(match *slot {
            Slot::Native(i) => PathFrame::Native(&stack.frames[i]),
            Slot::Python(j) => PathFrame::Python(&stack.python[j]),
        });
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
    let mut groups: Vec<Vec<(u64, Vec<PathFrame<'_>>)>> = Vec::new();
    for (key, ids) in by_site {
        if ids.len() < 2 && helpers.named.is_empty() {
            continue;
        }
        let group: Vec<(u64, Vec<PathFrame<'_>>)> = ids
            .into_iter()
            .filter_map(|id| {
                let path = outward_frames(sites[&id].1);
                // A path whose first frame is not the site (a name the report did not resolve
                // alike) is not followed.
                (path.first().is_some_and(|first| first.key() == key)).then_some((id, path))
            })
            .collect();
        groups.push(group);
    }
    for group in groups {
        let shared = if helpers.found {
            shared_prefix_by(&group, |a, b| a.same(*b))
        } else {
            None
        };
        for (id, path) in group {
            // Past the frames every path shares, and past the outermost named helper: what a
            // named helper calls is the helper's.
            let named = path
                .iter()
                .rposition(|f| f.function().is_some_and(|n| helpers.names_function(n)))
                .map_or(0, |k| k + 1);
            let at = shared.unwrap_or(0).max(named).min(path.len() - 1);
            if at == 0 {
                continue;
            }
            let helper = path[at - 1].site();
            let mut place = path[at].site();
            place.key = format!("{} via {}", place.key, helper.key);
            place.via = Some(Box::new(helper));
            if let Some((site, _)) = sites.get_mut(&id) {
                *site = place;
            }
        }
    }
}

/// How many frames every path of a group shares, from the site on, when the paths differ past
/// them; `None` when all paths are one (nothing to tell apart).
pub(crate) fn shared_prefix(group: &[(u64, Vec<Site>)]) -> Option<usize> {
    shared_prefix_by(group, |a, b| a.key == b.key)
}

/// [`shared_prefix`], frames compared by `same` (whether two are one site).
fn shared_prefix_by<F>(group: &[(u64, Vec<F>)], same: impl Fn(&F, &F) -> bool) -> Option<usize> {
    let (_, first) = group.first()?;
    let mut shared = first.len();
    let mut differ = false;
    for (_, path) in &group[1..] {
        let alike = first
            .iter()
            .zip(path)
            .take_while(|(a, b)| same(a, b))
            .count();
        if alike < shared {
            shared = alike;
        }
        if alike < first.len().max(path.len()) {
            differ = true;
        }
    }
    (differ && shared > 0).then_some(shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two frames are one site exactly when their keys are equal, whether they are alike part
    /// by part or only in the text of their keys (a function named as another's key).
    #[test]
    fn frames_are_one_site_exactly_when_their_keys_are() {
        use cuguard_format::{Addr, Frame, PyFrame};
        let native = |function: &str, file: Option<&str>, line: Option<u32>| Frame {
            ip: Addr(0),
            module: "/opt/app/bin/app".into(),
            offset: Addr(0),
            function: Some(function.into()),
            file: file.map(Into::into),
            line,
            inlined: None,
        };
        let python =
            |function: &str, file: &str, line: Option<u32>, display: Option<&str>| PyFrame {
                file: file.into(),
                line,
                function: function.into(),
                entry: None,
                display: display.map(Into::into),
            };
        let natives = [
            native("step", Some("/src/x.c"), Some(32)),
            native("step", Some("/other/x.c"), Some(32)),
            native("step", Some("x.c"), Some(33)),
            native("step", Some("x.c"), None),
            native("step", None, Some(32)),
            native("step (x.c:32)", None, None),
            native("step (x.c)", None, None),
            native("alloc", Some("x.c"), Some(32)),
            native("step (Cell In[2], line 5)", None, None),
        ];
        let pythons = [
            python("step", "/src/x.c", Some(32), None),
            python("step", "spike.py", Some(27), None),
            python("step", "/tmp/ipykernel_1/2.py", Some(5), Some("Cell In[2]")),
            python("step", "/tmp/ipykernel_1/3.py", Some(5), Some("Cell In[2]")),
            python("step (Cell In[2], line 5)", "", None, None),
        ];
        let frames: Vec<PathFrame<'_>> = natives
            .iter()
            .map(PathFrame::Native)
            .chain(pythons.iter().map(PathFrame::Python))
            .collect();
        for &a in &frames {
            for &b in &frames {
                assert_eq!(a.same(b), a.key() == b.key(), "{a:?} {b:?}");
            }
        }
        // Alike in part (another directory, another file behind one display name), and alike
        // only in the keys' text (a function named as another's key; a native frame and a
        // Python one).
        let (cell, cell_text) = (11, 8);
        assert!(frames[0].same(frames[1]));
        assert!(frames[cell].same(frames[cell + 1]));
        assert!(frames[0].same(frames[5]));
        assert!(frames[cell].same(frames[cell_text]));
        assert!(frames[0].same(frames[9]));
        assert!(!frames[0].same(frames[2]) && !frames[3].same(frames[4]));
    }

    #[test]
    fn names_split_on_commas_and_none_turns_finding_off() {
        let h = Helpers::from_names(["alloc, make_*", "", "none", "alloc"]);
        assert_eq!(h.named, ["alloc", "make_*"]);
        assert!(!h.found);
        assert_eq!(Helpers::from_names([""]), Helpers::default());
    }
}
