//! The simulated driver's layers, checked from its sources: no import cycle between files, and
//! each layer imports only what is below it.
//!
//! The layers (see `src/lib.rs`): `model/` (each family's types and rules), `state/` (the global
//! state owning the models, and the operations across families), `entries/` (the C entry
//! points). Below them all: `ffi.rs`, `errors.rs`, `hostmem.rs`, `config.rs`, `symbols.rs`.
//!
//! A file's imports are the `crate::…`, `self::…` and `super::…` paths it names (in `use` lines or
//! inline, grouped `{…}` trees included) and the paths through its own child modules, each
//! resolved to the file of the longest module prefix. A file's `#[cfg(test)] mod tests` is left
//! out (its `super::*` is the file itself). The graph is read by `common/imports.rs`, which the
//! workspace's own layout check (`tests/it/source_layout.rs`) shares.

#[path = "common/imports.rs"]
mod imports;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use imports::{cycle, sources, tree};

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    imports::graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
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
