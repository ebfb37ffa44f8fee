//! Which file of a crate imports which, read from the sources: shared by the simulated driver's
//! layer check (`harness/simcuda/tests/layers.rs`) and the workspace's source layout check
//! (`tests/it/source_layout.rs`), each of which includes this file with `#[path = …] mod imports;`.
//!
//! A file's imports are the `crate::…`, `self::…` and `super::…` paths it names (in `use` lines or
//! inline, grouped `{…}` trees included) and the paths through its own child modules, each
//! resolved to the file of the longest module prefix (`super::` inside an inline `mod x { … }` is
//! read from `x`; in the body of a macro the file calls, from where it is called). Test modules
//! (`#[cfg(test)] mod …`, inline or in their own file) are left out (their `super::*` is the file
//! itself).

// Each includer uses a part: the layer check has no folders, the layout check no doc lines.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each file (by its path under `src/`) and the files it imports.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// A source file: its module path (`["state", "pool"]`) and its text without comments and tests.
pub struct Source {
    pub module: Vec<String>,
    /// Whether it is a `mod.rs`, `lib.rs` or `main.rs` (its `super` is one level further up).
    pub is_dir_module: bool,
    /// The module path that `crate::` names here: `[]` in the library, `["main"]` in `main.rs`'s
    /// program, `["bin", name]` in `bin/<name>.rs`'s.
    pub crate_root: Vec<String>,
    pub text: String,
    /// The first `//!` line.
    pub first_doc: String,
}

/// Every `.rs` file under `root` (a crate's `src/`), by its path under `root`.
pub fn sources(root: &Path) -> BTreeMap<String, Source> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel: PathBuf = path.strip_prefix(root).expect("under src").to_path_buf();
            let mut module: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let last = module.last().cloned().unwrap_or_default();
            let is_dir_module =
                last == "mod" || last == "lib" || (last == "main" && module.len() > 1);
            if is_dir_module {
                module.pop();
            }
            let crate_root = match module.as_slice() {
                [first, ..] if first == "main" => vec![first.clone()],
                [first, name, ..] if first == "bin" => vec![first.clone(), name.clone()],
                _ => vec![],
            };
            let raw = std::fs::read_to_string(&path).expect("read file");
            let first_doc = raw
                .lines()
                .find(|l| l.starts_with("//!"))
                .unwrap_or("")
                .to_string();
            out.insert(
                rel.to_string_lossy().into_owned(),
                Source {
                    module,
                    is_dir_module,
                    crate_root,
                    text: strip(&raw),
                    first_doc,
                },
            );
        }
    }
    out
}

/// The text without line comments and without its test modules: `#[cfg(test)]` then `mod x;`,
/// or then `mod x {` through the `}` at its indentation.
pub fn strip(raw: &str) -> String {
    let lines: Vec<&str> = raw.lines().collect();
    let mut kept = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let here = lines[i].trim_start();
        let indent = &lines[i][..lines[i].len() - here.len()];
        let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
        let next = next
            .strip_prefix("pub(crate) ")
            .or_else(|| next.strip_prefix("pub "))
            .unwrap_or(next);
        if here.starts_with("#[cfg(test)]") && next.starts_with("mod ") {
            if next.trim_end().ends_with(';') {
                i += 2;
                continue;
            }
            let close = format!("{indent}}}");
            i = (i + 2..lines.len())
                .find(|&j| lines[j].trim_end() == close)
                .map_or(lines.len(), |j| j + 1);
            continue;
        }
        kept.push(match lines[i].find("//") {
            Some(at) => &lines[i][..at],
            None => lines[i],
        });
        i += 1;
    }
    kept.join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a use tree at `s` (after `crate::` or `super::`): `a::b`, `a::{b, c::{d}}`, `self`.
