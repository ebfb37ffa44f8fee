//! The site rule: which frame of an allocation's stack a leak is charged to.
//!
//! A **site** is the first frame, from the allocation outward, that belongs to the user rather
//! than to plumbing: cuguard, the CUDA driver and runtime and CUDA libraries, known framework
//! allocators and framework internals (PyTorch, RMM, CuPy, numba, JAX), the C/C++ and Rust
//! runtimes and the Python interpreter. The plumbing list is built in ([`Plumbing::builtin`])
//! and users extend it ([`Plumbing::add`]). It is a pure function of symbolized frames:
//!
//! ```
//! use cuguard_symbolize::site::{Plumbing, SiteFrame, find_site};
//! let frames = [
//!     SiteFrame { module: "/usr/lib/libcudart.so.13", function: Some("cudaMalloc"), ..Default::default() },
//!     SiteFrame { module: "/opt/app/bin/solver", function: Some("make_buffers(int)"),
//!                 file: Some("/src/solver.cpp"), line: Some(42), ..Default::default() },
//!     SiteFrame { module: "/opt/app/bin/solver", function: Some("main"), ..Default::default() },
//! ];
//! let site = find_site(&frames, &Plumbing::builtin()).unwrap();
//! assert_eq!(site.index, 1);
//! ```
//!
//! `None` means every frame is plumbing (or unknown): for a Python program that is the normal
//! case, since the native stack ends in the interpreter. Run the same rule over the Python
//! frames (module `""`, `file` the script path): the built-in list has file patterns for the
//! frameworks' Python code, so the site is the user's own line.
//!
//! [`Plumbing`] is a thin layer over [`crate::rules::Rules`], whose site rules put plumbing in
//! tiers (never a site, framework internals, operations) and whose
//! [`Rules::find_site_with_kind`](crate::rules::Rules::find_site_with_kind) also picks a site
//! for a stack with no user frame (the operation that asked, else a framework frame).
//! [`find_site`] returns its user sites only.
//!
//! # Patterns
//!
//! `module:GLOB`, `function:GLOB` or `file:GLOB`; `*` matches any run of characters and `?`
//! one (the rules' language, [`crate::rules::Pattern`], also joins terms with `&` and negates
//! them with `!`; [`Plumbing::add`] takes one term, its glob as given). A module or file glob
//! without a `/` is matched against the base name, with one against the whole path. A function
//! glob is matched against the demangled name and against its qualified path without return
//! type, template arguments and parameters (`void* c10::Foo<int>::bar(long)` → `c10::Foo::bar`),
//! so `rmm::mr::*` and `cudaMalloc*` both work.
//!
//! # Fingerprint
//!
//! [`fingerprint`] hashes (FNV-1a, 64 bits, fixed: stable across runs, machines and Rust
//! versions) the module's base name, the function, the file's base name and the line; a frame
//! without function and file uses its module-relative offset instead. None of these depend on
//! ASLR (offsets are relative to the load base; no absolute address enters) or on where the
//! program is installed (base names only). The line is included because two allocations in one
//! function are two places to fix; the price is that editing lines above a site changes its
//! fingerprint across builds.

use crate::rules::{Field, Pattern, Rules, SiteKind, Tier};
pub use crate::site_frame::{Site, SiteFrame, fingerprint, qualified_path};

/// An invalid plumbing pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatternError(pub String);

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "bad plumbing pattern {:?}: expected module:GLOB, function:GLOB or file:GLOB",
            self.0
        )
    }
}

impl std::error::Error for PatternError {}

/// The specs of the built-in site rules, all tiers, in order (see [`Plumbing::builtin`] and
/// [`crate::rules`]).
pub const BUILTIN: &[&str] = crate::rules::SITE_SPECS;

/// A list of plumbing patterns: [`Rules`] seen as one list of frames that are not the user's.
#[derive(Clone, Debug, Default)]
pub struct Plumbing {
    rules: Rules,
}

impl Plumbing {
    /// The built-in list: the site rules of [`Rules::builtin`] ([`BUILTIN`]).
    pub fn builtin() -> Plumbing {
        Plumbing {
            rules: Rules::builtin(),
        }
    }

    /// An empty list.
    pub fn none() -> Plumbing {
        Plumbing::default()
    }

