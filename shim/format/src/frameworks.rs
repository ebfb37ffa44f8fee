//! The frameworks whose allocators refuse requests on their own, and whose out-of-memory errors
//! become cards (the Python package's `cuguard_framework_oom` for PyTorch, CuPy and JAX; the
//! shim's `__cxa_throw` for RMM's C++ exception): each one's name in the report
//! (`ooms[].refused_by`, the ABI's `framework`), its holder of idle memory (`ooms[].idle[].holder`),
//! the entry its refusals are recorded under (`ooms[].api`), and its words for people. The shim,
//! the verdict and the command's summary all read them here.

/// One framework's allocator.
#[derive(Debug, PartialEq, Eq)]
pub struct Framework {
    /// `ooms[].refused_by`, and the name the ABI takes: `pytorch`.
    pub name: &'static str,
    /// Its allocator's `ooms[].idle[].holder`: `pytorch_cache`.
    pub holder: &'static str,
    /// `ooms[].api` of its refusals.
    pub api: &'static str,
    /// Its allocator, for people.
    pub words: &'static str,
    /// Its own limit's setting, for the verdict's words.
    pub limit_setting: &'static str,
    /// Whether it tells its idle memory (a card then has it as a holder, `ooms[].idle[]`); where
    /// it does not (RMM's pool), what it holds free reads as live, and the card says so.
    pub tells_idle: bool,
}

/// PyTorch's caching allocator: its out-of-memory observer tells each refusal.
pub const PYTORCH: Framework = Framework {
    name: "pytorch",
    holder: "pytorch_cache",
    api: "CUDACachingAllocator::malloc",
    words: "PyTorch's caching allocator",
    limit_setting: "PyTorch's memory fraction (torch.cuda.set_per_process_memory_fraction)",
    tells_idle: true,
};

/// CuPy's memory pool: its `OutOfMemoryError`, made at the refusal.
pub const CUPY: Framework = Framework {
    name: "cupy",
    holder: "cupy_pool",
    api: "cupy.cuda.MemoryPool.malloc",
    words: "CuPy's memory pool",
    limit_setting: "CuPy's pool limit (MemoryPool.set_limit, CUPY_GPU_MEMORY_LIMIT)",
    tells_idle: true,
};

/// JAX's allocator (XLA's BFC allocator): its `RESOURCE_EXHAUSTED` error.
pub const JAX: Framework = Framework {
    name: "jax",
    holder: "jax_allocator",
    api: "xla::BFCAllocator::AllocateRaw",
    words: "JAX's allocator",
    limit_setting: "XLA_PYTHON_CLIENT_MEM_FRACTION",
    tells_idle: true,
};

/// RMM's pool (`pool_memory_resource`, cuDF's): its `rmm::out_of_memory`, seen as it is thrown
/// ([`crate::rmm_oom`]); it says its request, its size and its maximum, not its free blocks.
pub const RMM: Framework = Framework {
    name: "rmm",
    holder: "rmm_pool",
    api: "rmm::mr::pool_memory_resource::allocate",
    words: "RMM's pool",
    limit_setting: "RMM's maximum pool size (maximum_pool_size)",
    tells_idle: false,
};

/// RMM's arena (`arena_memory_resource`): its `rmm::out_of_memory` ("No room in arena"), seen as
/// the pool's is; its message says the request, not the arena's size nor its free blocks.
pub const RMM_ARENA: Framework = Framework {
    name: "rmm_arena",
    holder: "rmm_arena_resource",
    api: "rmm::mr::arena_memory_resource::allocate",
    words: "RMM's arena",
    limit_setting: "the arena's size (arena_size)",
    tells_idle: false,
};

/// RMM's limiting adaptor (`limiting_resource_adaptor`): its `rmm::out_of_memory` ("Exceeded
/// memory limit"), seen as the pool's is; its message says the request, not the limit.
pub const RMM_LIMITING: Framework = Framework {
    name: "rmm_limiting",
    holder: "rmm_limiting_resource",
    api: "rmm::mr::limiting_resource_adaptor::allocate",
    words: "RMM's limiting adaptor",
    limit_setting: "the limiting adaptor's allocation_limit",
    tells_idle: false,
};

/// Every framework cuguard reads.
pub const ALL: [&Framework; 6] = [&PYTORCH, &CUPY, &JAX, &RMM, &RMM_ARENA, &RMM_LIMITING];

/// The framework of that name (`ooms[].refused_by`).
pub fn named(name: &str) -> Option<&'static Framework> {
    ALL.into_iter().find(|f| f.name == name)
}

/// The framework whose allocator is that holder (`ooms[].idle[].holder`).
pub fn holding(holder: &str) -> Option<&'static Framework> {
    ALL.into_iter().find(|f| f.holder == holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_holders_find_their_framework_and_nothing_else() {
        for f in ALL {
            assert_eq!(named(f.name), Some(f));
            assert_eq!(holding(f.holder), Some(f));
            assert_eq!(named(f.holder), None);
        }
        assert_eq!(named("driver"), None);
        assert_eq!(holding("cuguard_pool"), None);
    }
}
