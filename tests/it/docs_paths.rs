//! The docs' paths, checked (issue 52): every file, folder and module that `README.md`,
//! `docs/*.md` and the module maps name exists in the repository as it is, so that a rename or a
//! split cannot leave a document pointing at nothing.
//!
//! # What is read
//!
//! - `README.md` and `docs/*.md`. Not `docs/gpu-runs/`: those are dated records of past runs on
//!   the GPU machine (their logs, tables and `versions.txt` name the scripts and files of the day,
//!   some since renamed), kept as they were written; a record is not corrected afterwards.
//! - The module maps: the `//!` comments of every `lib.rs`, `mod.rs` and `main.rs` of the
//!   repository (outside `target/`), down to their code examples, which are not read.
//!
//! # What is a path
//!
//! In a document, outside code blocks, the text between backticks and the targets of relative
//! Markdown links; in a `sh` block every line, in a `console` or `text` block the `$ ` lines (what
//! a command printed is the user's). A span of several words (a command line) is read for the
//! words that start with a top-level folder of the repository ([`TOP_FOLDERS`]); a span of one
//! word is a path when
//!
//! - it starts with a top-level folder and holds a `/` (`src/check/sarif.rs`,
//!   `harness/simcuda/src/entries/`): it must exist from the repository's root;
//! - otherwise it ends in `/` (a folder) or in one of [`EXTENSIONS`] (`api.rs`, `ctxpool/tests.rs`,
//!   `_abi.py`): it is relative to a folder the text names around it, so in a document it must be
//!   the end of some path of the repository, whole components (`serving/cache.rs` matches
//!   `shim/src/serving/cache.rs`, not `src/preserving/cache.rs`); in a module map, it must exist
//!   from the map's folder or a folder above it (`tests/layers.rs` beside `harness/simcuda/src/`),
//!   or end a path below the map's folder (`mod.rs`, each family folder's). The folder the text
//!   means is not worked out, so a name found elsewhere passes (architecture.md's row of `hooks/`
//!   naming `nvml.rs` passes while any `nvml.rs` is left); `hooks/nvml.rs` is checked whole.
//!
//! `{a,b}` is expanded (`src/check/{sarif,github}.rs`); from a placeholder on (`<family>`, `*`,
//! `…`, `%p`, or a word in capitals that no file of the repository is named, `NAME`, `PID`) only
//! the folders before it are checked. A path followed by `::name` (a test of a file:
//! `tests/it/sim_driver.rs::a_test`) must also hold that name. Not paths: absolute paths and
//! those from `./`, `../`, `~` or a variable (the user's machine), build outputs (the root
//! folders `.gitignore` names: `target/`, `dist/`, …), the document's own files (its `file:`
//! blocks, `docs_blocks.rs`), and [`NOT_OURS`]: the few names of the user's files and of other
//! projects' that the docs give by their own names.
//!
//! # Modules
//!
//! A one-word span of Rust path form, `a::b::c` with `a` in lower case (`serving::serve`,
//! `crate::tracker::windows`, `cuguard_history::bounded`), names modules: `a` must be a module of
//! the workspace (a crate, or a file or folder of that name anywhere; an outside crate, one of
//! `Cargo.lock`'s, is not checked), each lower-case segment after it a module below the one
//! before or a name in that module's code, which ends the check (`serve::pooled`,
//! `check::FORMATS`). In a module map, a link to a single lower-case name (`` [`device`] ``, the
//! way a map lists its modules) must be a module beside the map or a name its code declares or
//! imports (`` [`first_use`] ``), or imports with its module (`pub use report::*;`); a link
//! with its target written out (`` [`serve`](serve::pooled) ``) is checked by its target.
//! `crate::`, `self::` and `super::` start where they say.
//!
//! A failure lists every missing path with its document and line, and what was looked for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The repository's top-level folders: a span that starts with one of them and a `/` is read
/// from the root.
const TOP_FOLDERS: &[&str] = &[
    ".ci", "docs", "fuzz", "harness", "scripts", "shim", "src", "tests",
];

/// A one-word span ending in one of these (after a dot) is a file of the repository.
/// (`.json` is left out: the docs' `.json` names are reports, the user's files.)
const EXTENSIONS: &[&str] = &["rs", "py", "md", "c", "cu", "sh", "toml"];

/// Spans that look like paths of the repository and are not: the user's files, the wheel's
/// installed layout, other projects' files. A span starting with one of these is not checked;
/// each must still occur in the docs (a name no document uses any more goes from this list).
const NOT_OURS: &[(&str, &str)] = &[
    (
        "setup.py",
        "what the Python distribution does not have (architecture.md)",
    ),
    (
        "cuguard.py",
        "a user's script of that name (python.md, reliability.md)",
    ),
    ("test_stream.py", "CuPy's test file (compatibility.md)"),
    ("tests/cupy_tests/", "CuPy's test folder (compatibility.md)"),
    ("cuguard/_bin/", "the installed wheel's folder of binaries"),
    ("_bin/", "the installed wheel's folder of binaries"),
    ("site-packages/", "where pip installs the package"),
    ("cuguard-reports/", "the user's folder of reports"),
    ("reports/", "the user's folder of reports"),
    ("share/jupyter/", "Jupyter's folder of kernels (python.md)"),
    ("out/", "a user's folder of reports (README.md)"),
    (
        "process::exit",
        "Rust's `std::process::exit` (shim/src/lifecycle/mod.rs)",
    ),
    (
        "tsl::",
        "TensorFlow's C++ namespace (shim/symbolize/src/rules/mod.rs)",
    ),
    (
        "rmm::out_of_memory",
        "RMM's C++ exception type (python.md, cli.md, architecture.md, README.md)",
    ),
    (
        "rmm::_RMM_26_10::",
        "RMM 26.10's ABI namespace (python.md, compatibility.md)",
    ),
];

