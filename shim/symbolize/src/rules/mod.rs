//! The rules that read an allocation's stack: which frame is its **site** (where it was asked
//! for), of which **kind**, and who is its **owner** (who holds it).
//!
//! Both are pure functions of symbolized frames ([`SiteFrame`]), innermost first, in call order:
//! native frames above the interpreter, then the Python frames (module `""`), then the rest.
//!
//! ```
//! use cuguard_symbolize::rules::{OwnerKind, Rules, SiteKind};
//! use cuguard_symbolize::site::SiteFrame;
//! let rules = Rules::builtin();
//! let f = |module, function| SiteFrame { module, function: Some(function), ..Default::default() };
//! // PyTorch's autograd engine thread (caching off): no Python frame, no user frame.
//! let frames = [
//!     f("/venv/torch/lib/libcudart.so.13", "cudaMalloc"),
//!     f("/venv/torch/lib/libc10_cuda.so",
//!       "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"),
//!     f("/venv/torch/lib/libtorch_cpu.so", "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)"),
//!     f("/venv/torch/lib/libtorch_cpu.so",
//!       "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)"),
//!     f("/venv/torch/lib/libtorch_cpu.so",
//!       "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
//! ];
//! let (site, kind) = rules.find_site_with_kind(&frames).unwrap();
//! assert_eq!((site.index, kind), (3, SiteKind::Operation));
//! let owner = rules.owner(&frames, Some("device"));
//! assert_eq!((owner.id.as_str(), owner.kind), ("program", OwnerKind::Program));
//! ```
//!
//! # Sites
//!
//! Each frame is put in a **tier** by the first site rule that matches it:
//! - [`Tier::NeverSite`]: never a site. cuguard, the driver and the runtime (and bindings to
//!   them: cudarc, cuda-python), CUDA libraries, the frameworks' allocators (PyTorch's caching
//!   allocators, RMM's memory resources, CuPy's memory module, XLA's allocators, numba's driver
//!   module), binding layers, the C/C++ and Rust runtimes, the Python interpreter and its
//!   standard library, and cuguard's own Python wrapper of PyTorch's backward pass;
//! - [`Tier::Framework`]: framework internals, not the user's code (PyTorch, RMM/cuDF, CuPy,
//!   numba, JAX/XLA, and IPython and ipykernel, which run a notebook's cells);
//! - [`Tier::Operation`]: framework frames that name the operation that asked (PyTorch's autograd
//!   nodes, `…Backward0::apply`; cuDF's public functions; an XLA executable's run);
//! - no tier: the user's own frame.
//!
//! [`Rules::find_site_with_kind`] picks, from the allocation outward:
//! 1. the first user frame (skipping frames with neither module, function nor file):
//!    [`SiteKind::User`];
//! 2. failing that, the first operation frame: [`SiteKind::Operation`] (on PyTorch's autograd
//!    thread, where no Python frame is, the autograd node);
//! 3. failing that, the first framework frame: [`SiteKind::Fallback`];
//! 4. failing that, no site (every frame is never a site, or unknown).
//!
//! A site is never an allocator's own function. [`crate::site::find_site`] is step 1 alone.
//!
//! # Owners
//!
//! An [`Owner`] has a stable `id`, a [`OwnerKind`] (`program`, `framework_cache`, `library`,
//! `driver`), a `label` for people and, for every framework cache, a `hint` saying what its
//! memory means and how to see past it. [`Rules::owner`] decides, from the allocation outward:
//! at the first frame that an owner rule matches, the first rule that matches gives the owner
//! (so a PyTorch cache segment made for a cuBLAS workspace is the cache's). With no match, a
//! stack of nothing but the driver and runtime (cuguard, libcuda, the CUDA runtime, plus thread
//! and process start and unknown frames) is the `driver`'s; anything else is the `program`'s.
//! Owner rules may look at the allocation's memory kind (RMM keeps pinned host memory for cuDF
//! at unnamed offsets in librmm: `module:librmm*.so* & memory:host_pinned`).
//!
//! | id | kind | from |
//! |---|---|---|
//! | `program` | program | the default |
//! | `driver` | driver | only the driver and runtime on the stack |
//! | `pytorch_caching_allocator` | framework_cache | `…CUDACachingAllocator::…DeviceCachingAllocator::…` (`alloc_block`), expandable segments |
//! | `pytorch_host_caching_allocator` | framework_cache | `at::…CachingHostAllocator…` |
//! | `cupy_memory_pool`, `cupy_pinned_memory_pool` | framework_cache | Cython `…4cupy_4cuda_6memory_…MemoryPool…`, `…13pinned_memory_…PinnedMemoryPool…` |
//! | `rmm_pool`, `rmm_arena`, `rmm_fixed_size` | framework_cache | `rmm::…pool_memory_resource…` and the others (a binning resource's bins are these; what it sends upstream is the program's) |
//! | `rmm_pinned_host_pool` | framework_cache | pinned host memory made in librmm |
//! | `xla_bfc_allocator` | framework_cache | `tsl::BFCAllocator` |
//! | `xla_runtime` | library | StreamExecutor's context |
//! | `cublas`, `cudnn`, `nccl`, `cufft`, `cusparse`, `cusolver`, `curand`, `cutensor`, `nvjpeg` | library | the library's module or API; PyTorch's cuBLAS workspaces |
//!
//! The tables themselves are in `rules/builtin.rs`.
//!
//! # Patterns
//!
//! Site and owner rules are written in one language (`rules/pattern.rs`): `FIELD:GLOB`, or
//! several terms joined by `&`, each maybe negated by `!`; FIELD is `module`, `function`, `file`
//! or (owner rules only) `memory`. See [`Pattern`].
//!
//! # User additions
//!
//! They come before the built-in rules, so they override them (for owners: at the same frame;
//! the frames are still read from the allocation outward).
//! - Site rules: [`Rules::add_site_rule`] (what `CUGUARD_PLUMBING` adds, as
//!   [`Tier::Framework`], through [`crate::site::Plumbing::add`]).
//! - Owner rules: [`Rules::add_owner_spec`] parses a spec string (the `CUGUARD_OWNERS` setting):
//!   comma-separated entries `OWNER=CONDITION[&CONDITION…]`, where OWNER is the id of a known
//!   owner, or `NEW_ID:KIND` for a new one (its label is its id):
//!
//!   ```text
//!   CUGUARD_OWNERS='my_arena:framework_cache=function:myapp::Arena::*, program=function:rmm::*pool_memory_resource*'
//!   ```
//!
//!   Good entries are kept; the bad ones come back in one [`OwnerSpecError`] for the caller to
//!   report once.

