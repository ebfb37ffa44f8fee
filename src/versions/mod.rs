//! The versions that must match: a report's `versions` (the driver's release, every CUDA
//! runtime loaded, the frameworks) with the CUDA version the driver supports (`driver.version`),
//! condensed for the summary into one line ([`VersionsSummary::line`]) and the known mismatches
//! the rules of [`rules::RULES`] find in them.
//!
//! ```text
//! versions driver 580.159.04 (CUDA 13.0) · runtime 12.4.127 · torch 2.5.1+cu124 (CUDA 12.4)
//!   mismatch: …: … [cuda-newer-than-driver]
//! ```

pub mod rules;

use serde::Serialize;

use cuguard_format::{Framework, Report, Runtime};
use rules::{Facts, RULES};

/// One process's versions, as every summary format shows them.
#[derive(Clone, Debug, Serialize)]
pub struct VersionsSummary {
    /// The versions line, without its `versions ` label.
    pub line: String,
    /// The driver's release (`versions.driver`), when its file name says.
    pub driver_release: Option<String>,
    /// The CUDA version the driver supports (`driver.version`: 13000 → `"13.0"`), when known.
    pub driver_cuda: Option<String>,
    /// The CUDA runtimes loaded.
    pub runtimes: Vec<Runtime>,
    /// The frameworks present.
    pub frameworks: Vec<Framework>,
    /// The mismatches found, in the order of the rules.
    pub mismatches: Vec<Mismatch>,
}

/// One mismatch a rule found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The rule's id (`rules::RULES`).
    pub rule: &'static str,
    /// What was found, then what it means.
    pub message: String,
    /// Where the rule is stated.
    pub citations: &'static [&'static str],
}

impl VersionsSummary {
    /// The versions of `report`; `None` when it has no `versions` (older reports, the report
    /// written at a signal).
    pub fn of(report: &Report) -> Option<VersionsSummary> {
        let versions = report.versions.as_ref()?;
        let cuda = rules::driver_cuda(report.driver.version);
        let facts = Facts {
            driver_cuda: cuda,
            versions,
        };
        let mismatches = check(&facts);
        let driver_cuda = cuda.map(|(major, minor)| format!("{major}.{minor}"));
        let mut parts = Vec::new();
        match (&versions.driver, &driver_cuda) {
            (Some(release), Some(cuda)) => parts.push(format!("driver {release} (CUDA {cuda})")),
            (Some(release), None) => parts.push(format!("driver {release}")),
            (None, Some(cuda)) => parts.push(format!("driver CUDA {cuda}")),
            (None, None) => {}
        }
        for rt in &versions.runtimes {
            parts.push(format!("runtime {}", rt.version.as_deref().unwrap_or("?")));
        }
        parts.extend(versions.frameworks.iter().map(framework_text));
        if parts.is_empty() {
            parts.push("nothing known".to_string());
        }
        Some(VersionsSummary {
            line: parts.join(" · "),
            driver_release: versions.driver.clone(),
            driver_cuda,
            runtimes: versions.runtimes.clone(),
            frameworks: versions.frameworks.clone(),
            mismatches,
        })
    }
}

/// Every rule's findings on `facts`, in the order of the rules.
pub fn check(facts: &Facts<'_>) -> Vec<Mismatch> {
    RULES
        .iter()
        .flat_map(|rule| {
            (rule.find)(facts).into_iter().map(|found| Mismatch {
                rule: rule.id,
                message: format!("{found}: {}", rule.wording),
                citations: rule.citations,
            })
        })
        .collect()
}

/// `torch 2.5.1+cu124 (CUDA 12.4)`: the CUDA it was built for when its version does not
/// already begin with it (`cuda-bindings 13.5.0`).
fn framework_text(f: &Framework) -> String {
    match f.cuda.as_deref() {
        Some(cuda) if !f.version.starts_with(&format!("{cuda}.")) && f.version != cuda => {
            format!("{} {} (CUDA {cuda})", f.name, f.version)
        }
        _ => format!("{} {}", f.name, f.version),
    }
}

#[cfg(test)]
mod tests;
