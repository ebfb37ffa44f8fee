//! The simulated driver's layers, checked from its sources: no import cycle between files, and
//! each layer imports only what is below it.
//!
//! The layers (see `src/lib.rs`): `model/` (each family's types and rules), `state/` (the global
//! state owning the models, and the operations across families), `entries/` (the C entry
//! points). Below them all: `ffi.rs`, `errors.rs`, `hostmem.rs`, `config.rs`, `symbols.rs`.
//!
//! A file's imports are the `crate::…` and `super::…` paths it names (in `use` lines or inline,
//! grouped `{…}` trees included) and the paths through its own child modules, each resolved to
//! the file of the longest module prefix. A file's `#[cfg(test)] mod tests` is left out (its
//! `super::*` is the file itself).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A source file: its module path (`["state", "pool"]`) and its text without comments and tests.
struct Source {
    module: Vec<String>,
    /// Whether it is a `mod.rs` or `lib.rs` (its `super` is one level further up).
    is_dir_module: bool,
    text: String,
    /// The first `//!` line.
    first_doc: String,
}

fn sources(root: &Path) -> BTreeMap<String, Source> {
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
            let is_dir_module = last == "mod" || last == "lib";
            if is_dir_module {
                module.pop();
            }
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
                    text: strip(&raw),
                    first_doc,
                },
            );
        }
    }
    out
}

/// The text without line comments and without the test module.
fn strip(raw: &str) -> String {
    let cut = raw.find("#[cfg(test)]\nmod tests").unwrap_or(raw.len());
    raw[..cut]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a use tree at `s` (after `crate::` or `super::`): `a::b`, `a::{b, c::{d}}`, `self`.
/// Returns the paths it names.
fn tree(s: &str) -> Vec<Vec<String>> {
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

/// The files that `file` imports.
fn imports(file: &str, all: &BTreeMap<String, Source>) -> BTreeSet<String> {
    let by_module: BTreeMap<&[String], &str> = all
        .iter()
        .map(|(f, s)| (s.module.as_slice(), f.as_str()))
        .collect();
    let src = &all[file];
    let parent: Vec<String> = if src.is_dir_module {
        src.module[..src.module.len().saturating_sub(1)].to_vec()
    } else {
        src.module[..src.module.len() - 1].to_vec()
    };
    // Child modules declared here (`mod x;`), reached by a bare `x::` path.
    let children: Vec<String> = src
        .text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect();
    let mut paths: Vec<Vec<String>> = Vec::new();
    let text = &src.text;
    for (start, prefix) in [("crate::", vec![]), ("super::", parent.clone())] {
        let mut at = 0;
        while let Some(i) = text[at..].find(start) {
            let pos = at + i;
            at = pos + start.len();
            if pos > 0 && text[..pos].ends_with(is_ident) {
                continue;
            }
            for p in tree(&text[at..]) {
                let mut full = prefix.clone();
                full.extend(p.into_iter().filter(|s| s != "self"));
                paths.push(full);
            }
        }
    }
    for child in &children {
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

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = sources(&root);
    all.keys().map(|f| (f.clone(), imports(f, &all))).collect()
}

/// A cycle in `g`, if there is one, as the files along it.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
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

#[test]
fn no_file_imports_itself_through_others() {
    let g = graph();
    // The check sees what it must: the layers' known imports are found.
    assert!(g["state/mod.rs"].contains("model/context.rs"), "{g:#?}");
    assert!(g["state/pool.rs"].contains("state/mod.rs"), "{g:#?}");
    assert!(g["entries/pool.rs"].contains("entries/mod.rs"), "{g:#?}");
    assert!(
        g["entries/extensions.rs"].contains("entries/copy.rs"),
        "{g:#?}"
    );
    if let Some(c) = cycle(&g) {
        panic!("import cycle: {}", c.join(" -> "));
    }
}

#[test]
fn a_cycle_is_found() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    g.get_mut("c").expect("c").clear();
    assert_eq!(cycle(&g), None);
}

#[test]
fn use_trees_are_read_whole() {
    assert_eq!(
        tree("model::{memory::{Alloc, AllocKind}, stream::Stream};"),
        vec![
            vec!["model", "memory", "Alloc"],
            vec!["model", "memory", "AllocKind"],
            vec!["model", "stream", "Stream"],
        ]
    );
    assert_eq!(tree("state::{self, State};").len(), 2);
}

/// The layer a file is in: its folder, or "base" for the files beside the folders.
fn layer(file: &str) -> &str {
    match file.split_once('/') {
        Some((dir, _)) => dir,
        None if file == "lib.rs" => "root",
        None => "base",
    }
}

#[test]
fn each_layer_imports_only_below_it() {
    let g = graph();
    for (file, deps) in &g {
        let allowed: &[&str] = match layer(file) {
            "base" => &["base"],
            "model" => &["base", "model"],
            "state" => &["base", "model", "state"],
            "entries" => &["base", "model", "state", "entries"],
            _ => continue,
        };
        for d in deps {
            assert!(
                allowed.contains(&layer(d)),
                "{file} ({}) imports {d} ({})",
                layer(file),
                layer(d)
            );
        }
    }
}

#[test]
fn exports_live_in_the_entry_layer_and_each_file_names_its_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = sources(&root);
    for (file, src) in &all {
        let exports = src.text.contains("no_mangle");
        assert!(
            !exports || layer(file) == "entries",
            "{file} exports a C function outside entries/"
        );
        let stem = file
            .rsplit('/')
            .next()
            .unwrap_or("")
            .trim_end_matches(".rs");
        let phrase = match layer(file) {
            "model" => "family's model",
            "state" => "family's operations on the state",
            "entries" => "family's C entry points",
            _ => continue,
        };
        if stem == "mod" || *file == "state/fork.rs" {
            continue;
        }
        let doc = src.first_doc.to_lowercase();
        assert!(
            doc.starts_with(&format!("//! the {stem} {phrase}").to_lowercase()),
            "{file}: the first doc line should begin \"The {stem} {phrase}\": {}",
            src.first_doc
        );
    }
}