mod builtin;
mod owner;
mod pattern;
mod tier;

pub use owner::{Owner, OwnerKind, OwnerSpecError};
pub use pattern::{Pattern, PatternError};
pub use tier::Tier;

use crate::site_frame::{Site, SiteFrame, fingerprint};
pub(crate) use builtin::SITE_SPECS;
use owner::{Entry, OwnerRule, USER_CACHE_HINT};
use pattern::Facts;
pub(crate) use pattern::Field;

/// Which kind of frame a site is (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiteKind {
    /// The user's own frame.
    User,
    /// No user frame: the operation that asked.
    Operation,
    /// No user or operation frame: the first framework frame.
    Fallback,
}

impl SiteKind {
    /// `user`, `operation` or `fallback`.
    pub fn as_str(self) -> &'static str {
        match self {
            SiteKind::User => "user",
            SiteKind::Operation => "operation",
            SiteKind::Fallback => "fallback",
        }
    }
}

/// The index of the program owner in every owner list.
const PROGRAM: usize = 0;
/// The index of the driver owner in every owner list.
const DRIVER: usize = 1;

/// Site and owner rules: the built-in ones and user additions (see the module doc).
#[derive(Clone, Debug)]
pub struct Rules {
    /// In order: user additions, then the built-in rules.
    site: Vec<(Tier, Pattern)>,
    /// How many of `site` are user additions.
    user_site: usize,
    /// `program` and `driver` first.
    owners: Vec<Owner>,
    /// In order: user additions, then the built-in rules.
    owner_rules: Vec<OwnerRule>,
    user_owner_rules: usize,
    driver_frames: Vec<Pattern>,
    system_frames: Vec<Pattern>,
}

