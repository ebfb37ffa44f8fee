//! The sources' layout, checked over every crate of the workspace (issue 52): no folder has a
//! circle of files, no file is over 1,000 lines and no function over 120.
//!
//! # No circle in a folder
//!
//! Within any one folder of a crate's `src/` (its files, its `mod.rs`/`lib.rs`, or the `x.rs`
//! beside a folder `x/`, included), the files' imports form no cycle: a folder's module file
//! declares and re-exports, and the files beside it import what they share from a file among
//! them, never from it. The import graph is the simulated driver's layer check's
//! (`harness/simcuda/tests/common/imports.rs`, shared): `crate::`/`self::`/`super::` paths,
//! use-trees and child modules, each resolved to the file of the longest module prefix.
//!
//! # Lengths
//!
//! No file over 1,000 lines (the whole file, its test module included) and no function over 120
//! (from its `fn` line to the closing brace at the same indentation), outside test modules
//! (`#[cfg(test)] mod …`) and test files (`tests.rs`, and files under a `tests/` folder).

#[path = "../../harness/simcuda/tests/common/imports.rs"]
mod imports;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use imports::{Graph, circles, cycle, folders, graph};

/// The most lines a file may have.
const FILE_LINES: usize = 1000;
/// The most lines a function may have.
const FN_LINES: usize = 120;

/// The workspace's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's crates, as `members` in the root `Cargo.toml` names them.
fn members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("read Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    let list = &line[line.find('[').expect("[") + 1..line.rfind(']').expect("]")];
    let out: Vec<String> = list
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect();
    assert!(
        out.len() >= 10 && out.iter().any(|m| m == "shim"),
        "{out:?}"
    );
    out
}

/// Each crate's `src/`, by its member path (`.` for the command).
fn crate_sources() -> Vec<(String, PathBuf)> {
    members()
        .into_iter()
        .map(|m| {
            let src = root().join(&m).join("src");
            assert!(src.is_dir(), "{m} has no src/");
            (m, src)
        })
        .collect()
}

/// Each cycle among the files of one folder of `g`, said in a line: the folder, the cycle, and
/// every file on a circle there.
fn folder_cycles(name: &str, g: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (dir, sub) in folders(g) {
        let Some(c) = cycle(&sub) else { continue };
        let all: Vec<String> = circles(&sub)
            .iter()
            .map(|files| files.iter().cloned().collect::<Vec<_>>().join(", "))
            .collect();
        let mut at = Path::new(name).join("src");
        if !dir.is_empty() {
            at.push(&dir);
        }
        out.push(format!(
            "{}: {} (on circles: {})",
            at.strip_prefix(".").unwrap_or(&at).display(),
            c.join(" -> "),
            all.join("; ")
        ));
    }
    out
}

#[test]
fn no_folder_has_a_circle_of_files() {
    let mut found = Vec::new();
    for (name, src) in crate_sources() {
        let g = graph(&src);
        if name == "shim" {
            // The check sees what it must: imports through `crate::`, `super::` and a child.
            assert!(g["lib.rs"].contains("process/mod.rs"), "{g:#?}");
            assert!(
                g["lifecycle/mod.rs"]
                    .iter()
                    .any(|f| f.starts_with("tracker/")),
                "{g:#?}"
            );
        }
        found.extend(folder_cycles(&name, &g));
    }
    assert!(
        found.is_empty(),
        "files that import one another in a circle:\n{}",
        found.join("\n")
    );
}

/// A fresh, empty directory for one of these tests.
fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cuguard-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch");
    d
}

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("create folder");
    std::fs::write(path, text).expect("write");
}

