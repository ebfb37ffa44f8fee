//! Turns `(module, offset)` pairs into functions, source files and lines.
//!
//! Used in two places: by the shim when it writes a report at process exit (in-process, with a
//! deadline), and by `cuguard symbolize REPORT` later, on a machine that has the binaries and
//! their debug info.
//!
//! ```no_run
//! use std::path::Path;
//! use std::time::{Duration, Instant};
//! let mut s = cuguard_symbolize::Symbolizer::new(Some(Instant::now() + Duration::from_secs(2)));
//! // offset = ip - the module's load bias, i.e. the address in the file's own vaddr space
//! for f in s.symbolize(Path::new("/usr/bin/prog"), Some("9f2c…"), 0x1234) {
//!     println!("{:?} {:?}:{:?} inlined={}", f.function, f.file, f.line, f.inlined);
//! }
//! ```
//!
//! What it reads, per module (cached, so each file is opened and indexed once):
//! - **function names** from `.symtab` and `.dynsym`, so static functions in executables count;
//! - **file:line and inlined frames** from DWARF (`addr2line`), in the file itself or in a
//!   separate debug file found by build-id (`<debug dir>/.build-id/xx/yyyy.debug`, debug dirs
//!   default to `/usr/lib/debug`) or by `.gnu_debuglink` (next to the file, in `.debug/`
//!   beside it, and under each debug dir), checked by build-id or CRC;
//! - names are **demangled** (C++ by `cpp_demangle`, Rust by `rustc-demangle`, hash suffix
//!   dropped);
//! - names are **qualified**: every function name from DWARF, inlined frames included, carries
//!   its path (`cudarc::driver::result::malloc_async`, not `malloc_async`). DWARF often gives
//!   only the last segment; the rest comes from the linkage name of the DIE or of the DIE its
//!   `DW_AT_abstract_origin`/`DW_AT_specification` names, else from the enclosing namespace,
//!   type and function DIEs (`dwarf_names`, read once per unit); for a unit built with line
//!   tables only, from the symbol at the address (outermost frame), from the closure
//!   environments the unit's other names mention (Rust closures), or from symbols named under
//!   the function (other inlined Rust frames) (`symbol_names`); an inlined function nothing
//!   names keeps its short name. Generic arguments and closures stay as DWARF or the demangler
//!   writes them (`…::CudaStream::alloc<f32>`, `main::{closure#3}`, `main::{{closure}}`). A C
//!   name stays as it is.
//!
//! A module whose build-id does not match the one recorded is not trusted: its lookups return
//! nothing. With a deadline, work stops when it passes and everything after that comes back
//! empty (the report keeps module+offset for those frames).
//!
//! [`glob`] is the workspace's one wildcard matcher. [`mixed`] puts a stack's native and Python
//! frames in one call order.
//!
//! [`rules`] reads a symbolized stack (native frames, and Python frames where there are some):
//! - its **site**, the frame an allocation is charged to, and of which kind: the user's own
//!   frame, else the operation that asked (PyTorch's autograd node on its engine thread), else
//!   a framework frame ([`rules::Rules::find_site_with_kind`], [`rules::SiteKind`]); an
//!   allocator's own function is never a site;
//! - its **owner**, who holds the allocation: the program, a framework's cache (PyTorch's
//!   caching allocator, CuPy's pools, RMM's pool resources, XLA's BFC allocator…), a CUDA
//!   library, or the driver ([`rules::Rules::owner`], [`rules::Owner`] with a stable id, a
//!   kind, a label and, for caches, a hint).
//!
//! Both are data: built-in rules in one pattern language (`module:`, `function:`, `file:`,
//! `memory:` globs, joined by `&`, negated by `!`), and user additions in front of them
//! (owner rules from a spec string: [`rules::Rules::add_owner_spec`]).
//!
//! ```
//! use cuguard_symbolize::rules::{Rules, SiteKind};
//! use cuguard_symbolize::site::SiteFrame;
//! let rules = Rules::builtin();
//! let frames = [
//!     SiteFrame { module: "/usr/lib/libcudart.so.13", function: Some("cudaMalloc"), ..Default::default() },
//!     SiteFrame { module: "/venv/torch/lib/libc10_cuda.so",
//!                 function: Some("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block(AllocParams&, bool)"),
//!                 ..Default::default() },
//!     SiteFrame { file: Some("/home/u/train.py"), function: Some("step"), line: Some(12), ..Default::default() },
//! ];
//! let (site, kind) = rules.find_site_with_kind(&frames).unwrap();
//! assert_eq!((site.index, kind), (2, SiteKind::User));
//! let owner = rules.owner(&frames, Some("device"));
//! assert_eq!(owner.id, "pytorch_caching_allocator");
//! println!("{}: {}", owner.label, owner.hint.as_deref().unwrap_or(""));
//! ```
//!
//! [`site`] holds the site rule as it was first written, now a thin layer over [`rules`]:
//! [`site::find_site`] (the user's frame, or none) and [`site::Plumbing`], and each frame's
//! stable [`site::fingerprint`].
//!
//! Offsets are what the stack capture records: call-site addresses (return address - 1), so
//! the line reported is the call's. They are looked up as given.

mod demangle;
mod dwarf_names;
pub mod glob;
pub mod mixed;
mod module;
pub mod rules;
pub mod site;
mod site_frame;
mod symbol_names;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use demangle::demangle;
pub use module::Frame;

/// Caches each module's symbol table and DWARF context, and the frames of each offset asked.
pub struct Symbolizer {
    deadline: Option<Instant>,
    debug_dirs: Vec<PathBuf>,
    /// `None`: the module could not be used (missing, not ELF, build-id mismatch).
    modules: HashMap<(PathBuf, Option<String>), Option<module::Module>>,
    timed_out: bool,
}

impl Symbolizer {
    /// A symbolizer that stops working at `deadline` (if any).
    pub fn new(deadline: Option<Instant>) -> Self {
        Symbolizer {
            deadline,
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
            modules: HashMap::new(),
            timed_out: false,
        }
    }

    /// Where separate debug files are looked for (replaces the default `/usr/lib/debug`).
    pub fn with_debug_dirs(mut self, dirs: Vec<PathBuf>) -> Self {
        self.debug_dirs = dirs;
        self
    }

    /// Whether the deadline passed (some lookups came back empty because of it).
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    fn out_of_time(&mut self) -> bool {
        if !self.timed_out && self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.timed_out = true;
        }
        self.timed_out
    }

    /// The frames at `offset` (file vaddr) in the module at `module_path`, innermost inlined
    /// frame first. Empty when the module cannot be read, its build-id differs from
    /// `build_id` (lowercase or uppercase hex), nothing is known at that offset, or the
    /// deadline passed.
    pub fn symbolize(
        &mut self,
        module_path: &Path,
        build_id: Option<&str>,
        offset: u64,
    ) -> Vec<Frame> {
        if self.out_of_time() {
            return Vec::new();
        }
        let key = (
            module_path.to_path_buf(),
            build_id.map(|b| b.to_ascii_lowercase()),
        );
        if !self.modules.contains_key(&key) {
            let m = module::Module::load(module_path, key.1.as_deref(), &self.debug_dirs);
            self.modules.insert(key.clone(), m);
        }
        match self.modules.get_mut(&key) {
            Some(Some(m)) => m.frames(offset),
            _ => Vec::new(),
        }
    }
}