    /// Adds `module:GLOB`, `function:GLOB` or `file:GLOB` (to the rules, as a
    /// [`Tier::Framework`] rule before the built-in ones).
    pub fn add(&mut self, spec: &str) -> Result<(), PatternError> {
        let (field, glob) = spec
            .split_once(':')
            .ok_or_else(|| PatternError(spec.to_owned()))?;
        let field = match field.trim() {
            "module" => Field::Module,
            "function" => Field::Function,
            "file" => Field::File,
            _ => return Err(PatternError(spec.to_owned())),
        };
        let glob = glob.trim();
        if glob.is_empty() {
            return Err(PatternError(spec.to_owned()));
        }
        self.rules
            .push_site_rule(Tier::Framework, Pattern::single(spec, field, glob));
        Ok(())
    }

    /// The patterns, as given (user additions first).
    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.rules.site_rules().map(|(_, spec)| spec)
    }

    /// Whether a frame is plumbing (in any tier of the site rules).
    pub fn is_plumbing(&self, f: &SiteFrame<'_>) -> bool {
        self.rules.tier(f).is_some()
    }

    /// The rules this list is made of.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The rules this list is made of, to extend with owner rules or other tiers.
    pub fn into_rules(self) -> Rules {
        self.rules
    }
}

impl From<Rules> for Plumbing {
    fn from(rules: Rules) -> Plumbing {
        Plumbing { rules }
    }
}

