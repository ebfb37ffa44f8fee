//! The report format's `versions`: what the process had loaded whose versions must match each
//! other — the driver's release, every CUDA runtime mapped, and the frameworks found by the
//! shared objects they mapped.
//!
//! The shim fills it in at report time from `/proc/self/maps` and the frameworks' installed
//! metadata, by names and files alone (it never asks CUDA for these); `cuguard` reads it and
//! names the known mismatches (its rules table: `src/versions/rules.rs`). The CUDA version the
//! driver supports is not repeated here: it is the report's `driver.version`.

use serde::{Deserialize, Serialize};

/// `versions`: the driver's release, the CUDA runtimes and the frameworks of the process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    /// The driver's release (e.g. `"580.159.04"`), from the file name of the `libcuda.so.*` the
    /// process mapped; absent when that name carries none (the simulated driver's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Every CUDA runtime (`libcudart.so*`) mapped in the process, by path, in the order of
    /// their addresses. More than one is a mismatch.
    #[serde(default)]
    pub runtimes: Vec<Runtime>,
    /// The frameworks whose shared objects the process mapped, in a fixed order (PyTorch,
    /// CuPy, the RAPIDS libraries, JAX, numba, NVIDIA's CUDA Python).
    #[serde(default)]
    pub frameworks: Vec<Framework>,
}

/// `versions.runtimes[]`: one CUDA runtime library mapped in the process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runtime {
    /// Its version: from its file name (`libcudart.so.12.4.127` → `"12.4.127"`), else from the
    /// Python distribution that installed it (`nvidia-cuda-runtime-cu12`), else its soname's
    /// major version (`libcudart.so.13` → `"13"`); absent when none says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The mapped file's path.
    pub path: String,
}

/// `versions.frameworks[]`: one framework, from its installed metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Framework {
    /// What it is, whatever its distribution is called: `"torch"`, `"cupy"`, `"cudf"`,
    /// `"libcudf"`, `"pylibcudf"`, `"rmm"`, `"librmm"`, `"jax"`, `"jaxlib"`,
    /// `"jax-cuda-plugin"`, `"numba"`, `"numba-cuda"`, `"cuda-bindings"`, `"cuda-core"`.
    pub name: String,
    /// Its version, as its metadata's `Version:` says (e.g. `"2.5.1+cu124"`).
    pub version: String,
    /// The distribution that installed it (e.g. `"cupy-cuda12x"`, `"rmm-cu13"`).
    pub package: String,
    /// The CUDA version it was built for, where it says (PyTorch's `torch.version.cuda`; a
    /// `-cu12`, `-cuda12x` or `-cuda12` in the distribution's name; cuda-bindings' own
    /// major.minor); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
    /// The directory it was installed into (the `site-packages` that holds it).
    pub site: String,
}