impl Default for Rules {
    /// [`Rules::none`].
    fn default() -> Rules {
        Rules::none()
    }
}

fn builtin_pattern(spec: &str) -> Pattern {
    Pattern::parse(spec, true).expect("built-in patterns are valid")
}

impl Rules {
    /// No site or owner rules: every known frame is the user's, every allocation the program's.
    pub fn none() -> Rules {
        let owner = |i: usize| {
            let (id, kind, label, hint) = builtin::OWNERS[i];
            Owner {
                id: id.into(),
                kind,
                label: label.into(),
                hint: hint.map(Into::into),
            }
        };
        Rules {
            site: Vec::new(),
            user_site: 0,
            owners: vec![owner(PROGRAM), owner(DRIVER)],
            owner_rules: Vec::new(),
            user_owner_rules: 0,
            driver_frames: Vec::new(),
            system_frames: Vec::new(),
        }
    }

    /// The built-in rules (`rules/builtin.rs`).
    pub fn builtin() -> Rules {
        let owners: Vec<Owner> = builtin::OWNERS
            .iter()
            .map(|&(id, kind, label, hint)| Owner {
                id: id.into(),
                kind,
                label: label.into(),
                hint: hint.map(Into::into),
            })
            .collect();
        let owner_rules = builtin::OWNER_RULES
            .iter()
            .map(|&(id, spec)| OwnerRule {
                owner: owners
                    .iter()
                    .position(|o| o.id == id)
                    .expect("built-in owner rules name built-in owners"),
                pattern: builtin_pattern(spec),
            })
            .collect();
        Rules {
            site: builtin::SITE_RULES
                .iter()
                .map(|&(tier, spec)| (tier, builtin_pattern(spec)))
                .collect(),
            user_site: 0,
            owners,
            owner_rules,
            user_owner_rules: 0,
            driver_frames: builtin::DRIVER_FRAMES
                .iter()
                .map(|s| builtin_pattern(s))
                .collect(),
            system_frames: builtin::SYSTEM_FRAMES
                .iter()
                .map(|s| builtin_pattern(s))
                .collect(),
        }
    }

    /// Adds a site rule (see [`Pattern`]; no `memory` terms), after the earlier additions and
    /// before the built-in rules.
    pub fn add_site_rule(&mut self, tier: Tier, spec: &str) -> Result<(), PatternError> {
        let pattern = Pattern::parse(spec, false)?;
        self.push_site_rule(tier, pattern);
        Ok(())
    }

    pub(crate) fn push_site_rule(&mut self, tier: Tier, pattern: Pattern) {
        self.site.insert(self.user_site, (tier, pattern));
        self.user_site += 1;
    }