/// Returns the paths it names.
pub fn tree(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    let mut segs = Vec::new();
    let mut rest = s;
    loop {
        if let Some(inner) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut end = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            let body = &inner[..end];
            let mut parts = Vec::new();
            let (mut depth, mut start) = (0, 0);
            for (i, c) in body.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        parts.push(&body[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            parts.push(&body[start..]);
            let mut out = Vec::new();
            for p in parts.into_iter().filter(|p| !p.trim().is_empty()) {
                for sub in tree(p) {
                    let mut full = segs.clone();
                    full.extend(sub);
                    out.push(full);
                }
            }
            return out;
        }
        let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if len == 0 {
            break;
        }
        segs.push(rest[..len].to_string());
        rest = &rest[len..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    vec![segs]
}

/// The child modules a file declares (`mod x;`, `pub(crate) mod x;`, a `#[path]` one too).
fn children(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let mut l = l.trim();
            if l.starts_with("#[") {
                l = l[l.find(']')? + 1..].trim_start();
            }
            if let Some(rest) = l.strip_prefix("pub") {
                l = match rest.strip_prefix('(') {
                    Some(r) => r[r.find(')')? + 1..].trim_start(),
                    None => rest.strip_prefix(' ')?,
                };
            }
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(|n| n.trim().to_string())
        })
        .collect()
}

/// The inline modules of `text` (`mod x { … }`): each one's name and the span of its body.
fn inline_modules(text: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find("mod ") {
        let pos = at + i;
        at = pos + 4;
        if text[..pos].ends_with(is_ident) {
            continue;
        }
        out.extend(named_body(text, at));
    }
    out
}

/// The span of the body of each `macro_rules! name { … }` of `text`, by the macro's name.
fn macro_bodies(text: &str) -> Vec<(String, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find("macro_rules!") {
        at += i + "macro_rules!".len();
        let skipped = text[at..].len() - text[at..].trim_start().len();
        out.extend(named_body(text, at + skipped));
    }
    out
}

/// At `at` in `text`, a name then a braced body (`name { … }`): the name and the span of the
/// body, to its matching brace (or the end of the text).
fn named_body(text: &str, at: usize) -> Option<(String, std::ops::Range<usize>)> {
    let rest = &text[at..];
    let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
    let body = rest[len..].trim_start().strip_prefix('{')?;
    let open = text.len() - body.len();
    let mut depth = 1;
    let close = body
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0
        })
        .map_or(text.len(), |(j, _)| open + j);
    Some((rest[..len].to_string(), open..close))
}