/// A place where a path is named.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct At {
    /// The document or module map, from the repository's root.
    source: String,
    line: usize,
}

/// How the names of a source are read.
#[derive(Clone, Debug)]
enum Base {
    /// `README.md`, `docs/*.md`.
    Document,
    /// A module map; the folder of its modules (`shim/src/serving`).
    ModuleMap { dir: String },
}

/// A name that is not where the text says.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Missing {
    at: At,
    /// The span as written.
    span: String,
    /// What was looked for and not found.
    why: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.span.starts_with('[') {
            // A link, written as it is in the map: [`name`].
            write!(
                f,
                "{}:{}: {}: {}",
                self.at.source, self.at.line, self.span, self.why
            )
        } else {
            write!(
                f,
                "{}:{}: `{}`: {}",
                self.at.source, self.at.line, self.span, self.why
            )
        }
    }
}

/// The repository as it is: every file and folder outside the build outputs.
struct Repo {
    root: PathBuf,
    /// Paths from the root, `/`-separated, of files and folders.
    entries: BTreeSet<String>,
    /// The root folders `.gitignore` names (`target`, `dist`, …): build outputs.
    ignored_roots: Vec<String>,
    /// The workspace's crates, by their Rust names (the package's, the library's), and the
    /// folders of their sources (`cuguard` is the command's and the shim's library).
    crates: BTreeMap<String, Vec<String>>,
    /// Crates from outside (`Cargo.lock`), and the standard library's.
    outside_crates: BTreeSet<String>,
}

impl Repo {
    fn open(root: &Path) -> Repo {
        let gitignore = std::fs::read_to_string(root.join(".gitignore")).unwrap_or_default();
        let mut ignored_roots = vec![".git".to_string(), "target".to_string()];
        let mut ignored_names = vec!["__pycache__".to_string()];
        let mut ignored_suffixes = Vec::new();
        for line in gitignore.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let name = line.trim_end_matches('/');
            if let Some(name) = name.strip_prefix('/') {
                ignored_roots.push(name.to_string());
            } else if let Some(suffix) = name.strip_prefix('*') {
                ignored_suffixes.push(suffix.to_string());
            } else {
                ignored_names.push(name.to_string());
            }
        }
        let mut entries = BTreeSet::new();
        let mut stack = vec![String::new()];
        while let Some(dir) = stack.pop() {
            let Ok(read) = std::fs::read_dir(root.join(&dir)) else {
                continue;
            };
            for e in read {
                let e = e.unwrap();
                let name = e.file_name().to_string_lossy().into_owned();
                if (dir.is_empty() && ignored_roots.contains(&name))
                    || ignored_names.contains(&name)
                    || ignored_suffixes.iter().any(|s| name.ends_with(s.as_str()))
                {
                    continue;
                }
                let rel = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                if e.file_type().unwrap().is_dir() {
                    stack.push(rel.clone());
                }
                entries.insert(rel);
            }
        }
        // The workspace's members and their names (the package's, and the library's where it
        // has its own).
        let mut crates = BTreeMap::new();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let members = manifest
            .split_once("members")
            .and_then(|(_, rest)| rest.split_once('[').map(|(_, r)| r))
            .and_then(|rest| rest.split_once(']').map(|(m, _)| m))
            .expect("the workspace's members");
        for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
            if member.is_empty() {
                continue;
            }
            let text = std::fs::read_to_string(root.join(member).join("Cargo.toml")).unwrap();
            let src = if member == "." {
                "src".to_string()
            } else {
                format!("{member}/src")
            };
            for line in text.lines() {
                if let Some(name) = line.trim().strip_prefix("name = \"") {
                    let name = name.trim_end_matches('"').replace('-', "_");
                    let srcs: &mut Vec<String> = crates.entry(name).or_default();
                    if !srcs.contains(&src) {
                        srcs.push(src.clone());
                    }
                }
            }
        }
        let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap_or_default();
        let mut outside_crates: BTreeSet<String> = lock
            .lines()
            .filter_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"').replace('-', "_"))
            .filter(|n| !crates.contains_key(n))
            .collect();
        outside_crates.extend(
            [
                "std", "core", "alloc", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16",
                "i32", "i64", "i128", "isize", "f32", "f64", "bool", "char", "str",
            ]
            .map(String::from),
        );
        Repo {
            root: root.to_path_buf(),
            entries,
            ignored_roots,
            crates,
            outside_crates,
        }
    }

    /// Whether some file or folder of the repository is named `name`.
    fn has_name_anywhere(&self, name: &str) -> bool {
        self.entries
            .iter()
            .any(|e| e.rsplit('/').next() == Some(name))
    }

    fn exists(&self, rel: &str) -> bool {
        self.entries.contains(rel.trim_end_matches('/'))
    }

    fn is_dir(&self, rel: &str) -> bool {
        self.root.join(rel).is_dir()
    }

    /// The paths of the repository that `rel` is the end of, whole components.
    fn ending_with(&self, rel: &str) -> Vec<String> {
        let rel = rel.trim_end_matches('/');
        let tail = format!("/{rel}");
        self.entries
            .iter()
            .filter(|e| *e == rel || e.ends_with(&tail))
            .cloned()
            .collect()
    }

    fn text(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap_or_default()
    }
}