#[test]
fn a_known_circle_is_found() {
    let src = scratch("source-layout-circle");
    write(
        &src,
        "lib.rs",
        "//! A crate.\nmod a;\nmod b;\npub use a::A;\n",
    );
    write(&src, "a.rs", "//! A.\nuse crate::b::B;\npub struct A(B);\n");
    write(&src, "b.rs", "//! B.\npub struct B;\n");
    // The folder `s/`: its `mod.rs` shares a type with its children, which import it back.
    write(
        &src,
        "s/mod.rs",
        "//! S.\nmod x;\nmod y;\npub use x::X;\npub struct Shared;\n",
    );
    write(
        &src,
        "s/x.rs",
        "//! X.\nuse super::{Shared, y::Y};\npub struct X(Shared, Y);\n",
    );
    // A test module's imports are not the file's (`y` would close a circle with `x`).
    write(
        &src,
        "s/y.rs",
        "//! Y.\npub struct Y;\n#[cfg(test)]\nmod tests {\n    use super::super::x::X;\n}\n",
    );
    // A circle across folders is no folder's circle.
    write(&src, "d/mod.rs", "//! D.\nuse crate::c::C;\n");
    write(&src, "c/mod.rs", "//! C.\nuse crate::d;\n");
    let found = folder_cycles("t", &graph(&src));
    assert_eq!(
        found,
        ["t/src/s: s/mod.rs -> s/x.rs -> s/mod.rs (on circles: s/mod.rs, s/x.rs)"],
        "{:#?}",
        graph(&src)
    );
    // Broken as the layout asks: the shared type moved to a file of its own.
    write(
        &src,
        "s/mod.rs",
        "//! S.\nmod shared;\nmod x;\nmod y;\npub use x::X;\n",
    );
    write(&src, "s/shared.rs", "//! Shared.\npub struct Shared;\n");
    write(
        &src,
        "s/x.rs",
        "//! X.\nuse super::{shared::Shared, y::Y};\npub struct X(Shared, Y);\n",
    );
    let g = graph(&src);
    assert_eq!(folder_cycles("t", &g), Vec::<String>::new());
    let names = |f: &str| g[f].iter().cloned().collect::<Vec<_>>();
    assert_eq!(names("s/x.rs"), ["s/shared.rs", "s/y.rs"]);
    assert_eq!(names("s/y.rs"), Vec::<String>::new());
    assert_eq!(names("c/mod.rs"), ["d/mod.rs"]);
    let _ = std::fs::remove_dir_all(&src);
}

/// Whether a file under `src/` is a test file: `tests.rs`, or under a `tests/` folder.
fn is_test_file(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel
            .parent()
            .is_some_and(|p| p.components().any(|c| c.as_os_str() == "tests"))
}

/// The lines of `raw`, those of its test modules (`#[cfg(test)]` then `mod x {` through the `}` at
/// its indentation, or `mod x;`) as `None`.
fn outside_tests(raw: &str) -> Vec<Option<&str>> {
    let lines: Vec<&str> = raw.lines().collect();
    let mut out: Vec<Option<&str>> = lines.iter().map(|l| Some(*l)).collect();
    let mut i = 0;
    while i < lines.len() {
        let here = lines[i].trim_start();
        let indent = &lines[i][..lines[i].len() - here.len()];
        let next = lines.get(i + 1).map(|l| l.trim_start()).unwrap_or("");
        if !(here.starts_with("#[cfg(test)]") && next.starts_with("mod ")) {
            i += 1;
            continue;
        }
        let end = if next.trim_end().ends_with(';') {
            i + 1
        } else {
            let close = format!("{indent}}}");
            (i + 2..lines.len())
                .find(|&j| lines[j] == close)
                .unwrap_or(lines.len() - 1)
        };
        for l in &mut out[i..=end] {
            *l = None;
        }
        i = end + 1;
    }
    out
}

/// The name of the function a line begins (`pub(crate) const unsafe extern "C" fn name…`), if
/// it begins one with a body (not a trait's `fn name(…);`).
fn fn_name(line: &str) -> Option<&str> {
    let mut l = line.trim_start();
    if let Some(rest) = l.strip_prefix("pub") {
        l = match rest.strip_prefix('(') {
            Some(r) => r[r.find(')')? + 1..].trim_start(),
            None => rest.strip_prefix(' ')?,
        };
    }
    loop {
        if let Some(r) = ["const ", "async ", "unsafe "]
            .iter()
            .find_map(|q| l.strip_prefix(q))
        {
            l = r;
        } else if let Some(r) = l.strip_prefix("extern \"") {
            l = r[r.find("\" ")? + 2..].trim_start();
        } else {
            break;
        }
    }
    let l = l.strip_prefix("fn ")?;
    let name = &l[..l.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?];
    (!name.is_empty() && !line.trim_end().ends_with(';')).then_some(name)
}

