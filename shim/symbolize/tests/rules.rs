//! The site and owner rules on stacks from real frameworks: those recorded on an NVIDIA H200
//! (`tests/fixtures/stacks-recorded.txt`, written by `extract_stacks.py` from `docs/gpu-runs`)
//! and, for caches no run has recorded yet, stacks written by hand from the frameworks' frame
//! names (`tests/fixtures/stacks-hand-written.txt`). Each stack says which site (kind and frame)
//! and which owner the built-in rules must find; the format is described at the top of the
//! recorded file. Also checks that `find_site` agrees with the rules on user sites.

use cuguard_symbolize::rules::{OwnerKind, Rules, SiteKind};
use cuguard_symbolize::site::{Plumbing, SiteFrame, find_site, qualified_path};

const RECORDED: &str = include_str!("fixtures/stacks-recorded.txt");
const HAND_WRITTEN: &str = include_str!("fixtures/stacks-hand-written.txt");

#[derive(Debug, Default)]
struct Frame {
    module: String,
    function: Option<String>,
    file: Option<String>,
    line: Option<u32>,
}

#[derive(Debug, Default)]
struct Case {
    name: String,
    recorded: bool,
    memory: Option<String>,
    /// Kind (`user`, `operation`, `fallback`, `none`) and where.
    site: (String, Option<String>),
    owner: String,
    frames: Vec<Frame>,
}

fn opt(s: &str) -> Option<String> {
    (s != "-").then(|| s.to_owned())
}

fn parse(text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        if word == "stack" {
            cases.push(Case {
                name: rest.to_owned(),
                ..Default::default()
            });
            continue;
        }
        let case = cases
            .last_mut()
            .unwrap_or_else(|| panic!("{line:?} before any stack"));
        match word {
            "origin" => case.recorded = rest.starts_with("recorded "),
            "note" => {}
            "memory" => case.memory = opt(rest),
            "expect" => match rest.split_once(' ').unwrap_or((rest, "")) {
                ("site", what) => {
                    let (kind, at) = what.split_once(' ').unwrap_or((what, ""));
                    case.site = (kind.to_owned(), (!at.is_empty()).then(|| at.to_owned()));
                }
                ("owner", id) => case.owner = id.to_owned(),
                _ => panic!("{}: bad expectation {line:?}", case.name),
            },
            "N" => {
                let f: Vec<&str> = rest.split(" | ").collect();
                assert_eq!(f.len(), 4, "{}: {line:?}", case.name);
                case.frames.push(Frame {
                    module: opt(f[0]).unwrap_or_default(),
                    function: opt(f[1]),
                    file: opt(f[2]),
                    line: opt(f[3]).map(|l| l.parse().unwrap()),
                });
            }
            "P" => {
                let f: Vec<&str> = rest.split(" | ").collect();
                assert_eq!(f.len(), 3, "{}: {line:?}", case.name);
                case.frames.push(Frame {
                    module: String::new(),
                    function: opt(f[1]),
                    file: opt(f[0]),
                    line: opt(f[2]).map(|l| l.parse().unwrap()),
                });
            }
            _ => panic!("{}: bad line {line:?}", case.name),
        }
    }
    cases
}

fn site_frames(frames: &[Frame]) -> Vec<SiteFrame<'_>> {
    frames
        .iter()
        .map(|f| SiteFrame {
            module: &f.module,
            function: f.function.as_deref(),
            file: f.file.as_deref(),
            line: f.line,
            offset: 0,
        })
        .collect()
}

/// `FILE:LINE` (base name) or the qualified function, as the fixtures write a site frame.
fn describe(f: &SiteFrame<'_>, want: &str) -> String {
    let file_line = f
        .file
        .zip(f.line)
        .map(|(file, line)| format!("{}:{line}", file.rsplit('/').next().unwrap_or(file)));
    match file_line {
        Some(fl) if want.contains(':') && !want.contains("::") => fl,
        _ => f.function.map(qualified_path).unwrap_or_default(),
    }
}

fn check(cases: &[Case]) -> Vec<String> {
    let rules = Rules::builtin();
    let plumbing = Plumbing::builtin();
    let mut failures = Vec::new();
    for case in cases {
        let frames = site_frames(&case.frames);
        let found = rules.find_site_with_kind(&frames);
        let got = match &found {
            Some((site, kind)) => {
                let want = case.site.1.as_deref().unwrap_or("");
                (
                    kind.as_str().to_owned(),
                    Some(describe(&frames[site.index], want)),
                )
            }
            None => ("none".to_owned(), None),
        };
        if got != case.site {
            failures.push(format!(
                "{}: site {:?}, expected {:?}",
                case.name, got, case.site
            ));
        }
        // find_site is the user tier of the same rules.
        let user = found.filter(|(_, k)| *k == SiteKind::User).map(|(s, _)| s);
        if find_site(&frames, &plumbing) != user {
            failures.push(format!("{}: find_site disagrees", case.name));
        }
        let owner = rules.owner(&frames, case.memory.as_deref());
        if owner.id != case.owner {
            failures.push(format!(
                "{}: owner {}, expected {}",
                case.name, owner.id, case.owner
            ));
        }
    }
    failures
}

#[test]
fn recorded_stacks() {
    let cases = parse(RECORDED);
    assert!(cases.len() >= 20, "{} cases", cases.len());
    assert!(cases.iter().all(|c| c.recorded));
    let failures = check(&cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn hand_written_stacks() {
    let cases = parse(HAND_WRITTEN);
    assert!(cases.len() >= 15, "{} cases", cases.len());
    assert!(cases.iter().all(|c| !c.recorded));
    let failures = check(&cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every kind of site and every kind of owner is exercised by some fixture, and every framework
/// cache the built-in list knows appears in one.
#[test]
fn fixtures_cover_every_kind_and_cache() {
    let rules = Rules::builtin();
    let mut cases = parse(RECORDED);
    cases.extend(parse(HAND_WRITTEN));
    for kind in ["user", "operation", "fallback", "none"] {
        assert!(
            cases.iter().any(|c| c.site.0 == kind),
            "no fixture with a {kind} site"
        );
    }
    for kind in OwnerKind::ALL {
        assert!(
            cases
                .iter()
                .any(|c| rules.owner_by_id(&c.owner).unwrap().kind == kind),
            "no fixture owned by a {kind}"
        );
    }
    for owner in rules.owners() {
        if owner.kind == OwnerKind::FrameworkCache {
            assert!(
                cases.iter().any(|c| c.owner == owner.id),
                "no fixture for {}",
                owner.id
            );
            assert!(owner.hint.is_some(), "{} has no hint", owner.id);
        }
    }
}