/// `dir` and every folder above it, up to the root (`""`).
fn folders_up(dir: &str) -> Vec<String> {
    let mut out = vec![dir.to_string()];
    let mut d = dir;
    while let Some((parent, _)) = d.rsplit_once('/') {
        out.push(parent.to_string());
        d = parent;
    }
    if !dir.is_empty() {
        out.push(String::new());
    }
    out
}

fn join(dir: &str, rel: &str) -> String {
    if dir.is_empty() {
        rel.to_string()
    } else {
        format!("{dir}/{rel}")
    }
}

/// `a{b,c}d` as `abd`, `acd` (one pair of braces).
fn expand(word: &str) -> Vec<String> {
    match (word.find('{'), word.find('}')) {
        (Some(open), Some(close)) if open < close => word[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{}{}", &word[..open], alt.trim(), &word[close + 1..]))
            .collect(),
        _ => vec![word.to_string()],
    }
}

/// Whether a path component stands for something (`<family>`, `*.json`, `…`, `%p`, `NAME`; not
/// a name in capitals that the repository has, `README.md`).
fn is_placeholder(repo: &Repo, component: &str) -> bool {
    component.contains(['<', '>', '*', '…', '%', '[', ']', '?'])
        || (component.chars().any(|c| c.is_ascii_uppercase())
            && !repo.has_name_anywhere(component)
            && component
                .split('.')
                .next()
                .unwrap()
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `name` occurs in `text` as a whole word.
fn has_word(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

/// A Rust file's code without its comments (line comments; doc comments included).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `code` declares `name` (an item or a module) or brings it in with `use`.
fn declares(code: &str, name: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "fn",
        "mod",
        "struct",
        "enum",
        "trait",
        "type",
        "const",
        "static",
        "union",
        "macro_rules!",
    ];
    for kw in KEYWORDS {
        let needle = format!("{kw} {name}");
        if code.match_indices(&needle).any(|(i, _)| {
            let before = code[..i].chars().next_back();
            let after = code[i + needle.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        }) {
            return true;
        }
    }
    code.match_indices("use ").any(|(i, _)| {
        let before = code[..i].trim_end();
        let start_of_statement = before.ends_with("pub")
            || before
                .chars()
                .next_back()
                .is_none_or(|c| matches!(c, ';' | '{' | '}' | ')' | ']'));
        start_of_statement && has_word(code[i..].split(';').next().unwrap(), name)
    })
}

/// Whether one of the modules beside `dir`'s module that its `code` imports whole (`pub use
/// report::*;`) declares `name`.
fn glob_declares(repo: &Repo, dir: &str, code: &str, name: &str) -> bool {
    code.match_indices("use ").any(|(i, _)| {
        let statement = code[i + 4..].split(';').next().unwrap().trim();
        let Some(path) = statement.strip_suffix("::*") else {
            return false;
        };
        let module = path.rsplit("::").next().unwrap();
        Module::child(repo, dir, module)
            .is_some_and(|m| declares(&code_of(&repo.text(&m.file)), name))
    })
}

/// A module of the workspace: its file, and the folder of its children.
#[derive(Clone, Debug)]
struct Module {
    file: String,
    dir: String,
}

impl Module {
    /// The module whose file or folder is `dir/name`.
    fn child(repo: &Repo, dir: &str, name: &str) -> Option<Module> {
        let flat = join(dir, &format!("{name}.rs"));
        let folder = join(dir, name);
        let in_folder = join(&folder, "mod.rs");
        if repo.exists(&flat) {
            Some(Module {
                file: flat,
                dir: folder,
            })
        } else if repo.exists(&in_folder) {
            Some(Module {
                file: in_folder,
                dir: folder,
            })
        } else {
            None
        }
    }

    /// The crate root of the sources in `src` (`shim/src`).
    fn root_of(repo: &Repo, src: &str) -> Module {
        let file = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| join(src, f))
            .find(|f| repo.exists(f))
            .unwrap_or_else(|| join(src, "lib.rs"));
        Module {
            file,
            dir: src.to_string(),
        }
    }

    /// The module whose file is `file` (a `lib.rs`, `main.rs` or `mod.rs`: its folder's module).
    fn of_map(file: &str) -> Module {
        let dir = file.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        Module {
            file: file.to_string(),
            dir,
        }
    }

    /// Whether `name` is a name of this module: declared or imported in its file, or, for a
    /// module in a folder, in one of the folder's files (re-exported), or written in its code
    /// (the entries a macro generates).
    fn has_name(&self, repo: &Repo, name: &str) -> bool {
        let code = code_of(&repo.text(&self.file));
        if declares(&code, name) || has_word(&code, name) {
            return true;
        }
        let prefix = format!("{}/", self.dir);
        repo.entries
            .iter()
            .filter(|e| e.starts_with(&prefix) && e.ends_with(".rs"))
            .filter(|e| !e[prefix.len()..].contains('/'))
            .any(|e| declares(&code_of(&repo.text(e)), name))
    }
}

/// The workspace's crate whose sources hold `file`.
fn crate_src_of(repo: &Repo, file: &str) -> Option<String> {
    repo.crates
        .values()
        .flatten()
        .filter(|src| file.starts_with(&format!("{src}/")))
        .max_by_key(|src| src.len())
        .cloned()
}

/// Every module named `name` in the workspace's sources (a crate's `src/`, and the `tests/`
/// folders, whose files are the test binaries' modules): the text says which part it means.
fn modules_named(repo: &Repo, name: &str) -> Vec<Module> {
    let in_sources = |dir: &str| {
        repo.crates
            .values()
            .flatten()
            .any(|src| dir == src || dir.starts_with(&format!("{src}/")))
            || dir == "tests"
            || dir.starts_with("tests/")
            || dir.ends_with("/tests")
            || dir.contains("/tests/")
    };
    repo.entries
        .iter()
        .filter_map(|e| {
            let (dir, last) = e.rsplit_once('/')?;
            if !in_sources(dir) {
                None
            } else if last == format!("{name}.rs") {
                Some(Module {
                    file: e.clone(),
                    dir: join(dir, name),
                })
            } else if last == name && repo.exists(&join(e, "mod.rs")) {
                Some(Module {
                    file: join(e, "mod.rs"),
                    dir: e.clone(),
                })
            } else {
                None
            }
        })
        .collect()
}

/// Whether `name` is written in the code of the crate that holds `file` (a function a macro
/// generates from a table, as the shim's driver entries are).
fn in_crate_of(repo: &Repo, file: &str, name: &str) -> bool {
    let Some(src) = crate_src_of(repo, file) else {
        return false;
    };
    let prefix = format!("{src}/");
    repo.entries
        .iter()
        .filter(|e| e.starts_with(&prefix) && e.ends_with(".rs"))
        .any(|e| has_word(&code_of(&repo.text(e)), name))
}

/// Checks a module path, `a::b::c` (one word, no placeholders).
fn check_module_path(
    repo: &Repo,
    span: &str,
    base: &Base,
    map_file: Option<&str>,
) -> Option<String> {
    let path = span.trim_end_matches("()").trim_end_matches('!');
    let segments: Vec<&str> = path.split("::").collect();
    if segments.len() < 2 || !segments.iter().all(|s| is_ident(s)) {
        return None;
    }
    let first = segments[0];
    if !first.starts_with(|c: char| c.is_ascii_lowercase()) {
        return None;
    }
    // Where the path starts.
    let starts: Vec<Module> = match (first, base, map_file) {
        ("crate", Base::ModuleMap { .. }, Some(file)) => {
            vec![Module::root_of(repo, &crate_src_of(repo, file)?)]
        }
        ("self", Base::ModuleMap { .. }, Some(file)) => vec![Module::of_map(file)],
        ("super", Base::ModuleMap { dir }, _) => {
            let parent = dir.rsplit_once('/').map_or("", |(d, _)| d);
            let file = ["mod.rs", "lib.rs", "main.rs"]
                .iter()
                .map(|f| join(parent, f))
                .find(|f| repo.exists(f))?;
            vec![Module::of_map(&file)]
        }
        ("crate" | "self" | "super", ..) => return None,
        _ => {
            if let Some(srcs) = repo.crates.get(first) {
                let mut starts: Vec<Module> =
                    srcs.iter().map(|src| Module::root_of(repo, src)).collect();
                // A crate's name may also be a module's (`cuguard::…` is also the shim's `cuguard`).
                starts.extend(modules_named(repo, first));
                starts
            } else {
                let starts = modules_named(repo, first);
                if starts.is_empty() {
                    if repo.outside_crates.contains(first) {
                        return None;
                    }
                    return Some(format!(
                        "no module `{first}` in the workspace (no `{first}.rs` or `{first}/mod.rs`, no crate of that name)"
                    ));
                }
                starts
            }
        }
    };
    let rest = &segments[1..];
    let mut first_failure = None;
    'start: for start in starts {
        let mut module = start;
        for (n, seg) in rest.iter().enumerate() {
            let last = n + 1 == rest.len();
            if !seg.starts_with(|c: char| c.is_ascii_lowercase() || c == '_') {
                // A type, a constant: the module holds it or says it.
                if module.has_name(repo, seg) {
                    return None;
                }
                first_failure.get_or_insert(format!("`{seg}` is not a name of {}", module.file));
                continue 'start;
            }
            if let Some(child) = Module::child(repo, &module.dir, seg) {
                module = child;
                continue;
            }
            // Before a `::`, a lower-case name is a module: inline or brought in with `use`.
            if !last && declares(&code_of(&repo.text(&module.file)), seg) {
                return None;
            }
            if last && (module.has_name(repo, seg) || in_crate_of(repo, &module.file, seg)) {
                return None;
            }
            first_failure.get_or_insert(if last {
                format!(
                    "`{seg}` is neither a module beside {} (no `{seg}.rs`, no `{seg}/mod.rs` in {}/) nor a name in it",
                    module.file, module.dir
                )
            } else {
                format!(
                    "`{seg}` is not a module of {} (no `{seg}.rs`, no `{seg}/mod.rs` in {}/, no `mod {seg}` or `use` of it)",
                    module.file, module.dir
                )
            });
            continue 'start;
        }
        return None;
    }
    first_failure
}

/// What the text around a span tells: the names of the document's own `file:` blocks (the
/// program a runnable block writes, docs_blocks.rs), which are not the repository's.
#[derive(Default)]
struct Context {
    own_files: BTreeSet<String>,
}

/// Checks one word of a span; `None` when it is not a name of the repository, or it is there.
/// `used` counts the uses of [`NOT_OURS`].
fn check_word(
    repo: &Repo,
    word: &str,
    base: &Base,
    map_file: Option<&str>,
    context: &Context,
    used: &mut BTreeSet<&'static str>,
) -> Option<String> {
    let word = word.trim_matches(|c: char| matches!(c, '\'' | '"' | ',' | ';' | '(' | ')'));
    if word.is_empty()
        || word.contains("://")
        || word.contains('=')
        || word.starts_with(['/', '~', '$', '-', '.'])
            && !TOP_FOLDERS
                .iter()
                .any(|t| t.starts_with('.') && word.starts_with(&format!("{t}/")))
    {
        return None;
    }
    if let Some((prefix, _)) = NOT_OURS.iter().find(|(p, _)| word.starts_with(p)) {
        used.insert(prefix);
        return None;
    }
    if context.own_files.contains(word) {
        return None;
    }
    // `file.rs::name`: a name in a file.
    let (path, item) = match word.split_once("::") {
        Some((p, i)) if p.contains('/') || p.rsplit_once('.').is_some() => (p, Some(i)),
        Some(_) => return check_module_path(repo, word, base, map_file),
        None => (word, None),
    };
    let first = path.split('/').next().unwrap();
    if repo.ignored_roots.iter().any(|r| r == first) {
        return None;
    }
    let from_root = TOP_FOLDERS.contains(&first) && path.contains('/');
    let mut failures = Vec::new();
    for path in expand(path) {
        // From a placeholder on, only the folders before it.
        let components: Vec<&str> = path.split('/').collect();
        let cut = components.iter().position(|c| is_placeholder(repo, c));
        let path = match cut {
            Some(0) => continue,
            Some(n) => format!("{}/", components[..n].join("/")),
            None => path.clone(),
        };
        let last = path.rsplit('/').next().unwrap();
        let is_file = last
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext));
        if !from_root && !path.ends_with('/') && !is_file {
            continue;
        }
        let found: Vec<String> = match base {
            Base::Document if from_root => {
                if repo.exists(&path) {
                    vec![path.clone()]
                } else {
                    vec![]
                }
            }
            Base::Document => repo.ending_with(&path),
            Base::ModuleMap { dir } => {
                let tail = format!("/{}", path.trim_end_matches('/'));
                let below = format!("{dir}/");
                let mut found: Vec<String> = folders_up(dir)
                    .iter()
                    .map(|d| join(d, &path))
                    .filter(|p| repo.exists(p))
                    .collect();
                if found.is_empty() {
                    found = repo
                        .entries
                        .iter()
                        .filter(|e| e.starts_with(&below) && e.ends_with(&tail))
                        .cloned()
                        .collect();
                }
                found
            }
        };
        if found.is_empty() {
            failures.push(match base {
                Base::Document if from_root => format!("no {path} in the repository"),
                Base::Document => format!("no path of the repository ends with {path}"),
                Base::ModuleMap { dir } => {
                    format!("no {path} in {dir}/, a folder below it or a folder above it")
                }
            });
            continue;
        }
        if let Some(item) = item {
            let name = item.split(['(', ':']).next().unwrap();
            if !found
                .iter()
                .any(|f| repo.is_dir(f) || has_word(&repo.text(f), name))
            {
                failures.push(format!("{} has no `{name}`", found.join(", ")));
            }
        }
    }
    if failures.is_empty() {
        None
    } else {
        Some(failures.join("; "))
    }
}

