//! RMM's out of memory as the shim sees it thrown (its `__cxa_throw`): whether a thrown C++
//! type is `rmm::out_of_memory`, and what the pool's message says of the refusal.
//!
//! RMM's pool (`pool_memory_resource`) throws `rmm::out_of_memory` when it cannot grow: past
//! its maximum (`Maximum pool size exceeded (failed to allocate 3.000000 GiB): Not enough room
//! to grow, current/max/try size = 3.250000 GiB, 4.000000 GiB, 3.000000 GiB`, RMM 26.10 on an
//! H100, run 46), or when the device refused its growth (the same head, then the upstream's
//! own message). Its sizes are written to six decimals of their unit (`format_bytes`), so a
//! figure read back is within a few KiB of the pool's own. The pool's growth tries first throw
//! inside RMM from its upstream and are caught there: only the pool's own message, the one
//! that leaves it, is a refusal. RMM's arena (`arena_memory_resource`) throws the same type with
//! the pool's head and `No room in arena.`; its limiting adaptor (`limiting_resource_adaptor`)
//! with `Exceeded memory limit (failed to allocate …)` (RMM's sources, `cpp/src/mr/detail/`);
//! neither says its size or limit.

use crate::frameworks::{self, Framework};

/// What one refusal of RMM's pool, arena or limiting adaptor says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RmmRefusal {
    /// Which of RMM's resources refused: [`frameworks::RMM`] (the pool),
    /// [`frameworks::RMM_ARENA`] or [`frameworks::RMM_LIMITING`].
    pub resource: &'static Framework,
    /// Bytes asked for (`failed to allocate …`).
    pub requested: u64,
    /// What the pool held then (`current`), where the message says it: when the maximum
    /// refused.
    pub pool_bytes: Option<u64>,
    /// The pool's maximum size (`max`), where it has one.
    pub maximum_bytes: Option<u64>,
}

/// The pool's and the arena's head, before the request's size.
const HEAD: &str = "Maximum pool size exceeded (failed to allocate ";
/// The maximum's reason, before the three sizes.
const NO_ROOM: &str = "Not enough room to grow, current/max/try size = ";
/// The arena's reason.
const NO_ROOM_IN_ARENA: &str = "No room in arena";
/// The limiting adaptor's head, before the request's size (then `)`).
const LIMIT_HEAD: &str = "Exceeded memory limit (failed to allocate ";

/// Whether a thrown type's mangled name (`std::type_info::name()`) is `rmm::out_of_memory`,
/// in RMM's namespace directly (`N3rmm13out_of_memoryE`, RMM 26.10) or in its inline ABI
/// namespace (`N3rmm10_RMM_26_1213out_of_memoryE`).
pub fn is_out_of_memory(name: &[u8]) -> bool {
    let name = name.strip_prefix(b"*").unwrap_or(name);
    name.starts_with(b"N3rmm") && name.ends_with(b"13out_of_memoryE")
}

/// The refusal that `what` (the exception's `what()`) describes, where it is the pool's, the
/// arena's or the limiting adaptor's.
pub fn parse(what: &str) -> Option<RmmRefusal> {
    if let Some(at) = what.find(LIMIT_HEAD) {
        let (asked, _) = what[at + LIMIT_HEAD.len()..].split_once(')')?;
        return Some(RmmRefusal {
            resource: &frameworks::RMM_LIMITING,
            requested: bytes(asked)?,
            pool_bytes: None,
            maximum_bytes: None,
        });
    }
    let at = what.find(HEAD)? + HEAD.len();
    let (asked, reason) = what[at..].split_once("): ")?;
    let requested = bytes(asked)?;
    if reason.starts_with(NO_ROOM_IN_ARENA) {
        return Some(RmmRefusal {
            resource: &frameworks::RMM_ARENA,
            requested,
            pool_bytes: None,
            maximum_bytes: None,
        });
    }
    let sizes: Vec<Option<u64>> = reason
        .strip_prefix(NO_ROOM)
        .map(|s| s.split(", ").map(bytes).collect())
        .unwrap_or_default();
    let (pool_bytes, maximum_bytes) = match sizes[..] {
        [Some(current), Some(max), _] => (Some(current), (max < 1 << 62).then_some(max)),
        _ => (None, None),
    };
    Some(RmmRefusal {
        resource: &frameworks::RMM,
        requested,
        pool_bytes,
        maximum_bytes,
    })
}

