//! The versions that must match, for the report's `versions`: the driver's release, every CUDA
//! runtime mapped, and the frameworks found by the shared objects they mapped.
//!
//! Read when a report is gathered (never while loading, never on the allocation path), by
//! names and files alone: the mapped files of `/proc/self/maps`, and beside a framework's files
//! its installed metadata (`<site>/<dist>-<version>.dist-info/METADATA`, PyTorch's
//! `<site>/torch/version.py`). CUDA is never asked: a runtime's version comes from its file
//! name (`libcudart.so.12.4.127`), else from the Python distribution that installed it
//! (`nvidia-cuda-runtime*`), else from its soname. A file that is missing or unreadable leaves
//! its entry out; nothing here fails.
//!
//! A mapped file under `<site>/torch/` names PyTorch; `cupy/` CuPy; `cudf/`, `libcudf/`,
//! `pylibcudf/`, `rmm/`, `librmm/` the RAPIDS libraries (`-cu12` distributions included);
//! `jaxlib/` JAX and jaxlib, `jax_plugins/` JAX's CUDA plugin; `numba/` or `numba_cuda/` numba
//! and numba-cuda; `cuda/bindings/` cuda-bindings and `cuda/core/` cuda.core ([`FAMILIES`]).
//!
//! A site is a `site-packages` or `dist-packages` directory, or, for packages installed
//! elsewhere (`pip install --target DIR`, a `PYTHONPATH` folder), the directory holding a
//! family's folder beside that family's `.dist-info` (seen on the H100: cuDF and RMM installed
//! with `--target` were left out of the line). Pure-Python packages map no file: the Python
//! side names the files of the frameworks it imported ([`now`]'s `declared`), read as if mapped.

use std::collections::HashMap;

use cuguard_format::{Framework, Runtime, Versions};

/// The versions of what this process has mapped now, and of the frameworks whose files the
/// Python side declared (`declared`: their modules' files); `None` when `/proc/self/maps`
/// cannot be read.
pub fn now(declared: &[String]) -> Option<Versions> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    Some(from_maps(&maps, declared, &Disk))
}

/// What the module reads besides the maps: a file's text, a directory's entries.
pub trait Files {
    /// The file's text, if it can be read.
    fn read(&self, path: &str) -> Option<String>;
    /// The names in a directory (empty when it cannot be read).
    fn list(&self, dir: &str) -> Vec<String>;
}

/// The real file system.
struct Disk;