/// Checks a span between backticks.
fn check_span(
    repo: &Repo,
    span: &str,
    base: &Base,
    map_file: Option<&str>,
    context: &Context,
    used: &mut BTreeSet<&'static str>,
) -> Option<String> {
    let words: Vec<&str> = span.split_whitespace().collect();
    match words.as_slice() {
        [] => None,
        [word] => check_word(repo, word, base, map_file, context, used),
        // A command line: the words that are paths from the root.
        _ => {
            let failures: Vec<String> = words
                .iter()
                .filter(|w| TOP_FOLDERS.iter().any(|t| w.starts_with(&format!("{t}/"))))
                .filter_map(|w| check_word(repo, w, base, map_file, context, used))
                .collect();
            (!failures.is_empty()).then(|| failures.join("; "))
        }
    }
}

/// The spans between backticks of a line (`` `a` `` and ``` ``a`` ```).
fn spans(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        let ticks = rest[open..].chars().take_while(|&c| c == '`').count();
        let after = &rest[open + ticks..];
        let fence = "`".repeat(ticks);
        let Some(close) = after.find(&fence) else {
            break;
        };
        out.push(after[..close].trim());
        rest = &after[close + ticks..];
    }
    out
}

/// The relative targets of a line's Markdown links (`[text](docs/cli.md#run)`), without anchor.
fn link_targets(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(i, _)| {
            let target = line[i + 2..].split(')').next()?;
            let target = target.split('#').next()?.trim();
            (!target.is_empty() && !target.contains(':') && !target.contains(' ')).then_some(target)
        })
        .collect()
}