    /// Adds the owner rules of `spec` (comma-separated `OWNER=CONDITION[&CONDITION…]`, see the
    /// module doc), after the earlier additions and before the built-in rules. An entry may
    /// name an owner defined by an earlier one. The good entries are added even when some are
    /// bad; the bad ones are all in the error.
    pub fn add_owner_spec(&mut self, spec: &str) -> Result<(), OwnerSpecError> {
        let mut problems = Vec::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (owner, pattern) = match owner::parse_entry(entry) {
                Ok(Entry::Known { id, pattern }) => match self.owner_index(&id) {
                    Some(i) => (i, pattern),
                    None => {
                        problems.push(format!(
                            "{entry:?}: unknown owner {id:?} (known: {}; a new one is NEW_ID:KIND)",
                            self.owners
                                .iter()
                                .map(|o| o.id.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                        continue;
                    }
                },
                Ok(Entry::New { id, kind, pattern }) => match self.owner_index(&id) {
                    Some(i) if self.owners[i].kind == kind => (i, pattern),
                    Some(i) => {
                        problems.push(format!(
                            "{entry:?}: owner {id:?} is already a {}",
                            self.owners[i].kind
                        ));
                        continue;
                    }
                    None => {
                        self.owners.push(Owner {
                            label: id.clone(),
                            id,
                            kind,
                            hint: (kind == OwnerKind::FrameworkCache)
                                .then(|| USER_CACHE_HINT.to_owned()),
                        });
                        (self.owners.len() - 1, pattern)
                    }
                },
                Err(problem) => {
                    problems.push(problem);
                    continue;
                }
            };
            self.owner_rules
                .insert(self.user_owner_rules, OwnerRule { owner, pattern });
            self.user_owner_rules += 1;
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(OwnerSpecError { problems })
        }
    }

    fn owner_index(&self, id: &str) -> Option<usize> {
        self.owners.iter().position(|o| o.id == id)
    }

    /// The site rules in order (user additions first): tier and spec.
    pub fn site_rules(&self) -> impl Iterator<Item = (Tier, &str)> {
        self.site.iter().map(|(t, p)| (*t, p.spec()))
    }

    /// Every owner (built-in ones, then those user rules defined), `program` and `driver` first.
    pub fn owners(&self) -> &[Owner] {
        &self.owners
    }

    /// The owner with this id.
    pub fn owner_by_id(&self, id: &str) -> Option<&Owner> {
        self.owners.iter().find(|o| o.id == id)
    }

    /// The tier of a frame: that of the first site rule that matches it; `None` for a user
    /// frame.
    pub fn tier(&self, frame: &SiteFrame<'_>) -> Option<Tier> {
        self.tier_of(&Facts::new(frame))
    }

    fn tier_of(&self, facts: &Facts<'_>) -> Option<Tier> {
        self.site
            .iter()
            .find(|(_, p)| p.matches_facts(facts, None))
            .map(|(t, _)| *t)
    }

    /// The site of a stack (innermost frame first, in call order) and its kind: see the module
    /// doc. `None` when every frame is never a site or unknown.
    pub fn find_site_with_kind(&self, frames: &[SiteFrame<'_>]) -> Option<(Site, SiteKind)> {
        let mut first_operation = None;
        let mut first_framework = None;
        for (i, f) in frames.iter().enumerate() {
            let facts = Facts::new(f);
            if facts.unknown() {
                continue;
            }
            match self.tier_of(&facts) {
                None => return Some((site_at(frames, i), SiteKind::User)),
                Some(Tier::Operation) => {
                    first_operation.get_or_insert(i);
                }
                Some(Tier::Framework) => {
                    first_framework.get_or_insert(i);
                }
                Some(Tier::NeverSite) => {}
            }
        }
        first_operation
            .map(|i| (site_at(frames, i), SiteKind::Operation))
            .or_else(|| first_framework.map(|i| (site_at(frames, i), SiteKind::Fallback)))
    }

    /// Who holds an allocation made with this stack (innermost frame first, in call order;
    /// Python frames may be among them) and memory kind (`device`, `host_pinned`…, as reports
    /// name it; `None` if unknown): see the module doc.
    pub fn owner(&self, frames: &[SiteFrame<'_>], memory: Option<&str>) -> &Owner {
        let facts: Vec<Facts<'_>> = frames.iter().map(Facts::new).collect();
        for f in &facts {
            if let Some(rule) = self
                .owner_rules
                .iter()
                .find(|r| r.pattern.matches_facts(f, memory))
            {
                return &self.owners[rule.owner];
            }
        }
        let is = |set: &[Pattern], f: &Facts<'_>| set.iter().any(|p| p.matches_facts(f, memory));
        let driver_only = facts.iter().any(|f| is(&self.driver_frames, f))
            && facts
                .iter()
                .all(|f| f.unknown() || is(&self.driver_frames, f) || is(&self.system_frames, f));
        &self.owners[if driver_only { DRIVER } else { PROGRAM }]
    }
}

fn site_at(frames: &[SiteFrame<'_>], index: usize) -> Site {
    Site {
        index,
        fingerprint: fingerprint(&frames[index]),
    }
}

#[cfg(test)]
mod tests;
