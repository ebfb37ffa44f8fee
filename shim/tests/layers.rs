//! The shim's top-level modules (the files and folders directly under `shim/src/`) import each
//! other without a circle: every `crate::MODULE` path between two of them is counted, and the
//! graph must have an order in which each module imports only modules before it; the in-process
//! API (`api`) sits on top, beside the doors, imported by nothing. Also: exactly one
//! `pthread_atfork` registration in the shim (the lifecycle's fork handler).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without `//` comments, so that doc links do not count as imports.
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level module name → its files.
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let p = e.path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" {
            continue;
        }
        let files = out.entry(name).or_insert_with(Vec::new);
        if p.is_dir() {
            rust_files(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
    out
}

/// The identifiers right after `crate::`, and inside `crate::{…}` groups.
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let id: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.push(id);
            }
        } else {
            out.push(
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    out
}

#[test]
fn top_level_modules_form_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (m, files) in &mods {
        let e = edges.entry(m.as_str()).or_default();
        for f in files {
            for t in crate_paths(&code(f)) {
                if let Some((name, _)) = mods.get_key_value(&t)
                    && name != m
                {
                    e.insert(name.as_str());
                }
            }
        }
    }
    // Peel off modules that import nothing left; what cannot be peeled is in a circle.
    let mut left: BTreeSet<&str> = edges.keys().copied().collect();
    let mut order = Vec::new();
    loop {
        let ready: Vec<&str> = left
            .iter()
            .copied()
            .filter(|m| edges[m].iter().all(|d| !left.contains(d)))
            .collect();
        if ready.is_empty() {
            break;
        }
        for m in ready {
            left.remove(m);
            order.push(m);
        }
    }
    let stuck: Vec<String> = left
        .iter()
        .map(|m| {
            let deps: Vec<&str> = edges[m]
                .iter()
                .copied()
                .filter(|d| left.contains(d))
                .collect();
            format!("{m} -> {deps:?}")
        })
        .collect();
    assert!(
        stuck.is_empty(),
        "top-level modules of shim/src import each other in a circle: {stuck:#?}\n(order of the rest: {order:?})"
    );
    // The walk the architecture describes: the doors on top, the process facts at the bottom.
    let pos = |m: &str| order.iter().position(|x| *x == m).unwrap();
    assert!(pos("process") < pos("driver") && pos("driver") < pos("hooks"));
    assert!(pos("tracker") < pos("serving") && pos("serving") < pos("writer"));
    assert!(pos("writer") < pos("lifecycle") && pos("lifecycle") < pos("hooks"));
    assert_eq!(order.last(), Some(&"doors"), "{order:?}");
    // The in-process API is a door of its own, for the program: above the lifecycle and the
    // report it asks, and imported by nothing.
    assert!(pos("lifecycle") < pos("api") && pos("writer") < pos("api"));
    let importers: Vec<&str> = edges
        .iter()
        .filter(|(_, deps)| deps.contains("api"))
        .map(|(m, _)| *m)
        .collect();
    assert!(importers.is_empty(), "{importers:?} import the api module");
}

#[test]
fn one_fork_handler() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let registrations: Vec<String> = files
        .iter()
        .filter(|f| code(f).contains("pthread_atfork("))
        .map(|f| f.display().to_string())
        .collect();
    assert_eq!(registrations.len(), 1, "{registrations:?}");
    assert!(registrations[0].ends_with("lifecycle/mod.rs"));
}