/// Checks a document (`README.md`, `docs/NAME.md`); `doc` is its path from the root.
fn check_document(
    repo: &Repo,
    doc: &str,
    text: &str,
    used: &mut BTreeSet<&'static str>,
) -> Vec<Missing> {
    let base = Base::Document;
    let doc_dir = doc.rsplit_once('/').map_or("", |(d, _)| d);
    let lines: Vec<&str> = text.lines().collect();
    let context = Context {
        own_files: lines
            .iter()
            .filter_map(|l| l.trim().strip_prefix("<!-- file:")?.strip_suffix("-->"))
            .map(|n| n.trim().to_string())
            .collect(),
    };
    let mut missing = Vec::new();
    let mut fence: Option<String> = None;
    for (i, line) in lines.iter().enumerate() {
        let at = At {
            source: doc.to_string(),
            line: i + 1,
        };
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(info.split_whitespace().next().unwrap_or("").to_string()),
            };
            continue;
        }
        if let Some(lang) = &fence {
            let command = match lang.as_str() {
                "sh" | "bash" | "shell" if !trimmed.starts_with('#') => Some(trimmed),
                "console" | "text" => trimmed.strip_prefix("$ "),
                _ => None,
            };
            if let Some(command) = command {
                for word in command.split_whitespace() {
                    let word = word.trim_matches(|c: char| {
                        matches!(c, '\'' | '"' | '(' | ')' | ';' | '&' | '|')
                    });
                    if TOP_FOLDERS
                        .iter()
                        .any(|t| word.starts_with(&format!("{t}/")))
                        && let Some(why) = check_word(repo, word, &base, None, &context, used)
                    {
                        missing.push(Missing {
                            at: at.clone(),
                            span: word.to_string(),
                            why,
                        });
                    }
                }
            }
            continue;
        }
        for span in spans(line) {
            if let Some(why) = check_span(repo, span, &base, None, &context, used) {
                missing.push(Missing {
                    at: at.clone(),
                    span: span.to_string(),
                    why,
                });
            }
        }
        for target in link_targets(line) {
            let path = join(doc_dir, target);
            if !repo.exists(&path) {
                missing.push(Missing {
                    at: at.clone(),
                    span: target.to_string(),
                    why: format!("a link to {path}, which is not in the repository"),
                });
            }
        }
    }
    missing
}