/// The site of a stack (innermost frame first): the first frame that is neither plumbing nor
/// unknown (no module, function or file). `None` if there is none.
pub fn find_site(frames: &[SiteFrame<'_>], plumbing: &Plumbing) -> Option<Site> {
    match plumbing.rules.find_site_with_kind(frames) {
        Some((site, SiteKind::User)) => Some(site),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f<'a>(module: &'a str, function: Option<&'a str>) -> SiteFrame<'a> {
        SiteFrame {
            module,
            function,
            ..Default::default()
        }
    }

    #[test]
    fn qualified_paths() {
        assert_eq!(
            qualified_path("void* c10::cuda::Foo<std::vector<int> >::bar(long) const"),
            "c10::cuda::Foo::bar"
        );
        assert_eq!(
            qualified_path(
                "rmm::mr::cuda_memory_resource::do_allocate(unsigned long, rmm::cuda_stream_view)"
            ),
            "rmm::mr::cuda_memory_resource::do_allocate"
        );
        assert_eq!(qualified_path("main"), "main");
        assert_eq!(
            qualified_path("operator new(unsigned long)"),
            "operator new"
        );
        assert_eq!(qualified_path("foo::operator<<(int)"), "foo::operator<<");
        assert_eq!(
            qualified_path("ns::run(int)::{unnamed type#1}::operator()() const"),
            "ns::run::{unnamed type#1}::operator()"
        );
        assert_eq!(
            qualified_path("cudarc::driver::result::malloc_sync"),
            "cudarc::driver::result::malloc_sync"
        );
    }

    #[test]
    fn pytorch_stack_site_is_the_users_extension_else_none() {
        let p = Plumbing::builtin();
        let mut frames = vec![
            f("/usr/lib/libcudart.so.13", Some("cudaMalloc")),
            f(
                "/venv/torch/lib/libc10_cuda.so",
                Some(
                    "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, int, unsigned long, CUstream_st*)",
                ),
            ),
            f(
                "/venv/torch/lib/libtorch_cuda.so",
                Some("at::native::empty_cuda(c10::ArrayRef<long>)"),
            ),
            f(
                "/venv/torch/lib/libtorch_python.so",
                Some("torch::autograd::THPVariable_empty"),
            ),
            f(
                "/usr/lib/libpython3.11.so.1.0",
                Some("_PyEval_EvalFrameDefault"),
            ),
            f("/usr/bin/python3.11", Some("main")),
            f("/lib/x86_64-linux-gnu/libc.so.6", Some("__libc_start_main")),
        ];
        assert_eq!(find_site(&frames, &p), None);
        frames.insert(
            3,
            SiteFrame {
                module: "/work/ext/my_ext.cpython-311-x86_64-linux-gnu.so",
                function: Some("my_ext::make_scratch(long)"),
                file: Some("/work/ext/src/scratch.cpp"),
                line: Some(17),
                offset: 0x1234,
            },
        );
        assert_eq!(find_site(&frames, &p).unwrap().index, 3);
    }

    #[test]
    fn python_frames_site_is_the_users_line() {
        let p = Plumbing::builtin();
        let py = |file, function, line| SiteFrame {
            module: "",
            function: Some(function),
            file: Some(file),
            line: Some(line),
            offset: 0,
        };
        let frames = [
            py(
                "/venv/lib/python3.11/site-packages/cupy/_creation/basic.py",
                "empty",
                22,
            ),
            py("/home/u/train.py", "make_batch", 40),
            py("/home/u/train.py", "<module>", 99),
        ];
        let s = find_site(&frames, &p).unwrap();
        assert_eq!(s.index, 1);
        let other = find_site(&[frames[2]], &p).unwrap();
        assert_ne!(
            s.fingerprint, other.fingerprint,
            "different lines, different sites"
        );
    }

    #[test]
    fn nvcc_program_site_is_the_planted_function() {
        // The frames of a leak in scripts/gpu/planted_leaks.cu, as the shim symbolized them on
        // the H200 (2026-11-30): static cudart's internals, cudaMalloc, then the user's function.
        let p = Plumbing::builtin();
        let frames = [
            f(
                "/tmp/b/planted",
                Some("libcudart_static_5382377d5c772c9d197c0cda9fd9742ee6ad893c"),
            ),
            f(
                "/tmp/b/planted",
                Some("libcudart_static_f74e2f2bcf2cf49bd1a61332e1d15bd1e748f9cf"),
            ),
            f("/tmp/b/planted", Some("cudaMalloc")),
            f("/tmp/b/planted", Some("leak_in_static_function")),
            f("/tmp/b/planted", Some("main")),
        ];
        assert_eq!(find_site(&frames, &p).unwrap().index, 3);
    }

    #[test]
    fn rmm_static_cudart_and_user_patterns() {
        let mut p = Plumbing::builtin();
        let frames = [
            f("/app/bin/prog", Some("cudaMalloc")),
            f(
                "/app/bin/prog",
                Some("cudart::cudaApiMalloc(void**, unsigned long)"),
            ),
            f(
                "/app/lib/librmm_user.so",
                Some(
                    "rmm::mr::cuda_memory_resource::do_allocate(unsigned long, rmm::cuda_stream_view)",
                ),
            ),
            f("/app/lib/libpool.so", Some("mypool::grow(unsigned long)")),
            f("/app/bin/prog", Some("main")),
        ];
        assert_eq!(find_site(&frames, &p).unwrap().index, 3);
        p.add("function:mypool::*").unwrap();
        assert_eq!(find_site(&frames, &p).unwrap().index, 4);
        p.add("module:libpool.so").unwrap();
        assert!(p.patterns().any(|x| x == "module:libpool.so"));
        assert!(Plumbing::none().add("nofield").is_err());
        assert!(Plumbing::none().add("symbol:x").is_err());
        assert!(Plumbing::none().add("module:").is_err());
    }

    #[test]
    fn unknown_frames_are_skipped_and_fingerprints_are_stable() {
        let p = Plumbing::builtin();
        let frames = [
            f("", None),
            SiteFrame {
                module: "/opt/a/bin/prog",
                offset: 0x1a2b,
                ..Default::default()
            },
        ];
        let s = find_site(&frames, &p).unwrap();
        assert_eq!(s.index, 1);
        // Same binary elsewhere, same fingerprint; another offset, another one.
        let moved = SiteFrame {
            module: "/other/place/prog",
            offset: 0x1a2b,
            ..Default::default()
        };
        assert_eq!(fingerprint(&moved), s.fingerprint);
        let shifted = SiteFrame {
            offset: 0x1a2c,
            ..moved
        };
        assert_ne!(fingerprint(&shifted), s.fingerprint);
        // A fixed value: the hash must not change between versions of cuguard.
        let named = SiteFrame {
            module: "/x/prog",
            function: Some("main"),
            file: Some("/src/main.c"),
            line: Some(7),
            offset: 0,
        };
        assert_eq!(fingerprint(&named), fingerprint(&named));
        assert_eq!(fingerprint(&named).len(), 16);
    }
}
