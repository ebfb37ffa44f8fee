//! The report's enumerations: values written as strings (`reason`, `leaks[].memory`,
//! `leaks[].state`, `events[].kind`), each keeping values this version does not know; and
//! [`OwnerKind`], the kinds of `owners[]`.

use serde::{Deserialize, Serialize};

/// Declares an enumeration stored in JSON as a string, keeping values it does not know.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
            /// A value this version of cuguard does not know, kept as written.
            Other(Box<str>),
        }

        impl $name {
            /// Every known value, in declaration order.
            pub const KNOWN: &[$name] = &[$($name::$variant,)*];

            /// The name as written in reports.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)*
                    Self::Other(text) => text,
                }
            }

            /// The name as written in reports of a known value; `None` for `Other`.
            pub const fn known_name(&self) -> Option<&'static str> {
                match self {
                    $(Self::$variant => Some($text),)*
                    Self::Other(_) => None,
                }
            }

            /// The variant for a name as written in reports.
            pub fn from_name(text: &str) -> Self {
                match text {
                    $($text => Self::$variant,)*
                    other => Self::Other(other.into()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        Ok($name::from_name(v))
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
}

string_enum! {
    /// Why a report was written (`reason`).
    Reason {
        /// The process ended normally.
        Exit = "exit",
        /// A periodic checkpoint while the process ran.
        Checkpoint = "checkpoint",
        /// A fatal signal cut the process short.
        Signal = "signal",
        /// Someone asked for a report (`cuguard snapshot`, through the snapshot signal).
        Request = "request",
        /// An allocation was refused for lack of memory: a checkpoint written at once (rate
        /// limited), with the out-of-memory record in `ooms`.
        Oom = "oom",
    }
}

string_enum! {
    /// What kind of memory an allocation is (`leaks[].memory`).
    Memory {
        /// `cuMemAlloc*`.
        Device = "device",
        /// `cuMemAllocPitch*`.
        Pitched = "pitched",
        /// `cuMemAllocManaged`.
        Managed = "managed",
        /// Stream-ordered: `cuMemAllocAsync*`, `cuMemAllocFromPoolAsync*`.
        Async = "async",
        /// Virtual memory management: `cuMemCreate`/`cuMemMap`.
        Vmm = "vmm",
        /// Page-locked host memory: `cuMemAllocHost*`, `cuMemHostAlloc`.
        HostPinned = "host_pinned",
    }
}

/// What kind of memory an allocation is, as the shim records it: the one enumeration of memory
/// kinds, shared by the shim's tracker, the history (whose kind byte numbers it) and the
/// report, which names the first six in `leaks[].memory` ([`Memory`], keeping names it does not
/// know). The last two are the history's own: a block of cuguard's pool, and a block inside a
/// framework's cache; a report names both `device`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum MemoryKind {
    /// `cuMemAlloc*`.
    #[default]
    Device = 0,
    /// `cuMemAllocPitch*`.
    Pitched = 1,
    /// `cuMemAllocManaged`.
    Managed = 2,
    /// Stream-ordered: `cuMemAllocAsync*`, `cuMemAllocFromPoolAsync*`.
    Async = 3,
    /// Virtual memory management: `cuMemCreate`/`cuMemMap`.
    Vmm = 4,
    /// Page-locked host memory: `cuMemAllocHost*`, `cuMemHostAlloc`.
    HostPinned = 5,
    /// A block of cuguard's own pool.
    PoolBlock = 6,
    /// A block inside a framework's cache (PyTorch's, CuPy's), where the shim reads them.
    CacheBlock = 7,
}

impl MemoryKind {
    /// Every kind, by number.
    pub const ALL: [MemoryKind; 8] = [
        MemoryKind::Device,
        MemoryKind::Pitched,
        MemoryKind::Managed,
        MemoryKind::Async,
        MemoryKind::Vmm,
        MemoryKind::HostPinned,
        MemoryKind::PoolBlock,
        MemoryKind::CacheBlock,
    ];

    /// The kind numbered `n` (the history's kind byte's high nibble).
    pub fn of_number(n: u8) -> Option<MemoryKind> {
        MemoryKind::ALL.get(usize::from(n)).copied()
    }

    /// The report's `memory` for it.
    pub fn report(self) -> Memory {
        match self {
            MemoryKind::Device | MemoryKind::PoolBlock | MemoryKind::CacheBlock => Memory::Device,
            MemoryKind::Pitched => Memory::Pitched,
            MemoryKind::Managed => Memory::Managed,
            MemoryKind::Async => Memory::Async,
            MemoryKind::Vmm => Memory::Vmm,
            MemoryKind::HostPinned => Memory::HostPinned,
        }
    }

    /// The report's name for it (`leaks[].memory`).
    pub fn as_str(self) -> &'static str {
        self.report().known_name().unwrap_or("device")
    }

    /// Whether it occupies device memory (everything but pinned host memory).
    pub fn on_device(self) -> bool {
        self != MemoryKind::HostPinned
    }
}

