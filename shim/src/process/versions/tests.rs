//! The versions read from constructed maps and metadata (an in-memory file system).

use std::collections::HashMap;

use super::*;

/// Files and directories held in memory.
#[derive(Default)]
struct Mem(HashMap<String, String>);

impl Mem {
    fn with(mut self, path: &str, text: &str) -> Mem {
        self.0.insert(path.to_string(), text.to_string());
        self
    }
    /// A `.dist-info` directory with its METADATA.
    fn dist(self, site: &str, dir: &str, name: &str, version: &str) -> Mem {
        self.with(
            &format!("{site}/{dir}/METADATA"),
            &format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nVersion: 0\n"),
        )
    }
}

impl Files for Mem {
    fn read(&self, path: &str) -> Option<String> {
        self.0.get(path).cloned()
    }
    fn list(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{dir}/");
        let mut names: Vec<String> = self
            .0
            .keys()
            .filter_map(|p| p.strip_prefix(&prefix)?.split('/').next().map(String::from))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

const SITE: &str = "/venv/lib/python3.11/site-packages";

fn maps(paths: &[&str]) -> String {
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!("7f{i:02x}00000000-7f{i:02x}00001000 r-xp 00000000 08:01 {i}   {p}\n")
        })
        .chain(["7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]\n".to_string()])
        .collect()
}

#[test]
fn pytorch_with_its_cuda_and_runtime_from_the_nvidia_distribution() {
    let files = Mem::default()
        .dist(SITE, "torch-2.5.1.dist-info", "torch", "2.5.1+cu124")
        .with(
            &format!("{SITE}/torch/version.py"),
            "from typing import Optional\n__version__ = '2.5.1+cu124'\ncuda: Optional[str] = '12.4'\n",
        )
        .dist(
            SITE,
            "nvidia_cuda_runtime_cu12-12.4.127.dist-info",
            "nvidia-cuda-runtime-cu12",
            "12.4.127",
        );
    let m = maps(&[
        "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
        &format!("{SITE}/torch/lib/libtorch_cuda.so"),
        &format!("{SITE}/torch/lib/libc10.so"),
        &format!("{SITE}/nvidia/cuda_runtime/lib/libcudart.so.12"),
    ]);
    let v = from_maps(&m, &[], &files);
    assert_eq!(v.driver.as_deref(), Some("580.159.04"));
    assert_eq!(
        v.runtimes,
        [Runtime {
            version: Some("12.4.127".into()),
            path: format!("{SITE}/nvidia/cuda_runtime/lib/libcudart.so.12"),
        }]
    );
    assert_eq!(
        v.frameworks,
        [Framework {
            name: "torch".into(),
            version: "2.5.1+cu124".into(),
            package: "torch".into(),
            cuda: Some("12.4".into()),
            site: SITE.into(),
        }]
    );
}

#[test]
fn numba_cuda_bindings_and_two_runtimes_in_a_fixed_order() {
    let files = Mem::default()
        .dist(SITE, "numba-0.68.1.dist-info", "numba", "0.68.1")
        .dist(SITE, "numba_cuda-0.30.4.dist-info", "numba-cuda", "0.30.4")
        .dist(
            SITE,
            "cuda_bindings-13.5.0.dist-info",
            "cuda-bindings",
            "13.5.0",
        )
        .dist(SITE, "cuda_core-1.2.2.dist-info", "cuda-core", "1.2.2")
        .dist(SITE, "numpy-2.3.0.dist-info", "numpy", "2.3.0");
    let m = maps(&[
        &format!("{SITE}/cuda/bindings/driver.cpython-311-x86_64-linux-gnu.so"),
        &format!("{SITE}/numba_cuda/numba/cuda/cext/_dispatcher.cpython-311-x86_64-linux-gnu.so"),
        &format!("{SITE}/numba/_helperlib.cpython-311-x86_64-linux-gnu.so"),
        &format!("{SITE}/cuda/core/cu13/_stream.cpython-311-x86_64-linux-gnu.so"),
        &format!("{SITE}/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so"),
        "/usr/local/cuda-12.4/lib64/libcudart.so.12.4.127",
        "/opt/conda/lib/libcudart.so.13",
        "/work/target/debug/libcuguard_simcuda.so",
    ]);
    let v = from_maps(&m, &[], &files);
    assert_eq!(
        v.driver, None,
        "the simulated driver's name carries no release"
    );
    let names: Vec<(&str, &str, Option<&str>)> = v
        .frameworks
        .iter()
        .map(|f| (f.name.as_str(), f.version.as_str(), f.cuda.as_deref()))
        .collect();
    assert_eq!(
        names,
        [
            ("numba", "0.68.1", None),
            ("numba-cuda", "0.30.4", None),
            ("cuda-bindings", "13.5.0", Some("13.5")),
            ("cuda-core", "1.2.2", None),
        ]
    );
    let runtimes: Vec<Option<&str>> = v.runtimes.iter().map(|r| r.version.as_deref()).collect();
    assert_eq!(runtimes, [Some("12.4.127"), Some("13")]);
}