impl Files for Disk {
    fn read(&self, path: &str) -> Option<String> {
        // Metadata files are small; a larger one is not what we look for.
        let f = std::fs::File::open(path).ok()?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(f, 1 << 20), &mut text).ok()?;
        Some(text)
    }

    fn list(&self, dir: &str) -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One framework the report may name: its name there, the distributions that install it (by
/// their normalized names: lower case, `-` and `.` as `_`), and where its CUDA version is read.
pub struct Family {
    pub name: &'static str,
    dist: fn(&str) -> bool,
    cuda: Cuda,
}

/// Where a framework says which CUDA it was built for.
#[derive(Clone, Copy)]
enum Cuda {
    /// It does not say.
    None,
    /// `torch/version.py`'s `cuda`.
    Torch,
    /// The distribution's name: `cupy_cuda12x`, `rmm_cu13`, `jax_cuda12_plugin`.
    DistName,
    /// Its own version's major.minor (cuda-bindings follows CUDA's numbering).
    OwnVersion,
}

/// The frameworks, in the order the report lists them.
pub const FAMILIES: [Family; 14] = [
    family("torch", |d| d == "torch", Cuda::Torch),
    family(
        "cupy",
        |d| d == "cupy" || d.starts_with("cupy_cuda"),
        Cuda::DistName,
    ),
    family("cudf", |d| rapids(d, "cudf"), Cuda::DistName),
    family("libcudf", |d| rapids(d, "libcudf"), Cuda::DistName),
    family("pylibcudf", |d| rapids(d, "pylibcudf"), Cuda::DistName),
    family("rmm", |d| rapids(d, "rmm"), Cuda::DistName),
    family("librmm", |d| rapids(d, "librmm"), Cuda::DistName),
    family("jax", |d| d == "jax", Cuda::None),
    family("jaxlib", |d| d == "jaxlib", Cuda::None),
    family("jax-cuda-plugin", jax_plugin, Cuda::DistName),
    family("numba", |d| d == "numba", Cuda::None),
    family("numba-cuda", |d| d == "numba_cuda", Cuda::None),
    family("cuda-bindings", |d| d == "cuda_bindings", Cuda::OwnVersion),
    family("cuda-core", |d| d == "cuda_core", Cuda::None),
];

const fn family(name: &'static str, dist: fn(&str) -> bool, cuda: Cuda) -> Family {
    Family { name, dist, cuda }
}

/// A RAPIDS distribution: `base` itself or `base_cuNN`.
fn rapids(dist: &str, base: &str) -> bool {
    dist == base
        || dist
            .strip_prefix(base)
            .and_then(|r| r.strip_prefix("_cu"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// JAX's CUDA plugin: `jax_cuda12_plugin`.
fn jax_plugin(dist: &str) -> bool {
    dist.strip_prefix("jax_cuda")
        .and_then(|r| r.strip_suffix("_plugin"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The families a file at `rel` (its path under its site directory) belongs to, as indices
/// into [`FAMILIES`].
fn families_of(rel: &str) -> &'static [usize] {
    let mut parts = rel.split('/');
    match (parts.next().unwrap_or(""), parts.next().unwrap_or("")) {
        ("torch", _) => &[0],
        ("cupy" | "cupy_backends", _) => &[1],
        ("cudf", _) => &[2],
        ("libcudf", _) => &[3],
        ("pylibcudf", _) => &[4],
        ("rmm", _) => &[5],
        ("librmm", _) => &[6],
        ("jaxlib", _) => &[7, 8],
        ("jax_plugins", _) => &[9],
        ("numba" | "numba_cuda", _) => &[10, 11],
        ("cuda", "bindings") => &[12],
        ("cuda", "core") => &[13],
        _ => &[],
    }
}

/// The versions that the mapped files listed in `maps` (the text of `/proc/self/maps`) and the
/// `declared` files name.
pub fn from_maps(maps: &str, declared: &[String], files: &dyn Files) -> Versions {
    let mut sites = Sites {
        files,
        listed: HashMap::new(),
    };
    let mut versions = Versions::default();
    // (family, site) pairs seen, in the order first seen.
    let mut found: Vec<(usize, String)> = Vec::new();
    let mut paths = mapped_paths(maps);
    for d in declared.iter().take(MAX_DECLARED) {
        if d.starts_with('/') && !paths.contains(&d.as_str()) {
            paths.push(d);
        }
    }
    for path in paths {
        let name = path.rsplit('/').next().unwrap_or(path);
        if let Some(rest) = name.strip_prefix("libcudart.so") {
            if !versions.runtimes.iter().any(|r| r.path == path) {
                let version = runtime_version(path, rest, &mut sites);
                versions.runtimes.push(Runtime {
                    version,
                    path: path.to_string(),
                });
            }
            continue;
        }
        if let Some(release) = name.strip_prefix("libcuda.so.").filter(|r| dotted(r, 2)) {
            versions.driver.get_or_insert_with(|| release.to_string());
            continue;
        }
        let Some((site, rel)) = site_of(path).or_else(|| target_site_of(path, &mut sites)) else {
            continue;
        };
        for &f in families_of(rel) {
            if !found.iter().any(|(g, s)| *g == f && s == site) {
                found.push((f, site.to_string()));
            }
        }
    }
    found.sort_by_key(|(f, _)| *f);
    for (f, site) in found {
        versions
            .frameworks
            .extend(sites.frameworks(&FAMILIES[f], &site));
    }
    versions
}

/// The path of each file mapped, once, in the order of their addresses.
fn mapped_paths(maps: &str) -> Vec<&str> {
    let mut seen: Vec<&str> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path; the path may hold spaces.
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start();
            rest = rest.find(' ').map_or("", |i| &rest[i..]);
        }
        let path = rest.trim();
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        if path.starts_with('/') && !seen.contains(&path) {
            seen.push(path);
        }
    }
    seen
}

/// `(site, rest)` for a path under a `site-packages` or `dist-packages` directory.
fn site_of(path: &str) -> Option<(&str, &str)> {
    let i = ["/site-packages/", "/dist-packages/"]
        .iter()
        .filter_map(|d| path.rfind(d).map(|i| i + d.len()))
        .max()?;
    Some((&path[..i - 1], &path[i..]))
}

/// The most declared files read.
pub const MAX_DECLARED: usize = 64;

/// `(site, rest)` for a path outside any `site-packages`: the deepest directory whose next
/// folder is a family's (`/opt/libs/rmm/librmm.so` → `/opt/libs`, `rmm/librmm.so`) and which
/// holds a `.dist-info` of that family. Only directories a family's folder names are listed.
fn target_site_of<'p>(path: &'p str, sites: &mut Sites<'_>) -> Option<(&'p str, &'p str)> {
    let slashes: Vec<usize> = path.match_indices('/').map(|(i, _)| i).collect();
    for &i in slashes.iter().rev() {
        let (site, rel) = (&path[..i], &path[i + 1..]);
        if site.is_empty() || !rel.contains('/') {
            continue;
        }
        let families = families_of(rel);
        if families
            .iter()
            .any(|&f| !sites.dists(site, FAMILIES[f].dist).is_empty())
        {
            return Some((site, rel));
        }
    }
    None
}

/// Whether `s` is at least `parts` numbers joined by dots.
fn dotted(s: &str, parts: usize) -> bool {
    s.split('.').count() >= parts
        && s.split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// A runtime's version: from its file name's tail after `libcudart.so` (`.12.4.127`), else from
/// the `nvidia-cuda-runtime*` distribution of its site (the one of its soname's major, when
/// several), else its soname's major.
fn runtime_version(path: &str, tail: &str, sites: &mut Sites<'_>) -> Option<String> {
    let numbers = tail.strip_prefix('.').filter(|t| dotted(t, 1));
    if let Some(full) = numbers.filter(|t| dotted(t, 3)) {
        return Some(full.to_string());
    }
    let major = numbers.map(|n| n.split('.').next().unwrap_or(n).to_string());
    let from_dist = site_of(path).and_then(|(site, _)| {
        let dists = sites.dists(site, |d| rapids(d, "nvidia_cuda_runtime"));
        let mut best = None;
        for (dir, _) in dists {
            let Some(meta) = sites.metadata(site, &dir) else {
                continue;
            };
            let same = major
                .as_deref()
                .is_none_or(|m| meta.version.split('.').next() == Some(m));
            if same || best.is_none() {
                best = Some(meta.version);
            }
        }
        best
    });
    from_dist.or(major)
}

/// A distribution's metadata: its `Name:` and `Version:`.
struct Metadata {
    name: String,
    version: String,
}

/// The site directories looked at, each listed once.
struct Sites<'a> {
    files: &'a dyn Files,
    listed: HashMap<String, Vec<String>>,
}

impl Sites<'_> {
    /// The `.dist-info` directories of `site` whose normalized distribution name `wanted`
    /// accepts, sorted, each with that name.
    fn dists(&mut self, site: &str, wanted: impl Fn(&str) -> bool) -> Vec<(String, String)> {
        let files = self.files;
        let names = self
            .listed
            .entry(site.to_string())
            .or_insert_with(|| files.list(site));
        let mut out: Vec<(String, String)> = names
            .iter()
            .filter_map(|entry| {
                let stem = entry.strip_suffix(".dist-info")?;
                let dist = normalized(stem.split('-').next()?);
                wanted(&dist).then(|| (entry.clone(), dist))
            })
            .collect();
        out.sort();
        out
    }

    /// The metadata of `site/dir`: its `METADATA` headers, the directory's name standing in
    /// for a missing version (`name-version.dist-info`).
    fn metadata(&self, site: &str, dir: &str) -> Option<Metadata> {
        let stem = dir.strip_suffix(".dist-info")?;
        let (dir_name, dir_version) = stem.split_once('-').unwrap_or((stem, ""));
        let text = self
            .files
            .read(&format!("{site}/{dir}/METADATA"))
            .unwrap_or_default();
        let header = |key: &str| {
            text.lines()
                .take_while(|l| !l.is_empty())
                .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
                .filter(|v| !v.is_empty())
        };
        let version = header("Version:").or_else(|| {
            Some(dir_version)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        })?;
        let name = header("Name:").unwrap_or_else(|| dir_name.replace('_', "-"));
        Some(Metadata { name, version })
    }

    /// The frameworks of `family` installed in `site`.
    fn frameworks(&mut self, family: &Family, site: &str) -> Vec<Framework> {
        let mut out = Vec::new();
        for (dir, dist) in self.dists(site, family.dist) {
            let Some(meta) = self.metadata(site, &dir) else {
                continue;
            };
            let cuda = match family.cuda {
                Cuda::None => None,
                Cuda::Torch => self
                    .files
                    .read(&format!("{site}/torch/version.py"))
                    .and_then(|t| torch_cuda(&t)),
                Cuda::DistName => cuda_of_dist(&dist),
                Cuda::OwnVersion => major_minor(&meta.version),
            };
            out.push(Framework {
                name: family.name.to_string(),
                version: meta.version,
                package: meta.name,
                cuda,
                site: site.to_string(),
            });
        }
        out
    }
}

/// A distribution's name normalized: lower case, `-` and `.` as `_`.
fn normalized(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

/// `cuda` of PyTorch's `version.py` (`cuda: Optional[str] = '12.4'`, or `cuda = '12.4'`);
/// `None` for a build without CUDA.
fn torch_cuda(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("cuda")?;
        if !rest.starts_with([' ', ':', '=']) {
            return None;
        }
        let value = rest.split_once('=')?.1.trim();
        let quoted = value
            .strip_prefix('\'')
            .and_then(|v| v.split_once('\''))
            .or_else(|| value.strip_prefix('"').and_then(|v| v.split_once('"')))?
            .0;
        Some(quoted.to_string()).filter(|v| !v.is_empty())
    })
}

/// The CUDA version a distribution's name carries: `cupy_cuda12x` → 12, `cupy_cuda115` → 11.5
/// (CuPy's older names), `jax_cuda12_plugin` → 12, `rmm_cu13` → 13.
fn cuda_of_dist(dist: &str) -> Option<String> {
    let digits_at = |i: usize| -> String {
        dist[i..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect()
    };
    if let Some(i) = dist.find("_cuda").map(|i| i + "_cuda".len()) {
        let d = digits_at(i);
        let major_only = dist[i + d.len()..].starts_with('x') || dist.starts_with("jax_");
        return match d.len() {
            0 => None,
            _ if major_only => Some(d),
            2 => Some(format!("{}.{}", &d[..1], &d[1..])),
            3 => Some(format!("{}.{}", &d[..2], &d[2..])),
            _ => Some(d),
        };
    }
    let i = dist.rfind("_cu")? + "_cu".len();
    let d = digits_at(i);
    (!d.is_empty() && i + d.len() == dist.len()).then_some(d)
}

/// `12.9` of `12.9.1`.
fn major_minor(version: &str) -> Option<String> {
    let mut parts = version.split('.');
    let major = parts.next().filter(|p| dotted(p, 1))?;
    match parts.next() {
        Some(minor) if dotted(minor, 1) => Some(format!("{major}.{minor}")),
        _ => Some(major.to_string()),
    }
}

#[cfg(test)]
mod tests;