/// The module map of `file` (a `lib.rs`, `mod.rs` or `main.rs`, from the root): its `//!` lines,
/// with their line numbers, outside its code examples.
fn map_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut in_example = false;
    for (i, line) in text.lines().enumerate() {
        let Some(doc) = line.trim_start().strip_prefix("//!") else {
            continue;
        };
        if doc.trim_start().starts_with("```") {
            in_example = !in_example;
            continue;
        }
        if !in_example {
            out.push((i + 1, doc));
        }
    }
    out
}

/// Checks a module map: its paths, its module paths and its links to single names.
fn check_module_map(
    repo: &Repo,
    file: &str,
    text: &str,
    used: &mut BTreeSet<&'static str>,
) -> Vec<Missing> {
    let dir = file.rsplit_once('/').map_or("", |(d, _)| d).to_string();
    let base = Base::ModuleMap { dir: dir.clone() };
    let code = code_of(text);
    let context = Context::default();
    let mut missing = Vec::new();
    for (line, doc) in map_lines(text) {
        let at = At {
            source: file.to_string(),
            line,
        };
        for span in spans(doc) {
            if let Some(why) = check_span(repo, span, &base, Some(file), &context, used) {
                missing.push(Missing {
                    at: at.clone(),
                    span: span.to_string(),
                    why,
                });
            }
        }
        // Links to one name: [`name`], [`name()`], [`name!`]; a link with its target written
        // out, [`name`](target), is checked by its target.
        for (i, _) in doc.match_indices("[`") {
            let Some(end) = doc[i + 2..].find("`]") else {
                continue;
            };
            let after = &doc[i + 2 + end + 2..];
            let target = after
                .strip_prefix('(')
                .and_then(|t| t.split_once(')'))
                .map(|(t, _)| t.trim());
            if let Some(target) = target {
                if target.contains("::")
                    && let Some(why) = check_module_path(repo, target, &base, Some(file))
                {
                    missing.push(Missing {
                        at: at.clone(),
                        span: format!("[`{}`]({target})", &doc[i + 2..i + 2 + end]),
                        why,
                    });
                }
                if target.contains("::") || !is_ident(target) {
                    continue;
                }
            }
            let name = target
                .unwrap_or(&doc[i + 2..i + 2 + end])
                .trim_end_matches("()")
                .trim_end_matches('!');
            if !is_ident(name) || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
                continue;
            }
            if Module::child(repo, &dir, name).is_some()
                || declares(&code, name)
                || glob_declares(repo, &dir, &code, name)
                || repo.crates.contains_key(name)
                || repo.outside_crates.contains(name)
            {
                continue;
            }
            missing.push(Missing {
                at: at.clone(),
                span: format!("[`{name}`]"),
                why: format!(
                    "a link to `{name}`, which is neither a module beside the map (no {d}{name}.rs, no {d}{name}/mod.rs) nor a name the map's code declares or imports",
                    d = if dir.is_empty() { String::new() } else { format!("{dir}/") }
                ),
            });
        }
    }
    missing
}

/// The documents read: `README.md` and `docs/*.md`, from the root.
fn documents(root: &Path) -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_string());
    docs
}

/// The module maps read: every `lib.rs`, `mod.rs` and `main.rs` with a `//!` comment.
fn module_maps(repo: &Repo) -> Vec<String> {
    repo.entries
        .iter()
        .filter(|e| {
            let name = e.rsplit('/').next().unwrap();
            matches!(name, "lib.rs" | "mod.rs" | "main.rs") && repo.text(e).contains("//!")
        })
        .cloned()
        .collect()
}

/// Every missing path of the repository's docs and module maps, and the [`NOT_OURS`] entries no
/// document used.
fn check_repository(repo: &Repo) -> (Vec<Missing>, Vec<&'static str>) {
    let mut used = BTreeSet::new();
    let mut missing = Vec::new();
    for doc in documents(&repo.root) {
        missing.extend(check_document(repo, &doc, &repo.text(&doc), &mut used));
    }
    for map in module_maps(repo) {
        missing.extend(check_module_map(repo, &map, &repo.text(&map), &mut used));
    }
    missing.sort();
    let unused = NOT_OURS
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !used.contains(p))
        .collect();
    (missing, unused)
}

fn repo() -> Repo {
    Repo::open(Path::new(env!("CARGO_MANIFEST_DIR")))
}