/// The functions of `raw` over `FN_LINES` lines, outside its test modules: (lines, first line,
/// name).
fn long_fns(raw: &str) -> Vec<(usize, usize, String)> {
    let lines = outside_tests(raw);
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(line) = line else { continue };
        let Some(name) = fn_name(line) else { continue };
        // A function on one line (`fn f() -> u8 { 1 }`) ends on it.
        let opens = line.matches('{').count();
        if opens > 0 && opens == line.matches('}').count() {
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let close = format!("{indent}}}");
        let end = (i + 1..lines.len()).find(|&j| lines[j].is_none_or(|l| l == close));
        if let Some(j) = end
            && lines[j].is_some()
            && j - i + 1 > FN_LINES
        {
            out.push((j - i + 1, i + 1, name.to_string()));
        }
    }
    out
}

/// Every `.rs` file under `dir`, by its path under `dir`.
fn rust_files(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.insert(path.strip_prefix(dir).expect("under").to_path_buf());
            }
        }
    }
    out
}

/// Every file over `FILE_LINES` and every function over `FN_LINES`, longest first, each said in
/// a line.
fn too_long(crates: &[(String, PathBuf)]) -> (Vec<String>, Vec<String>) {
    let mut files = Vec::new();
    let mut fns = Vec::new();
    for (name, src) in crates {
        for rel in rust_files(src) {
            if is_test_file(&rel) {
                continue;
            }
            let shown = Path::new(name).join("src").join(&rel);
            let shown = shown
                .strip_prefix(".")
                .unwrap_or(&shown)
                .display()
                .to_string();
            let raw = std::fs::read_to_string(src.join(&rel)).expect("read file");
            let n = raw.lines().count();
            if n > FILE_LINES {
                files.push((n, format!("{n} lines: {shown}")));
            }
            for (n, at, f) in long_fns(&raw) {
                fns.push((n, format!("{n} lines: {shown}:{at} fn {f}")));
            }
        }
    }
    let said = |mut v: Vec<(usize, String)>| {
        v.sort_by(|a, b| b.cmp(a));
        v.into_iter().map(|(_, s)| s).collect()
    };
    (said(files), said(fns))
}

#[test]
fn no_file_or_function_is_too_long() {
    let (files, fns) = too_long(&crate_sources());
    assert!(
        files.is_empty() && fns.is_empty(),
        "files over {FILE_LINES} lines ({}):\n{}\nfunctions over {FN_LINES} lines ({}):\n{}",
        files.len(),
        files.join("\n"),
        fns.len(),
        fns.join("\n")
    );
}

#[test]
fn lengths_are_measured_as_the_rule_says() {
    let body = |n: usize| "    x();\n".repeat(n);
    // 121 lines from `fn` to `}`, and a one-line function, and a trait's declaration.
    let text = format!(
        "//! M.\npub(crate) unsafe fn long() {{\n{}}}\nfn short() -> u8 {{ 1 }}\ntrait T {{\n    fn f(&self);\n}}\n",
        body(FN_LINES - 1)
    );
    assert_eq!(long_fns(&text), [(FN_LINES + 1, 2, "long".to_string())]);
    // Exactly 120 lines is not too long; inside a test module, nothing is.
    let text = format!(
        "fn ok() {{\n{}}}\n#[cfg(test)]\nmod tests {{\n    fn long() {{\n{}    }}\n}}\nimpl S {{\n    pub fn m(\n        a: u8,\n    ) {{\n{}    }}\n}}\n",
        body(FN_LINES - 2),
        body(FN_LINES),
        body(FN_LINES - 3)
    );
    assert_eq!(
        long_fns(&text),
        [(FN_LINES + 1, 2 * FN_LINES + 7, "m".to_string())]
    );
    // A test module in its own file hides nothing after its declaration.
    let text = format!(
        "#[cfg(test)]\nmod tests;\nfn after() {{\n{}}}\n",
        body(FN_LINES)
    );
    assert_eq!(long_fns(&text), [(FN_LINES + 2, 3, "after".to_string())]);
    assert!(is_test_file(Path::new("stack/tests.rs")));
    assert!(is_test_file(Path::new("bounded/tests/replay.rs")));
    assert!(!is_test_file(Path::new("stack/python.rs")));
    // Every crate is measured.
    let crates = crate_sources();
    let names: BTreeMap<&str, &PathBuf> = crates.iter().map(|(n, s)| (n.as_str(), s)).collect();
    for m in [
        ".",
        "shim",
        "shim/pool",
        "harness/simcuda",
        "harness/workloads",
    ] {
        assert!(names.contains_key(m), "{m} is not measured");
    }
}
