//! Each rule on constructed versions: a mismatch found, a match not flagged; and the line.

use cuguard_format::{Framework, Reason, Report, Runtime, Versions};

use super::rules::{Facts, RULES, driver_cuda};
use super::{VersionsSummary, check};

fn fw(name: &str, version: &str, cuda: Option<&str>) -> Framework {
    Framework {
        name: name.into(),
        version: version.into(),
        package: name.into(),
        cuda: cuda.map(String::from),
        site: "/venv/lib/python3.11/site-packages".into(),
    }
}

fn rt(version: &str, path: &str) -> Runtime {
    Runtime {
        version: Some(version.into()),
        path: path.into(),
    }
}

fn versions(runtimes: Vec<Runtime>, frameworks: Vec<Framework>) -> Versions {
    Versions {
        driver: None,
        runtimes,
        frameworks,
    }
}

/// The ids of the rules that fire on `v` under a driver of `driver` (cuDriverGetVersion).
fn fired(driver: i64, v: &Versions) -> Vec<&'static str> {
    check(&Facts {
        driver_cuda: driver_cuda(driver),
        versions: v,
    })
    .into_iter()
    .map(|m| m.rule)
    .collect()
}

#[test]
fn a_framework_or_runtime_of_a_newer_cuda_major_than_the_driver_is_a_mismatch() {
    let v = versions(
        vec![rt(
            "12.4.127",
            "/venv/nvidia/cuda_runtime/lib/libcudart.so.12",
        )],
        vec![fw("torch", "2.5.1+cu124", Some("12.4"))],
    );
    let found = check(&Facts {
        driver_cuda: driver_cuda(11080),
        versions: &v,
    });
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].rule, "cuda-newer-than-driver");
    assert!(
        found[0].message.starts_with(
            "torch 2.5.1+cu124 is built for CUDA 12.4, the driver supports CUDA 11.8: a newer \
             CUDA major release does not run on this driver"
        ),
        "{}",
        found[0].message
    );
    assert!(
        found[1]
            .message
            .starts_with("runtime 12.4.127 is CUDA 12, the driver supports CUDA 11.8: "),
        "{}",
        found[1].message
    );
}

#[test]
fn a_newer_minor_of_the_drivers_major_and_an_unknown_driver_are_not_flagged() {
    let v = versions(
        vec![rt("13.5.37", "/venv/nvidia/cu13/lib/libcudart.so.13")],
        vec![
            fw("cuda-bindings", "13.5.0", Some("13.5")),
            fw("torch", "2.9.0", Some("12.8")),
        ],
    );
    assert!(fired(13000, &v).is_empty(), "minor-version compatibility");
    assert!(fired(-1, &v).is_empty(), "the driver's CUDA unknown");
}

#[test]
fn cudf_and_rmm_of_different_releases_are_a_mismatch() {
    let v = versions(
        Vec::new(),
        vec![
            fw("cudf", "25.10.00", Some("12")),
            fw("pylibcudf", "25.10.0", Some("12")),
            fw("rmm", "25.08.1", Some("12")),
        ],
    );
    let found = check(&Facts {
        driver_cuda: driver_cuda(12080),
        versions: &v,
    });
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].rule, "rapids-releases-differ");
    assert!(
        found[0].message.starts_with(
            "cudf 25.10.00, pylibcudf 25.10.0, rmm 25.08.1 are of RAPIDS releases 25.08 and 25.10: "
        ),
        "{}",
        found[0].message
    );
}

#[test]
fn cudf_and_rmm_of_one_release_are_not_flagged_however_spelled() {
    let v = versions(
        Vec::new(),
        vec![
            fw("cudf", "25.04.00", None),
            fw("rmm", "25.4.1", None),
            fw("librmm", "25.04.01a12", None),
            fw("cupy", "13.3.0", Some("12")),
        ],
    );
    assert!(fired(12080, &v).is_empty());
}

#[test]
fn two_runtimes_in_one_process_are_a_mismatch_and_one_is_not() {
    let two = versions(
        vec![
            rt(
                "12.4.127",
                "/usr/local/cuda-12.4/lib64/libcudart.so.12.4.127",
            ),
            rt("13", "/opt/conda/lib/libcudart.so.13"),
        ],
        Vec::new(),
    );
    let found = check(&Facts {
        driver_cuda: driver_cuda(13000),
        versions: &two,
    });
    assert_eq!(
        found.iter().map(|m| m.rule).collect::<Vec<_>>(),
        ["two-runtimes"]
    );
    assert!(found[0].message.starts_with(
        "2 CUDA runtimes are loaded: 12.4.127 (/usr/local/cuda-12.4/lib64/libcudart.so.12.4.127), \
         13 (/opt/conda/lib/libcudart.so.13): "
    ));
    let one = versions(two.runtimes[..1].to_vec(), Vec::new());
    assert!(fired(13000, &one).is_empty());
}

#[test]
fn every_rule_has_an_id_its_wording_and_a_citation() {
    let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), RULES.len(), "ids are unique");
    for r in &RULES {
        assert!(!r.checks.is_empty() && !r.wording.is_empty(), "{}", r.id);
        assert!(
            !r.citations.is_empty() && r.citations.iter().all(|c| c.starts_with("https://")),
            "{}",
            r.id
        );
    }
}

#[test]
fn the_line_names_the_driver_each_runtime_and_each_framework() {
    let process = cuguard_format::Process {
        pid: 1,
        ppid: 0,
        exe: "/usr/bin/python3".into(),
        argv: vec!["python3".into()],
        hostname: "h".into(),
        rank: None,
        start_unix_ms: 0,
        end_unix_ms: 0,
        labels: None,
    };
    let mut r = Report::new(true, Reason::Exit, process);
    assert!(VersionsSummary::of(&r).is_none(), "no versions, no line");
    r.driver.version = 13000;
    let mut v = versions(
        vec![rt("13.0.96", "/venv/nvidia/cu13/lib/libcudart.so.13")],
        vec![
            fw("torch", "2.9.0+cu130", Some("13.0")),
            fw("cuda-bindings", "13.0.1", Some("13.0")),
        ],
    );
    v.driver = Some("580.159.04".into());
    r.versions = Some(v);
    let s = VersionsSummary::of(&r).unwrap();
    assert_eq!(
        s.line,
        "driver 580.159.04 (CUDA 13.0) · runtime 13.0.96 · torch 2.9.0+cu130 (CUDA 13.0) · \
         cuda-bindings 13.0.1"
    );
    assert!(s.mismatches.is_empty());
    r.versions = Some(Versions::default());
    r.driver.version = -1;
    assert_eq!(VersionsSummary::of(&r).unwrap().line, "nothing known");
}