#[test]
fn every_path_the_docs_and_module_maps_name_exists() {
    let repo = repo();
    for top in TOP_FOLDERS {
        assert!(
            repo.is_dir(top),
            "{top}/, a top-level folder of TOP_FOLDERS, is not there"
        );
    }
    let (missing, unused) = check_repository(&repo);
    let mut message = String::new();
    if !missing.is_empty() {
        message.push_str(&format!(
            "{} names in the docs and module maps are not in the repository (document:line: `name`: what was looked for):\n",
            missing.len()
        ));
        for m in &missing {
            message.push_str(&format!("  {m}\n"));
        }
    }
    if !missing.is_empty() {
        message.push_str(
            "Name what is there now (or, for a file that is the user's or another project's, not \
             the repository's, add it to NOT_OURS in tests/it/docs_paths.rs, saying why).\n",
        );
    }
    if !unused.is_empty() {
        message.push_str(&format!(
            "entries of NOT_OURS (tests/it/docs_paths.rs) that no document uses any more, to remove: {unused:?}\n"
        ));
    }
    assert!(message.is_empty(), "\n{message}");
}

// ---- the check itself, on a repository made up for it -----------------------------------------

/// A repository made up for a test, removed when it is dropped.
struct MadeUp(Repo);

impl std::ops::Deref for MadeUp {
    type Target = Repo;
    fn deref(&self) -> &Repo {
        &self.0
    }
}

impl Drop for MadeUp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0.root);
    }
}