#[test]
fn rapids_and_cupy_distributions_carry_their_cuda() {
    let files = Mem::default()
        .dist(SITE, "cudf_cu12-25.10.0.dist-info", "cudf-cu12", "25.10.0")
        .dist(SITE, "rmm_cu12-25.08.1.dist-info", "rmm-cu12", "25.08.1")
        .dist(
            SITE,
            "librmm_cu12-25.08.1.dist-info",
            "librmm-cu12",
            "25.08.1",
        )
        .dist(
            SITE,
            "cupy_cuda12x-13.3.0.dist-info",
            "cupy-cuda12x",
            "13.3.0",
        );
    let m = maps(&[
        &format!("{SITE}/cudf/_lib/column.cpython-311-x86_64-linux-gnu.so"),
        &format!("{SITE}/librmm/lib64/librmm.so"),
        &format!("{SITE}/rmm/pylibrmm/device_buffer.cpython-311-x86_64-linux-gnu.so"),
        &format!("{SITE}/cupy/_core/core.cpython-311-x86_64-linux-gnu.so"),
    ]);
    let v = from_maps(&m, &[], &files);
    let got: Vec<(&str, &str, &str, Option<&str>)> = v
        .frameworks
        .iter()
        .map(|f| {
            (
                f.name.as_str(),
                f.package.as_str(),
                f.version.as_str(),
                f.cuda.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("cupy", "cupy-cuda12x", "13.3.0", Some("12")),
            ("cudf", "cudf-cu12", "25.10.0", Some("12")),
            ("rmm", "rmm-cu12", "25.08.1", Some("12")),
            ("librmm", "librmm-cu12", "25.08.1", Some("12")),
        ]
    );
}

#[test]
fn packages_installed_outside_site_packages_and_pure_python_ones_declared_are_named() {
    // As on the H100 (run 40): cuDF and RMM installed with `pip install --target /tmp/site`,
    // cuDF's own package mapping no file (the Python side declares its `__init__.py`).
    let target = "/tmp/site";
    let files = Mem::default()
        .dist(
            target,
            "cudf_cu13-26.10.2.dist-info",
            "cudf-cu13",
            "26.10.2",
        )
        .dist(
            target,
            "libcudf_cu13-26.10.2.dist-info",
            "libcudf-cu13",
            "26.10.2",
        )
        .dist(target, "rmm_cu13-26.10.0.dist-info", "rmm-cu13", "26.10.0")
        .dist(
            target,
            "librmm_cu13-26.10.0.dist-info",
            "librmm-cu13",
            "26.10.0",
        )
        // A folder named as a family, without that family's metadata beside it, is no site.
        .with("/home/me/torch/README", "");
    let m = maps(&[
        "/tmp/site/libcudf/lib64/libcudf.so",
        "/tmp/site/librmm/lib64/librmm.so",
        "/tmp/site/rmm/pylibrmm/memory_resource.abi3.so",
        "/home/me/torch/build/lib/libc10.so",
    ]);
    let declared = [
        "/tmp/site/cudf/__init__.py".to_string(),
        "relative/cupy/x.py".to_string(),
    ];
    let v = from_maps(&m, &declared, &files);
    let got: Vec<(&str, &str, Option<&str>, &str)> = v
        .frameworks
        .iter()
        .map(|f| {
            (
                f.name.as_str(),
                f.version.as_str(),
                f.cuda.as_deref(),
                f.site.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("cudf", "26.10.2", Some("13"), target),
            ("libcudf", "26.10.2", Some("13"), target),
            ("rmm", "26.10.0", Some("13"), target),
            ("librmm", "26.10.0", Some("13"), target),
        ]
    );
    // Without the declaration cuDF's own package is not named (its files were never mapped).
    let v = from_maps(&m, &[], &files);
    assert!(v.frameworks.iter().all(|f| f.name != "cudf"), "{v:?}");
}

#[test]
fn missing_metadata_leaves_the_entry_out_or_falls_back_to_the_directory_name() {
    // No METADATA at all: the directory's name gives the version; no directory: nothing.
    let files = Mem::default().with(&format!("{SITE}/jaxlib-0.4.35.dist-info/RECORD"), "");
    let m = maps(&[
        &format!("{SITE}/jaxlib/xla_extension.so"),
        &format!("{SITE}/torch/lib/libtorch.so"),
        "/nowhere/libcudart.so",
    ]);
    let v = from_maps(&m, &[], &files);
    let got: Vec<(&str, &str, &str)> = v
        .frameworks
        .iter()
        .map(|f| (f.name.as_str(), f.package.as_str(), f.version.as_str()))
        .collect();
    assert_eq!(got, [("jaxlib", "jaxlib", "0.4.35")]);
    assert_eq!(v.runtimes[0].version, None);
    // Nothing mapped: an empty record, no error.
    assert_eq!(from_maps("", &[], &files), Versions::default());
}

#[test]
fn names_and_files_are_parsed_as_they_are_spelled() {
    assert_eq!(cuda_of_dist("cupy_cuda12x").as_deref(), Some("12"));
    assert_eq!(cuda_of_dist("cupy_cuda115").as_deref(), Some("11.5"));
    assert_eq!(cuda_of_dist("cupy_cuda92").as_deref(), Some("9.2"));
    assert_eq!(cuda_of_dist("rmm_cu13").as_deref(), Some("13"));
    assert_eq!(cuda_of_dist("jax_cuda12_plugin").as_deref(), Some("12"));
    assert_eq!(cuda_of_dist("cudf").as_deref(), None);
    assert_eq!(cuda_of_dist("cupy").as_deref(), None);
    assert!(rapids("pylibcudf_cu12", "pylibcudf") && !rapids("cudf_polars_cu12", "cudf"));
    assert!(jax_plugin("jax_cuda12_plugin") && !jax_plugin("jax_cuda12_pjrt"));
    assert_eq!(torch_cuda("cuda = '11.8'\n").as_deref(), Some("11.8"));
    assert_eq!(torch_cuda("cuda: Optional[str] = None\n"), None);
    assert_eq!(
        torch_cuda("cudnn = '9'\ncuda = \"12.6\"\n").as_deref(),
        Some("12.6")
    );
    assert_eq!(
        mapped_paths(
            "1-2 r-xp 0 0:0 1   /a b/lib x.so (deleted)\n1-2 r-xp 0 0:0 1 /c\n3-4 r 0 0:0 0\n"
        ),
        ["/a b/lib x.so", "/c"]
    );
    assert_eq!(
        site_of("/u/lib/python3/dist-packages/torch/lib/a.so"),
        Some(("/u/lib/python3/dist-packages", "torch/lib/a.so"))
    );
    assert_eq!(major_minor("13.5.0").as_deref(), Some("13.5"));
}