/// `3.250000 GiB`, as RMM's `format_bytes` writes a size, in bytes.
fn bytes(text: &str) -> Option<u64> {
    const UNITS: [&str; 9] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"];
    let (number, unit) = text.trim().split_once(' ')?;
    let power = UNITS.iter().position(|u| *u == unit)?;
    let value: f64 = number.parse().ok()?;
    let scaled = value * 1024f64.powi(i32::try_from(power).ok()?);
    (scaled.is_finite() && scaled >= 0.0).then(|| scaled.round().min(u64::MAX as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// RMM 26.10's messages on the H100 (run 46), as Python's `MemoryError` said them.
    const AT_MAXIMUM: &str = "std::bad_alloc: out_of_memory: RMM failure at:/__w/rmm/rmm/cpp/src/mr/detail/pool_memory_resource_impl.cpp:73: Maximum pool size exceeded (failed to allocate 3.000000 GiB): Not enough room to grow, current/max/try size = 3.250000 GiB, 4.000000 GiB, 3.000000 GiB";

    #[test]
    fn the_pools_refusal_at_its_maximum_reads_its_three_sizes() {
        assert_eq!(
            parse(AT_MAXIMUM),
            Some(RmmRefusal {
                resource: &frameworks::RMM,
                requested: 3 * GIB,
                pool_bytes: Some(3 * GIB + GIB / 4),
                maximum_bytes: Some(4 * GIB),
            })
        );
    }

    #[test]
    fn a_refusal_by_the_device_has_the_request_only() {
        let what = "std::bad_alloc: out_of_memory: RMM failure at:pool_memory_resource_impl.cpp:73: Maximum pool size exceeded (failed to allocate 200.000000 GiB): std::bad_alloc: out_of_memory: CUDA error (failed to allocate 214748364800 bytes) at: cuda_memory_resource.cpp:40: cudaErrorMemoryAllocation out of memory";
        assert_eq!(
            parse(what),
            Some(RmmRefusal {
                resource: &frameworks::RMM,
                requested: 200 * GIB,
                pool_bytes: None,
                maximum_bytes: None,
            })
        );
    }

    #[test]
    fn an_unlimited_maximum_is_none_and_small_sizes_read_in_their_units() {
        let what = "Maximum pool size exceeded (failed to allocate 512.000000 KiB): Not enough room to grow, current/max/try size = 1000.000000 B, 16.000000 EiB, 512.000000 KiB";
        assert_eq!(
            parse(what),
            Some(RmmRefusal {
                resource: &frameworks::RMM,
                requested: 512 << 10,
                pool_bytes: Some(1000),
                maximum_bytes: None,
            })
        );
    }

    #[test]
    fn the_arena_and_the_limiting_adaptor_are_known_by_their_messages() {
        let arena = "std::bad_alloc: out_of_memory: RMM failure at:/__w/rmm/rmm/cpp/src/mr/detail/arena_memory_resource_impl.cpp:58: Maximum pool size exceeded (failed to allocate 2.000000 GiB): No room in arena.";
        assert_eq!(
            parse(arena),
            Some(RmmRefusal {
                resource: &frameworks::RMM_ARENA,
                requested: 2 * GIB,
                pool_bytes: None,
                maximum_bytes: None,
            })
        );
        let limiting = "std::bad_alloc: out_of_memory: RMM failure at:/__w/rmm/rmm/cpp/src/mr/detail/limiting_resource_adaptor_impl.cpp:57: Exceeded memory limit (failed to allocate 64.000000 MiB)";
        assert_eq!(
            parse(limiting),
            Some(RmmRefusal {
                resource: &frameworks::RMM_LIMITING,
                requested: 64 << 20,
                pool_bytes: None,
                maximum_bytes: None,
            })
        );
        assert_eq!(
            parse("Exceeded memory limit (failed to allocate lots)"),
            None
        );
    }

    #[test]
    fn other_messages_are_not_the_pools_refusal() {
        for what in [
            "std::bad_alloc: out_of_memory: CUDA error at: cuda_memory_resource.cpp:40: cudaErrorMemoryAllocation out of memory",
            "Maximum pool size exceeded (failed to allocate lots): x",
            "Maximum pool size exceeded (failed to allocate 3.0 GiB",
            "",
        ] {
            assert_eq!(parse(what), None, "{what}");
        }
    }

    #[test]
    fn rmm_out_of_memory_is_known_in_and_out_of_its_abi_namespace() {
        assert!(is_out_of_memory(b"N3rmm13out_of_memoryE"));
        assert!(is_out_of_memory(b"N3rmm10_RMM_26_1213out_of_memoryE"));
        assert!(!is_out_of_memory(b"N3rmm9bad_allocE"));
        assert!(!is_out_of_memory(b"St9bad_alloc"));
        assert!(!is_out_of_memory(b"N5other13out_of_memoryE"));
    }
}