/// The files that `file` imports.
pub fn imports(file: &str, all: &BTreeMap<String, Source>) -> BTreeSet<String> {
    let by_module: BTreeMap<&[String], &str> = all
        .iter()
        .map(|(f, s)| (s.module.as_slice(), f.as_str()))
        .collect();
    let src = &all[file];
    let text = &src.text;
    let inline = inline_modules(text);
    let macros = macro_bodies(text);
    // The module at `pos`: the file's, and the inline modules around it.
    let module_of = |pos: usize| {
        let mut m = src.module.clone();
        m.extend(
            inline
                .iter()
                .filter(|(_, span)| span.contains(&pos))
                .map(|(name, _)| name.clone()),
        );
        m
    };
    // The modules a path at `pos` is read from: in the body of a macro this file calls, those
    // where it is called or handed to another macro (`super::` there is the caller's);
    // elsewhere, the one at `pos`.
    let modules_at = |pos: usize| -> Vec<Vec<String>> {
        let Some((name, body)) = macros.iter().find(|(_, span)| span.contains(&pos)) else {
            return vec![module_of(pos)];
        };
        // Called by name (`name!(…)`), or handed to another macro (`each!(name, …)`).
        let mut found = BTreeSet::new();
        let mut at = 0;
        while let Some(i) = text[at..].find(name.as_str()) {
            let p = at + i;
            at = p + name.len();
            let whole = !text[..p].ends_with(is_ident) && !text[at..].starts_with(is_ident);
            if whole && !body.contains(&p) && !text[..p].trim_end().ends_with("macro_rules!") {
                // The caller's module, and the inline modules the macro's body opens around `pos`.
                let mut m = module_of(p);
                m.extend(
                    inline
                        .iter()
                        .filter(|(_, span)| span.contains(&pos) && body.contains(&span.start))
                        .map(|(name, _)| name.clone()),
                );
                found.insert(m);
            }
        }
        if found.is_empty() {
            vec![module_of(pos)]
        } else {
            found.into_iter().collect()
        }
    };
    let mut paths: Vec<Vec<String>> = Vec::new();
    for start in ["crate::", "self::", "super::"] {
        let mut at = 0;
        while let Some(i) = text[at..].find(start) {
            let pos = at + i;
            at = pos + start.len();
            let before = &text[..pos];
            if before.ends_with(is_ident) || before.ends_with("::") {
                continue;
            }
            let mut ups = 0;
            if start == "super::" {
                ups = 1;
                // `super::super::…`: one level further up for each.
                while let Some(r) = text[at..].strip_prefix("super::") {
                    ups += 1;
                    at = text.len() - r.len();
                }
            }
            let prefixes = match start {
                "crate::" => vec![src.crate_root.clone()],
                _ => modules_at(pos),
            };
            for mut prefix in prefixes {
                prefix.truncate(prefix.len().saturating_sub(ups));
                for p in tree(&text[at..]) {
                    let mut full = prefix.clone();
                    full.extend(p.into_iter().filter(|s| s != "self"));
                    paths.push(full);
                }
            }
        }
    }
    // Child modules declared here (`mod x;`), reached by a bare `x::` path.
    for child in children(text) {
        let needle = format!("{child}::");
        let mut at = 0;
        while let Some(i) = text[at..].find(&needle) {
            let pos = at + i;
            at = pos + needle.len();
            let before = &text[..pos];
            if before.ends_with(is_ident) || before.ends_with("::") {
                continue;
            }
            let mut full = src.module.clone();
            full.push(child.clone());
            paths.push(full);
        }
    }
    let mut out = BTreeSet::new();
    for p in paths {
        let target = (0..=p.len())
            .rev()
            .find_map(|n| by_module.get(&p[..n]).copied());
        if let Some(t) = target
            && t != file
        {
            out.insert(t.to_string());
        }
    }
    out
}

/// The import graph of the crate whose `src/` is `root`.
pub fn graph(root: &Path) -> Graph {
    let all = sources(root);
    all.keys().map(|f| (f.clone(), imports(f, &all))).collect()
}

/// A cycle in `g`, if there is one, as the files along it.
pub fn cycle(g: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        n: &str,
        g: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(n.to_string(), Mark::Open);
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match marks.get(m).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let i = path.iter().position(|p| p == m).expect("on the path");
                    let mut c = path[i..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Mark::New => {
                    if let Some(c) = visit(m, g, marks, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks.insert(n.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for n in g.keys() {
        if marks.get(n).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(c) = visit(n, g, &mut marks, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// Each folder of the graph's files (`""` for `src/` itself) and the graph among its own files
/// alone: the files in it, and the file of the module the folder holds (`mod.rs`, `lib.rs`, or
/// `x.rs` beside a folder `x/`). Imports of files elsewhere are left out.
pub fn folders(g: &Graph) -> BTreeMap<String, Graph> {
    let folder_of = |f: &str| f.rsplit_once('/').map_or("", |(d, _)| d).to_string();
    let mut members: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in g.keys() {
        members.entry(folder_of(f)).or_default().insert(f.clone());
    }
    for f in g.keys() {
        let own = f.trim_end_matches(".rs");
        if let Some(m) = members.get_mut(own) {
            m.insert(f.clone());
        }
    }
    members
        .into_iter()
        .map(|(dir, files)| {
            let sub = files
                .iter()
                .map(|f| {
                    let deps = g[f].intersection(&files).cloned().collect();
                    (f.clone(), deps)
                })
                .collect();
            (dir, sub)
        })
        .collect()
}

/// The files of `g` that lie on some cycle, each group of files that reach one another apart.
pub fn circles(g: &Graph) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|n| (n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (n, r) in &reached {
        if !r.contains(*n) || out.iter().any(|c| c.contains(*n)) {
            continue;
        }
        out.push(
            r.iter()
                .filter(|m| reached[m].contains(*n))
                .cloned()
                .collect(),
        );
    }
    out
}