/// A repository of `files` (path, text) in a fresh directory, opened.
fn made_up_repo(name: &str, files: &[(&str, &str)]) -> MadeUp {
    let root =
        std::env::temp_dir().join(format!("cuguard-docs-paths-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let base: &[(&str, &str)] = &[
        (
            "Cargo.toml",
            "[workspace]\nmembers = [\".\", \"shim\", \"shim/history\"]\n\n[package]\nname = \"cuguard\"\n",
        ),
        ("Cargo.lock", "[[package]]\nname = \"serde_json\"\n"),
        (".gitignore", "/target\n/dist/\n__pycache__/\n"),
        (".ci/run", ""),
        ("README.md", ""),
        ("src/lib.rs", "pub mod check;\n"),
        (
            "src/check/mod.rs",
            "pub mod sarif;\npub const FORMATS: &[u8] = &[];\n",
        ),
        ("src/check/sarif.rs", ""),
        (
            "shim/Cargo.toml",
            "[package]\nname = \"cuguard-shim\"\n\n[lib]\nname = \"cuguard\"\n",
        ),
        (
            "shim/src/lib.rs",
            "mod lifecycle;\nmod serving;\nmod tracker;\n",
        ),
        ("shim/src/lifecycle/mod.rs", "pub mod reporter;\n"),
        ("shim/src/lifecycle/reporter.rs", ""),
        (
            "shim/src/serving/mod.rs",
            "pub mod cache;\npub mod serve;\n",
        ),
        ("shim/src/serving/cache.rs", ""),
        ("shim/src/serving/serve.rs", "pub fn pooled() {}\n"),
        ("shim/src/tracker/mod.rs", "pub mod windows;\n"),
        ("shim/src/tracker/windows.rs", ""),
        ("shim/tests/layers.rs", ""),
        (
            "shim/history/Cargo.toml",
            "[package]\nname = \"cuguard-history\"\n",
        ),
        ("shim/history/src/lib.rs", "pub mod bounded;\n"),
        ("shim/history/src/bounded.rs", ""),
        ("harness/simcuda/src/entries/mod.rs", ""),
        ("scripts/gpu/check.sh", ""),
        ("tests/it/cli.rs", "#[test]\nfn a_test() {}\n"),
        ("tests/fixtures/hostile/one.bad", ""),
        ("docs/cli.md", ""),
        ("docs/gpu-runs/x.md", ""),
        ("fuzz/run.sh", ""),
        ("target/debug/left.rs", ""),
    ];
    for (path, text) in base.iter().chain(files) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    MadeUp(Repo::open(&root))
}

fn missing_in_document(repo: &Repo, text: &str) -> Vec<String> {
    let mut used = BTreeSet::new();
    check_document(repo, "docs/synthetic.md", text, &mut used)
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_made_up_path_is_caught_with_its_document_and_line() {
    let repo = made_up_repo("made-up", &[]);
    let doc = "# Synthetic\n\
               The gate is `src/check/mod.rs`; its SARIF is `src/check/sarif.rs`.\n\
               Made up: `src/check/nowhere.rs`, and the folder `shim/src/nowhere/`.\n\
               In the shim, `lifecycle/reporter.rs` is there and `lifecycle/nowhere.rs` is not.\n\
               Both formats: `src/check/{sarif,nowhere}.rs`. A test: `tests/it/cli.rs::no_such_test`.\n\
               Run `bash scripts/gpu/nowhere.sh compat` or [the page](nowhere.md), not [this](cli.md).\n\
               ```sh\n\
               python3 scripts/nowhere.py\n\
               ```\n\
               `tests/it/cli.rs::a_test`, `scripts/gpu/check.sh`, `.ci/run`, `fuzz/run.sh`, `README.md`.\n\
               `left.rs` is a build's, not the repository's.\n";
    let missing = missing_in_document(&repo, doc);
    let want = [
        "docs/synthetic.md:3: `src/check/nowhere.rs`: no src/check/nowhere.rs in the repository",
        "docs/synthetic.md:3: `shim/src/nowhere/`: no shim/src/nowhere/ in the repository",
        "docs/synthetic.md:4: `lifecycle/nowhere.rs`: no path of the repository ends with lifecycle/nowhere.rs",
        "docs/synthetic.md:5: `src/check/{sarif,nowhere}.rs`: no src/check/nowhere.rs in the repository",
        "docs/synthetic.md:5: `tests/it/cli.rs::no_such_test`: tests/it/cli.rs has no `no_such_test`",
        "docs/synthetic.md:6: `bash scripts/gpu/nowhere.sh compat`: no scripts/gpu/nowhere.sh in the repository",
        "docs/synthetic.md:6: `nowhere.md`: a link to docs/nowhere.md, which is not in the repository",
        "docs/synthetic.md:8: `scripts/nowhere.py`: no scripts/nowhere.py in the repository",
        "docs/synthetic.md:11: `left.rs`: no path of the repository ends with left.rs",
    ];
    assert_eq!(missing, want, "{missing:#?}");
}

#[test]
fn the_users_names_placeholders_and_outside_paths_are_not_paths() {
    let repo = made_up_repo("not-paths", &[]);
    let doc = "`NAME.json`, `./cuguard.%e.%p.json`, `/proc/self/maps`, `target/release/cuguard`,\n\
               `../outside/DESIGN.md`, `$XDG_RUNTIME_DIR/cuguard`, `cuguard/leak`, `r.json`,\n\
               `docs/gpu-runs/<date>-run<N>/`, `harness/simcuda/src/entries/<family>.rs`,\n\
               `tests/fixtures/hostile/*.bad`, `dist/`, `--at/--between`, `CUGUARD_REPORT=dir/`,\n\
               `cuguard summary r.json`, `std::thread`, `Device::free_chunk`, `cuguard-reports/`.\n\
               <!-- file: spike.py -->\nThe program, `spike.py`.\n\
               ```text\n$ cuguard summary demo.json\nsrc/train.c:42 is output, not a path\n```\n";
    assert_eq!(missing_in_document(&repo, doc), Vec::<String>::new());
    // A placeholder's folder is still checked.
    let doc = "`harness/nowhere/<family>.rs`\n";
    assert_eq!(
        missing_in_document(&repo, doc),
        [
            "docs/synthetic.md:1: `harness/nowhere/<family>.rs`: no harness/nowhere/ in the repository"
        ]
    );
}

#[test]
fn module_paths_are_checked_down_to_the_first_name() {
    let repo = made_up_repo("modules", &[]);
    let doc = "`serving::serve`, `serving::serve::pooled`, `crate::nowhere`, `serving::nowhere::serve`,\n\
               `nowhere_at_all::x`, `cuguard_history::bounded`, `check::FORMATS`, `serde_json::Value`,\n\
               `serving::serve::nowhere`, `cuguard::tracker::windows`.\n";
    let missing = missing_in_document(&repo, doc);
    assert_eq!(missing.len(), 3, "{missing:#?}");
    assert!(missing[0].starts_with("docs/synthetic.md:1: `serving::nowhere::serve`: `nowhere` is not a module of shim/src/serving/mod.rs"), "{missing:#?}");
    assert!(
        missing[1]
            .starts_with("docs/synthetic.md:2: `nowhere_at_all::x`: no module `nowhere_at_all`"),
        "{missing:#?}"
    );
    assert!(missing[2].starts_with("docs/synthetic.md:3: `serving::serve::nowhere`: `nowhere` is neither a module beside shim/src/serving/serve.rs"), "{missing:#?}");
}

#[test]
fn a_module_map_is_read_from_its_folder() {
    let repo = made_up_repo(
        "maps",
        &[("shim/src/serving/registry.rs", "pub fn owner_of() {}\n")],
    );
    let mut used = BTreeSet::new();
    let map = "//! The serving.\n\
               //!\n\
               //! - [`cache`]: there; [`nowhere`]: not there; [`pooled`], [`owner_of`]: imported below;\n\
               //! - [`serve`](serve::pooled), [`gone`](serve::gone), [`run`](run/index.html).\n\
               //! - `cache.rs`, `../lib.rs`, `tests/layers.rs`, `docs/cli.md`, `tests/nowhere.rs` and `nowhere.rs`;\n\
               //! - [`crate::tracker::windows`], [`crate::tracker::nowhere`].\n\
               //!\n\
               //! ```\n\
               //! let x = `not/read.rs`;\n\
               //! ```\n\
               \n\
               pub mod cache;\n\
               pub use serve::pooled;\n\
               pub use registry::*;\n";
    let missing: Vec<String> = check_module_map(&repo, "shim/src/serving/mod.rs", map, &mut used)
        .iter()
        .map(ToString::to_string)
        .collect();
    let want = [
        "shim/src/serving/mod.rs:3: [`nowhere`]: a link to `nowhere`",
        "shim/src/serving/mod.rs:4: [`gone`](serve::gone): `gone` is neither a module beside shim/src/serving/serve.rs",
        "shim/src/serving/mod.rs:5: `tests/nowhere.rs`: no tests/nowhere.rs in shim/src/serving/",
        "shim/src/serving/mod.rs:5: `nowhere.rs`: no nowhere.rs in shim/src/serving/",
        "shim/src/serving/mod.rs:6: `crate::tracker::nowhere`: `nowhere` is neither",
    ];
    assert_eq!(missing.len(), want.len(), "{missing:#?}");
    for (m, w) in missing.iter().zip(want) {
        assert!(m.starts_with(w), "{m}\ndoes not start with\n{w}");
    }
}

#[test]
fn every_entry_of_not_ours_is_one_the_docs_use() {
    // The whole check says so too; this names the rule on its own.
    let repo = made_up_repo("not-ours", &[]);
    let mut used = BTreeSet::new();
    check_document(
        &repo,
        "docs/synthetic.md",
        "`setup.py` and `reports/`\n",
        &mut used,
    );
    assert_eq!(used, BTreeSet::from(["setup.py", "reports/"]));
}