impl From<MemoryKind> for Memory {
    fn from(kind: MemoryKind) -> Memory {
        kind.report()
    }
}

impl Default for Memory {
    /// Plain device memory, `cuMemAlloc`'s.
    fn default() -> Memory {
        Memory::Device
    }
}

string_enum! {
    /// Why an allocation is in `leaks` (`leaks[].state`).
    LeakState {
        /// The program still owned it when the report was written.
        LiveAtExit = "live_at_exit",
        /// Its context was destroyed (or the primary context reset or released) while it was
        /// live, so the memory is gone without a free.
        ReleasedByContextDestroy = "released_by_context_destroy",
    }
}

string_enum! {
    /// What holds an allocation live when a Python program's code ended, or at a snapshot
    /// (`python.view.allocations[].class`).
    HeldClass {
        /// A Python object holds it: a path of references from a name reaches the object
        /// (or the object is only in an unreached cycle: its holder has no path).
        Held = "held",
        /// The program's own allocation, and no Python object holds it.
        Lost = "lost",
        /// A framework's cache segment: see its `blocks` (live and idle).
        Cache = "cache",
        /// A library's or the driver's memory (cuBLAS workspaces, NCCL, context internals):
        /// not the program's to hold.
        Library = "library",
        /// A framework has queued its free and makes it later (numba's deferred
        /// deallocations): the framework's, neither lost nor a leak.
        PendingFree = "pending_free",
        /// Not classified: made while the end was being looked at, or the look was cut short.
        Unclassified = "unclassified",
    }
}

string_enum! {
    /// What an event is (`events[].kind`). Unknown kinds are valid and kept.
    EventKind {
        /// A pointer freed twice.
        DoubleFree = "double_free",
        /// A free the driver refused (not an allocation, or an interior pointer).
        InvalidFree = "invalid_free",
        /// A free of a pointer the shim never saw allocated; forwarded to the driver.
        UntrackedFree = "untracked_free",
        /// A free made while another context than the allocation's was current.
        FreeInWrongContext = "free_in_wrong_context",
        /// A free of an allocation that had already gone with its destroyed context.
        FreeAfterContextDestroy = "free_after_context_destroy",
        /// A context went away while allocations in it were live.
        ContextDestroyedWithLiveAllocations = "context_destroyed_with_live_allocations",
        /// An allocation call failed.
        AllocFailed = "alloc_failed",
        /// An IPC export of a pooled pointer was refused.
        IpcRefused = "ipc_refused",
        /// Live memory crossed the configured warning threshold.
        WarnThresholdCrossed = "warn_threshold_crossed",
        /// A problem of the shim itself.
        ShimFault = "shim_fault",
    }
}

/// `stacks[].site.in`: which list of a stack the site's index points into.
pub mod site_list {
    /// The native frames (`frames`).
    pub const FRAMES: &str = "frames";
    /// The Python frames (`python`).
    pub const PYTHON: &str = "python";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_values_are_kept() {
        for k in EventKind::KNOWN {
            assert_eq!(&EventKind::from_name(k.as_str()), k);
            assert_eq!(k.known_name(), Some(k.as_str()));
        }
        let future = EventKind::from_name("kind_from_the_future");
        assert_eq!(future, EventKind::Other("kind_from_the_future".into()));
        assert_eq!(future.known_name(), None);
        assert_eq!(
            serde_json::to_string(&Memory::HostPinned).unwrap(),
            "\"host_pinned\""
        );
    }
}

/// `owners[].kind`: what kind of holder an owner is. The one definition: the shim's owner rules
/// (`cuguard_symbolize::rules`) give it, and `cuguard` adds up bytes and filters by it. The
/// report keeps it as a string (`OwnerInfo::kind`), so a kind this version does not know reads as
/// [`OwnerKind::parse`]'s `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerKind {
    /// The program's own data (a tensor, an array, a buffer it asked for).
    Program,
    /// Memory a framework keeps for reuse (PyTorch's caching allocator, CuPy's pool, RMM's pool
    /// resources, XLA's BFC allocator): its cache, not necessarily the program's data.
    FrameworkCache,
    /// A library's own memory (cuBLAS, cuDNN, NCCL… workspaces and handles).
    Library,
    /// The CUDA driver and runtime themselves.
    Driver,
}

impl OwnerKind {
    /// Every kind, in the order of this enum.
    pub const ALL: [OwnerKind; 4] = [
        OwnerKind::Program,
        OwnerKind::FrameworkCache,
        OwnerKind::Library,
        OwnerKind::Driver,
    ];

    /// `program`, `framework_cache`, `library` or `driver`.
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerKind::Program => "program",
            OwnerKind::FrameworkCache => "framework_cache",
            OwnerKind::Library => "library",
            OwnerKind::Driver => "driver",
        }
    }

    /// The kind [`OwnerKind::as_str`] names.
    pub fn parse(s: &str) -> Option<OwnerKind> {
        OwnerKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for OwnerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
