//! Where a site is in the user's source, for the formats that point at code (`sarif`,
//! `github`).
//!
//! A [`Place`] is kept per site key while the check condenses a report: the frames with a
//! source file from the site's frame outward (native and Python frames in their mixed order when
//! the stack has both), the shim's fingerprint of the site when the report has one, the site's
//! function, and the owners whose leaks were charged there. [`Place::locate`] then walks those
//! frames from the site outward to the first whose file lies under the source root
//! (`--source-root`), and gives its path relative to the root and its line.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use cuguard_symbolize::mixed::Slot;

use crate::sites::{Site, is_runtime_module, mixed_order};
use cuguard_format::{PyFrame, Stack};

/// The most frames with a file a place keeps (the site's and those outward of it).
const MAX_FRAMES: usize = 32;

/// A frame with a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaceFrame {
    /// The file as the report names it (absolute for native frames with DWARF and for most
    /// Python files).
    pub file: String,
    /// Line, when known.
    pub line: Option<u32>,
}

/// Where a site is: see the module doc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Place {
    /// The frames with a file, the site's first, then outward; at most [`MAX_FRAMES`].
    pub frames: Vec<PlaceFrame>,
    /// The shim's fingerprint of the site (`stacks[].site.fingerprint`), when the report has
    /// one: the same for the same code across runs.
    pub fingerprint: Option<String>,
    /// The site's function, else its name (`module+0xoffset`, or a placeholder).
    pub function: String,
    /// The module holding the site's frame, when there is one.
    pub module: Option<String>,
    /// The labels of the owners whose leaks were charged to the site.
    pub owners: BTreeSet<String>,
    /// For a site charged to the caller of an allocation helper ([`crate::call_path`]): the
    /// helper's frame, for SARIF's related locations.
    pub via: Option<PlaceFrame>,
}

/// A place found under the source root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The file relative to the root, `/`-separated.
    pub path: String,
    /// Line, when known.
    pub line: Option<u32>,
}

impl Place {
    /// The place of `site`, charged from `stack` when there is one.
    pub fn of(stack: Option<&Stack>, site: &Site) -> Place {
        let mut place = Place {
            function: site.function.clone().unwrap_or_else(|| site.name.clone()),
            module: site.module.clone(),
            ..Place::default()
        };
        let Some(stack) = stack else { return place };
        place.fingerprint = stack
            .site
            .as_ref()
            .map(|s| s.fingerprint.clone())
            .filter(|f| !f.is_empty());
        let native = |i: usize| {
            let f = &stack.frames[i];
            f.file.as_ref().map(|file| PlaceFrame {
                file: file.to_string(),
                line: f.line,
            })
        };
        let python = |j: usize| python_frame(&stack.python[j]);
        // Where the walk starts: the shim's site, else the first frame outside the runtime.
        let start = match stack.site.as_ref() {
            Some(s) if s.in_ == "python" && s.index < stack.python.len() => Slot::Python(s.index),
            Some(s) if s.in_ == "frames" && s.index < stack.frames.len() => Slot::Native(s.index),
            _ => Slot::Native(
                stack
                    .frames
                    .iter()
                    .position(|f| !is_runtime_module(&f.module))
                    .unwrap_or(0),
            ),
        };
        let slots: Vec<Slot> = match mixed_order(stack) {
            Some(order) if order.contains(&start) => {
                order.into_iter().skip_while(|s| *s != start).collect()
            }
            _ => match start {
                Slot::Native(i) => (i..stack.frames.len()).map(Slot::Native).collect(),
                Slot::Python(j) => (j..stack.python.len()).map(Slot::Python).collect(),
            },
        };
        place.frames = slots
            .into_iter()
            .filter_map(|s| match s {
                Slot::Native(i) => native(i),
                Slot::Python(j) => python(j),
            })
            .take(MAX_FRAMES)
            .collect();
        if site.via.is_some() {
            // The walk starts at the caller; the helper's frame is kept beside it, and the
            // shim's fingerprint (the helper's) takes the caller in, so each caller is a result.
            place.start_at_caller(site);
            place.fingerprint = place
                .fingerprint
                .take()
                .map(|f| stable_hash(&[&f, &site.key]));
        }
        place
    }

