//! The known version mismatches: one table, [`RULES`], one row a rule, each citing where it
//! comes from. A rule reads a report's [`Facts`] and names each thing it finds; the summary
//! prints each finding as a `mismatch:` line with the row's id (`docs/cli.md`, "The versions
//! line", lists them).
//!
//! To add a rule: a row here (its id, what it checks, the wording of its consequence, the pages
//! that state it, its finder) and a unit test in `tests.rs` of a mismatch found and of a match
//! not flagged.

use cuguard_format::Versions;

/// What the rules read of one report.
pub struct Facts<'a> {
    /// The CUDA version the driver supports (`driver.version`, `cuDriverGetVersion`), as
    /// (major, minor); `None` when the report does not know it.
    pub driver_cuda: Option<(u32, u32)>,
    /// The report's `versions`.
    pub versions: &'a Versions,
}

/// One row of the table.
pub struct Rule {
    /// A stable id, printed with each finding.
    pub id: &'static str,
    /// What it checks, in words.
    pub checks: &'static str,
    /// What a finding means for the program and what to do, appended to each finding.
    pub wording: &'static str,
    /// Where the rule is stated: the pages, first the one that states it.
    pub citations: &'static [&'static str],
    /// Each mismatch the rule finds, as what was found ("torch 2.5.1 is built for CUDA 12.4
    /// …"); empty when none.
    pub find: fn(&Facts<'_>) -> Vec<String>,
}

/// The rules, in the order their findings are printed.
pub const RULES: [Rule; 3] = [
    Rule {
        id: "cuda-newer-than-driver",
        checks: "a framework built for a CUDA major version newer than the one the driver \
                 supports, or a CUDA runtime of one",
        wording: "a newer CUDA major release does not run on this driver (minor-version \
                  compatibility holds within one major release only)",
        citations: &[
            "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html",
        ],
        find: newer_than_driver,
    },
    Rule {
        id: "rapids-releases-differ",
        checks: "cuDF (cudf, libcudf, pylibcudf) and RMM (rmm, librmm) of different RAPIDS \
                 releases (their versions' YY.MM)",
        wording: "RAPIDS libraries are released together and work only with their own \
                  release's",
        citations: &[
            "https://docs.rapids.ai/install/",
            "https://github.com/NVIDIA/cudf/issues/8404",
        ],
        find: rapids_releases,
    },
    Rule {
        id: "two-runtimes",
        checks: "more than one CUDA runtime library (libcudart) mapped in one process",
        wording: "runtime state (streams, events, pools) is only safe to share between \
                  components of one runtime",
        citations: &[
            "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#cuda-runtime",
            "https://github.com/cupy/cupy/issues/6842",
        ],
        find: two_runtimes,
    },
];

/// The CUDA (major, minor) of `cuDriverGetVersion`'s number (13000 → (13, 0), 12040 →
/// (12, 4)); `None` for an unknown (negative) one.
pub fn driver_cuda(version: i64) -> Option<(u32, u32)> {
    let v = u32::try_from(version).ok().filter(|&v| v > 0)?;
    Some((v / 1000, (v % 1000) / 10))
}

/// The major version a version string starts with (`"12.4.127"` → 12).
fn major(version: &str) -> Option<u32> {
    version.split(['.', '+']).next()?.parse().ok()
}

fn newer_than_driver(f: &Facts<'_>) -> Vec<String> {
    let Some((driver, minor)) = f.driver_cuda else {
        return Vec::new();
    };
    let supports = format!("the driver supports CUDA {driver}.{minor}");
    let frameworks = f.versions.frameworks.iter().filter_map(|fw| {
        let cuda = fw.cuda.as_deref()?;
        (major(cuda)? > driver).then(|| {
            format!(
                "{} {} is built for CUDA {cuda}, {supports}",
                fw.name, fw.version
            )
        })
    });
    let runtimes = f.versions.runtimes.iter().filter_map(|rt| {
        let version = rt.version.as_deref()?;
        let m = major(version)?;
        (m > driver).then(|| format!("runtime {version} is CUDA {m}, {supports}"))
    });
    frameworks.chain(runtimes).collect()
}

/// The RAPIDS libraries a release is read from.
const RAPIDS: [&str; 5] = ["cudf", "libcudf", "pylibcudf", "rmm", "librmm"];

/// A RAPIDS version's release, (YY, MM): `"25.10.01"` → (25, 10); `"25.4.0"` and `"25.04.00"`
/// are one release.
fn release(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split(['.', '+', 'a', 'b']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn rapids_releases(f: &Facts<'_>) -> Vec<String> {
    let rapids: Vec<_> = f
        .versions
        .frameworks
        .iter()
        .filter(|fw| RAPIDS.contains(&fw.name.as_str()))
        .filter_map(|fw| Some((fw, release(&fw.version)?)))
        .collect();
    let mut releases: Vec<(u32, u32)> = rapids.iter().map(|(_, r)| *r).collect();
    releases.sort_unstable();
    releases.dedup();
    if releases.len() < 2 {
        return Vec::new();
    }
    let named: Vec<String> = rapids
        .iter()
        .map(|(fw, _)| format!("{} {}", fw.name, fw.version))
        .collect();
    let listed: Vec<String> = releases
        .iter()
        .map(|(y, m)| format!("{y}.{m:02}"))
        .collect();
    vec![format!(
        "{} are of RAPIDS releases {}",
        named.join(", "),
        listed.join(" and ")
    )]
}

fn two_runtimes(f: &Facts<'_>) -> Vec<String> {
    let runtimes = &f.versions.runtimes;
    if runtimes.len() < 2 {
        return Vec::new();
    }
    let listed: Vec<String> = runtimes
        .iter()
        .map(|rt| format!("{} ({})", rt.version.as_deref().unwrap_or("?"), rt.path))
        .collect();
    vec![format!(
        "{} CUDA runtimes are loaded: {}",
        runtimes.len(),
        listed.join(", ")
    )]
}
