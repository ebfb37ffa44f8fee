//! Tests of the check's rule: suppressions, baselines, limits, events.

use std::path::PathBuf;

use super::suppressions::Suppressions;
use super::*;
use crate::input::map_reports;
use crate::output::{Format, Options};
use crate::owners::OwnerFilter;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn condense(names: &[&str], s: &Suppressions) -> Vec<ProcessCheck> {
    let files: Vec<PathBuf> = names.iter().map(|n| fixture(n)).collect();
    map_reports(&files, |src, r| ProcessCheck::new(src, &r, s))
        .unwrap()
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

fn verdict(names: &[&str], rules: &str, base: Option<&[&str]>, limits: Limits) -> Verdict {
    let s = Suppressions::parse("s", rules).unwrap();
    let processes = condense(names, &s);
    let baseline = base.map(|b| Baseline::new(&condense(b, &s)));
    Verdict::new(&processes, baseline.as_ref(), &s, limits)
}

#[test]
fn any_leak_fails_by_default() {
    let v = verdict(&["leaks-two-contexts.json"], "", None, Limits::default());
    assert!(!v.passed);
    assert_eq!((v.counted_bytes, v.counted_leaks), (15_729_152, 5));
    assert_eq!(v.failures.len(), 2, "{:?}", v.failures);
    assert!(v.processes.to_vec().unwrap()[0].failed);
}

#[test]
fn limits_allow_some_leaks() {
    let limits = Limits {
        max_leaked_bytes: Some(16 << 20),
        max_leaks: Some(5),
        ..Limits::default()
    };
    let v = verdict(&["leaks-two-contexts.json"], "", None, limits);
    assert!(v.passed, "{:?}", v.failures);
    assert!(!v.processes.to_vec().unwrap()[0].failed);
}

#[test]
fn suppressions_remove_leaks_and_report_unused_rules() {
    let rules = "leak:make_buffers\nleak:libscratch.so$\nleak:worker_loop api:cuMemAllocPitch*\nleak:never_seen\n";
    let v = verdict(&["leaks-two-contexts.json"], rules, None, Limits::default());
    assert_eq!(v.suppressed_leaks, 4);
    assert_eq!(v.leaks, 1, "the plain cuMemAlloc_v2 at worker_loop is left");
    assert_eq!(v.sites.get(0).unwrap().site, "worker_loop");
    let matched: Vec<u64> = v.suppressions.iter().map(|r| r.matched).collect();
    assert_eq!(matched, [2, 1, 1, 0]);
    let unused: Vec<usize> = v.unused_suppressions().map(|r| r.line).collect();
    assert_eq!(unused, [4]);
}

#[test]
fn events_fail_unless_suppressed_or_allowed() {
    let v = verdict(&["events.json"], "leak:cupy", None, Limits::default());
    assert!(!v.passed);
    assert_eq!(
        v.failures,
        [
            "2 double_free events",
            "1 free_in_wrong_context event",
            "1 invalid_free event"
        ]
    );
    let v = verdict(
        &["events.json"],
        "leak:cupy\nevent:double_free\nevent:invalid_free frame:cupy_cuda_memory_free\nevent:^free_in_wrong_context$",
        None,
        Limits::default(),
    );
    assert!(v.passed, "{:?}", v.failures);
    assert_eq!(v.suppressed_events, 4);
    let none = Limits {
        fail_on_events: FailingEvents::None,
        ..Limits::default()
    };
    assert!(verdict(&["events.json"], "leak:cupy", None, none).passed);
    let all = Limits {
        fail_on_events: FailingEvents::All,
        ..Limits::default()
    };
    let v = verdict(&["events.json"], "leak:cupy", None, all);
    assert_eq!(v.events.iter().filter(|e| e.failing).count(), 9);
}

#[test]
fn baseline_passes_the_same_run_and_fails_growth() {
    let same = verdict(
        &["leaks-two-contexts.json"],
        "",
        Some(&["leaks-two-contexts.json"]),
        Limits::default(),
    );
    assert!(same.passed, "{:?}", same.failures);
    assert!(same.sites.iter().all(|s| s.status == SiteStatus::Baselined));

    // The merged fixture holds leaks-two-contexts and incomplete: against a baseline of
    // leaks-two-contexts alone, only incomplete's <no stack> site is new.
    let grown = verdict(
        &["merged.json"],
        "",
        Some(&["leaks-two-contexts.json"]),
        Limits::default(),
    );
    assert!(!grown.passed);
    assert_eq!(grown.sites.get(0).unwrap().site, "<no stack>");
    assert_eq!(grown.sites.get(0).unwrap().status, SiteStatus::New);
    assert_eq!(grown.counted_leaks, 2);
    let p: Vec<bool> = grown.processes.iter().map(|p| p.unwrap().failed).collect();
    assert_eq!(
        p,
        [false, true],
        "only the process with the new site failed"
    );

    // Twice the same report against one: every site has grown by exactly itself.
    let doubled = verdict(
        &["leaks-two-contexts.json", "leaks-two-contexts.json"],
        "",
        Some(&["leaks-two-contexts.json"]),
        Limits::default(),
    );
    assert!(doubled.sites.iter().all(|s| s.status == SiteStatus::Grown));
    assert_eq!(doubled.counted_bytes, 15_729_152);
}

#[test]
fn incomplete_reports_fail_only_when_required() {
    let loose = Limits {
        max_leaked_bytes: Some(u64::MAX),
        max_leaks: Some(u64::MAX),
        ..Limits::default()
    };
    assert!(verdict(&["incomplete.json"], "", None, loose.clone()).passed);
    let strict = Limits {
        require_complete: true,
        ..loose
    };
    let v = verdict(&["incomplete.json"], "", None, strict);
    assert_eq!(v.failures, ["1 incomplete report (--require-complete)"]);
}

#[test]
fn junit_is_well_formed_enough() {
    let v = verdict(&["merged.json"], "", None, Limits::default());
    let mut out = Vec::new();
    junit::Junit::write(&v, &mut out, &Options::default()).unwrap();
    let xml = String::from_utf8(out).unwrap();
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites"));
    assert_eq!(xml.matches("<testcase ").count(), 3);
    assert_eq!(xml.matches("<failure ").count(), 3);
    assert!(xml.contains("name=\"train[4242] (gpu01, rank 0)\""));
    assert!(xml.trim_end().ends_with("</testsuites>"));
}

#[test]
fn generated_suppressions_suppress_everything_they_name() {
    use super::suppressions::{combine, propose, write_file};
    let files = [fixture("leaks-two-contexts.json"), fixture("events.json")];
    let proposals: Vec<_> = map_reports(&files, |_, r| propose(&r))
        .unwrap()
        .into_iter()
        .flat_map(|(_, p)| p)
        .collect();
    let proposals = combine(proposals);
    let mut out = Vec::new();
    write_file(&proposals, 2, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\nsite:^make_buffers$\n"), "{text}");
    assert!(text.contains("\nleak:libscratch.so$\n"), "{text}");
    assert!(
        text.contains("\nevent:^double_free$ site:^cupy_cuda_memory_free$\n"),
        "{text}"
    );
    let all_events = Limits {
        fail_on_events: FailingEvents::All,
        ..Limits::default()
    };
    let v = verdict(
        &["leaks-two-contexts.json", "events.json"],
        &text,
        None,
        all_events,
    );
    assert!(v.passed, "{:?}\n{text}", v.failures);
    assert_eq!(v.unused_suppressions().count(), 0);
}

fn verdict_with_owners(names: &[&str], owners: &str, limits: Limits) -> Verdict {
    let s = Suppressions::default();
    let filter = crate::owners::OwnerFilter::parse(owners).unwrap();
    let files: Vec<PathBuf> = names.iter().map(|n| fixture(n)).collect();
    let processes: Vec<ProcessCheck> = map_reports(&files, |src, r| {
        ProcessCheck::with_owners(src, &r, &s, &filter)
    })
    .unwrap()
    .into_iter()
    .map(|(_, p)| p)
    .collect();
    Verdict::new(
        &processes,
        None,
        &s,
        Limits {
            owners: filter,
            ..limits
        },
    )
}

#[test]
fn only_the_programs_own_leaks_count_by_default() {
    let v = verdict(&["attribution.json"], "", None, Limits::default());
    assert_eq!(
        (v.counted_bytes, v.counted_leaks),
        ((1 << 20) + (512 << 10), 2)
    );
    assert_eq!(
        v.sites.get(0).unwrap().label,
        "on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520)"
    );
    let others: Vec<(&str, u64, u64)> = v
        .other_owners
        .iter()
        .map(|o| (o.owner.as_str(), o.bytes, o.count))
        .collect();
    assert_eq!(
        others,
        [
            ("pytorch_caching_allocator", 22 << 20, 2),
            ("cublas", 4 << 20, 1)
        ]
    );
    // Widened by kind, by id, or to all.
    let v = verdict_with_owners(&["attribution.json"], "framework_cache", Limits::default());
    assert_eq!(v.counted_bytes, (23 << 20) + (512 << 10));
    assert_eq!(v.other_owners.len(), 1);
    let v = verdict_with_owners(&["attribution.json"], "cublas", Limits::default());
    assert_eq!(v.counted_bytes, (5 << 20) + (512 << 10));
    let v = verdict_with_owners(&["attribution.json"], "all", Limits::default());
    assert_eq!(v.counted_bytes, (27 << 20) + (512 << 10));
    assert!(v.other_owners.is_empty());
    // Older reports without owners: every leak of these fixtures is the program's.
    let v = verdict(&["leaks-two-contexts.json"], "", None, Limits::default());
    assert!(v.other_owners.is_empty());
}

#[test]
fn a_limit_on_one_measure_leaves_the_other_unlimited() {
    assert_eq!(Limits::leaks(None, None), (Some(0), Some(0)));
    assert_eq!(Limits::leaks(Some(100), None), (Some(100), None));
    assert_eq!(Limits::leaks(None, Some(3)), (None, Some(3)));
    assert_eq!(Limits::leaks(Some(1), Some(2)), (Some(1), Some(2)));
    let limits = |(b, n)| Limits {
        max_leaked_bytes: b,
        max_leaks: n,
        ..Limits::default()
    };
    // 5 leaks, 15.0 MiB.
    let f = &["leaks-two-contexts.json"];
    assert!(verdict(f, "", None, limits(Limits::leaks(Some(100_000_000), None))).passed);
    assert!(verdict(f, "", None, limits(Limits::leaks(None, Some(5)))).passed);
    let v = verdict(f, "", None, limits(Limits::leaks(Some(1 << 20), None)));
    assert_eq!(
        v.failures,
        ["15.0 MiB in leaks exceeds --max-leaked-bytes 1.0 MiB"]
    );
    let v = verdict(
        f,
        "",
        None,
        limits(Limits::leaks(Some(100_000_000), Some(4))),
    );
    assert_eq!(v.failures, ["5 leaks exceed --max-leaks 4"]);
}

#[test]
fn growth_fails_only_over_max_growth_and_names_the_site() {
    let loose = Limits {
        max_leaked_bytes: None,
        max_leaks: None,
        ..Limits::default()
    };
    let v = verdict(&["attribution.json"], "", None, loose.clone());
    assert!(v.passed, "{:?}", v.failures);
    assert_eq!(v.growing.len(), 1);
    assert!(!v.growing[0].failing);
    let v = verdict(
        &["attribution.json"],
        "",
        None,
        Limits {
            max_growth: Some(100 << 20),
            ..loose.clone()
        },
    );
    assert!(!v.passed);
    assert_eq!(
        v.failures,
        [
            "append_batch (train.py:7) grew by 384.0 MiB over 6.0 s in python3.12[5150] (more than --max-growth 100.0 MiB)"
        ]
    );
    assert_eq!(
        v.processes.to_vec().unwrap()[0].failing_growth,
        [("append_batch (train.py:7)".to_string(), 384 << 20)]
    );
    let v = verdict(
        &["attribution.json"],
        "",
        None,
        Limits {
            max_growth: Some(400 << 20),
            ..loose
        },
    );
    assert!(v.passed, "{:?}", v.failures);
}

/// What `cuguard check` decides (leaks folded while parsed, processes folded as they are read)
/// is what the check of fully parsed reports decides, on all the fixtures, with and without a
/// baseline and suppressions.
#[test]
fn folded_check_equals_the_whole_one_on_the_fixtures() {
    use crate::input::for_each_folded;
    use cuguard_format::{LeakFold, Report};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 5);
    for rules in ["", "leak:*main*\nevent:double_free\n"] {
        let s = Suppressions::parse("s", rules).unwrap();
        for owners in [OwnerFilter::default(), OwnerFilter::All] {
            for base in [None, Some(&files[..2])] {
                let condense = |src: &crate::input::Source, r: Report| {
                    ProcessCheck::with_owners(src, &r, &s, &owners)
                };
                let whole: Vec<ProcessCheck> = map_reports(&files, condense)
                    .unwrap()
                    .into_iter()
                    .map(|(_, p)| p)
                    .collect();
                let baseline = base.map(|b| {
                    Baseline::new(
                        &map_reports(b, condense)
                            .unwrap()
                            .into_iter()
                            .map(|(_, p)| p)
                            .collect::<Vec<_>>(),
                    )
                });
                let limits = || Limits {
                    max_growth: Some(0),
                    require_complete: true,
                    ..Limits::default()
                };
                let want = Verdict::new(&whole, baseline.as_ref(), &s, limits());
                let folded = |src: &crate::input::Source, r: Report, leaks: LeakFold| {
                    ProcessCheck::folded(src, &r, &leaks, &s, &owners)
                };
                let mut fold = CheckFold::on_disk(&s);
                for_each_folded(&files, 0, folded, |_, p| fold.add(p)).unwrap();
                let got = fold.finish(baseline.as_ref(), &s, limits()).unwrap();
                assert_eq!(
                    serde_json::to_string(&got).unwrap(),
                    serde_json::to_string(&want).unwrap()
                );
            }
        }
    }
}

/// The fixture's verdict with every site placed at `file` line 7, under the source root `/root`.
fn placed_at(file: &str) -> Verdict {
    let mut v = verdict(&["leaks-two-contexts.json"], "", None, Limits::default());
    assert!(!v.places.is_empty());
    for p in v.places.values_mut() {
        p.frames = vec![places::PlaceFrame {
            file: file.into(),
            line: Some(7),
        }];
    }
    v.source_root = Some(PathBuf::from("/root"));
    v
}

#[test]
fn github_commands_escape_odd_paths() {
    let v = placed_at("/root/my dir/a,b:c\nd%.c");
    let mut out = Vec::new();
    github::Github::write(&v, &mut out, &Options::default()).unwrap();
    let out = String::from_utf8(out).unwrap();
    let counting = v.sites.counting();
    assert!(counting > 0);
    assert_eq!(out.lines().count(), counting, "{out}");
    for line in out.lines() {
        assert!(
            line.starts_with(r"::error file=my dir/a%2Cb%3Ac\nd%25.c,line=7,title=cuguard leak::"),
            "{line}"
        );
    }
}

#[test]
fn sarif_places_odd_paths_as_uri_references() {
    let v = placed_at("/root/my dir/a,b:c\nd%.c");
    let mut out = Vec::new();
    sarif::Sarif::write(&v, &mut out, &Options::default()).unwrap();
    let log: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let run = &log["runs"][0];
    assert_eq!(
        run["originalUriBaseIds"]["%SRCROOT%"]["uri"],
        "file:///root/"
    );
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), v.sites.counting());
    for r in results {
        let physical = &r["locations"][0]["physicalLocation"];
        assert_eq!(
            physical["artifactLocation"]["uri"],
            "my%20dir/a%2Cb%3Ac%0Ad%25.c"
        );
        assert_eq!(physical["region"]["startLine"], 7);
    }
    // Outside the root: logical locations only.
    let v = placed_at("/elsewhere/a.c");
    let mut out = Vec::new();
    sarif::Sarif::write(&v, &mut out, &Options::default()).unwrap();
    let log: serde_json::Value = serde_json::from_slice(&out).unwrap();
    for r in log["runs"][0]["results"].as_array().unwrap() {
        assert!(r["locations"][0].get("physicalLocation").is_none(), "{r}");
        assert!(
            r["locations"][0]["logicalLocations"][0]["name"].is_string(),
            "{r}"
        );
    }
}