    /// For a site charged past an allocation helper (`site.via`): the frames from the caller's
    /// on, the helper's frame kept beside them.
    fn start_at_caller(&mut self, site: &Site) {
        let Some(helper) = &site.via else { return };
        let at = |loc: &Option<String>| {
            self.frames
                .iter()
                .position(|f| loc.as_deref() == Some(frame_location(f).as_str()))
        };
        if let Some(k) = at(&site.location) {
            self.via = at(&helper.location)
                .filter(|h| *h < k)
                .map(|h| self.frames[h].clone());
            self.frames.drain(..k);
        }
    }

    /// The place of a site found from Python frames alone (a live cache block's).
    /// A site charged past an allocation helper starts at the caller, the helper's frame kept
    /// beside it (as [`Place::of`]).
    pub fn of_python(frames: &[PyFrame], site: &Site) -> Place {
        let mut place = Place {
            frames: frames
                .iter()
                .filter_map(python_frame)
                .take(MAX_FRAMES)
                .collect(),
            function: site.function.clone().unwrap_or_else(|| site.name.clone()),
            ..Place::default()
        };
        place.start_at_caller(site);
        place
    }

    /// The first frame, from the site's outward, whose file is under `root` (an absolute,
    /// normalized directory: see [`source_root`]). A relative file counts when it names a
    /// file that exists under the root.
    pub fn locate(&self, root: &Path) -> Option<Located> {
        self.frames.iter().find_map(|f| {
            let file = Path::new(&f.file);
            let rel = if file.is_absolute() {
                let file = normalize(file);
                match file.strip_prefix(root) {
                    Ok(rel) => rel.to_path_buf(),
                    // A link on the way: compare the file's real path too.
                    Err(_) => std::fs::canonicalize(&file)
                        .ok()?
                        .strip_prefix(root)
                        .ok()?
                        .to_path_buf(),
                }
            } else {
                let rel = normalize(file);
                if rel.starts_with("..") || !root.join(&rel).is_file() {
                    return None;
                }
                rel
            };
            let path = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            (!path.is_empty()).then_some(Located { path, line: f.line })
        })
    }

    /// Adds what another process's place of the same site says.
    pub fn merge(&mut self, other: Place) {
        self.owners.extend(other.owners);
        if self.fingerprint.is_none() {
            self.fingerprint = other.fingerprint;
        }
        if self.frames.is_empty() {
            self.frames = other.frames;
        }
    }
}

/// `file:line` (file name only), as sites print their locations.
fn frame_location(f: &PlaceFrame) -> String {
    let file = crate::sites::file_name(&f.file);
    match f.line {
        Some(line) => format!("{file}:{line}"),
        None => file.to_string(),
    }
}

fn python_frame(f: &PyFrame) -> Option<PlaceFrame> {
    // `<string>`, `<frozen importlib._bootstrap>`: no file.
    (!f.file.is_empty() && !f.file.starts_with('<')).then(|| PlaceFrame {
        file: f.file.clone(),
        line: f.line,
    })
}

/// `path` without `.` and with `..` taken back, lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The source root as [`Place::locate`] takes it: `dir` (the current directory when `None`)
/// made absolute, its links resolved when it exists.
pub fn source_root(dir: Option<&Path>) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    let dir = match dir {
        Some(d) if d.is_absolute() => d.to_path_buf(),
        Some(d) => cwd.join(d),
        None => cwd,
    };
    std::fs::canonicalize(&dir).unwrap_or_else(|_| normalize(&dir))
}

/// A stable 64-bit FNV-1a hash of `parts` (each followed by a 0 byte), as 16 hex digits: the
/// same input gives the same text on every machine and run.
pub fn stable_hash(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}
