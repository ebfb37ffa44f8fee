//! One allocation's core, declared once: the fields every record of an allocation shares, in
//! the report's order (`address` … `stack`), with how the reader's fast path reads each.
//!
//! [`allocation_core!`](crate::allocation_core) declares a core from a list of fields; this
//! crate declares [`Allocation`] with it, and the report's records of an allocation hold one,
//! flattened into their JSON: [`Leak`](crate::Leak) (`leaks[]`), its borrowed form
//! [`LeakView`](crate::LeakView) (what the fold reads) and
//! [`PyAllocation`](crate::PyAllocation) (`python.view.allocations[]`). Each derefs to its core,
//! so `leak.size` reads as before. A field added to the list reaches the JSON (serde), the fast
//! path's key list and reading ([`Fields`]), and the change of text ([`Allocation::map_text`])
//! at once, and the history's readers build it from a block ([`history`], `from_history`,
//! fields the block lacks coming from values the history writes beside it); the history
//! crate's test `shim/history/tests/allocation_core.rs` shows it with a copy of the list and one
//! field more.
//!
//! The text fields (`api`) are of a type parameter: `Arc<str>`, interned, in the owned records;
//! [`Text`], borrowed from the document, in the fold's. One spelling of an unknown device:
//! [`UNKNOWN_DEVICE`](crate::wire::UNKNOWN_DEVICE), `-1` in JSON.

use std::sync::Arc;

use serde::Deserializer;

use crate::addr::Addr;
use crate::enums::Memory;
use crate::text::Text;

/// Declares an allocation core: a struct generic over its text type `S` whose fields are the
/// list given, each `pub name: Type => how`, where `how` names the [`Values`] method the
/// fast path reads the value with (`text` for a field of type `S`). It implements [`Fields`]
/// for the borrowed form and `map_text`, which changes the text type.
#[macro_export]
macro_rules! allocation_core {
    (
        $(#[$meta:meta])*
        pub struct $name:ident<S> {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty => $read:ident, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(bound(
            serialize = "S: serde::Serialize",
            deserialize = "S: cuguard_format::allocation::ApiText<'de>"
        ))]
        pub struct $name<S> {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl<S> $name<S> {
            /// The same allocation with its text changed by `f`.
            pub fn map_text<T>(self, mut f: impl FnMut(S) -> T) -> $name<T> {
                $name {
                    $( $field: $crate::allocation::map::$read(self.$field, &mut f), )*
                }
            }
        }

        impl<'a> $name<$crate::text::Text<'a>> {
            /// The allocation as a history knows it (`cuguard_history`'s `Replay::facts` of a
            /// block): each field from the block where it holds it, else from the values the
            /// history gives by the field's name ([`HistoryFacts::field`]), else its default.
            ///
            /// [`HistoryFacts::field`]: $crate::allocation::HistoryFacts::field
            pub fn from_history(facts: &impl $crate::allocation::HistoryFacts<'a>) -> Self {
                $name {
                    $( $field: $crate::allocation::history::$read(facts, stringify!($field)), )*
                }
            }
        }

        impl<'a> $crate::allocation::Fields<'a> for $name<$crate::text::Text<'a>> {
            const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];
            const OPTIONAL: u64 = {
                let mut bits = 0u64;
                let mut at = 0u32;
                $(
                    if $crate::allocation::map::may_be_absent(stringify!($read)) {
                        bits |= 1 << at;
                    }
                    at += 1;
                )*
                let _ = at;
                bits
            };

            #[inline]
            fn read_field<V: $crate::allocation::Values<'a>>(
                &mut self,
                k: usize,
                values: &mut V,
            ) -> Option<()> {
                let mut at = 0usize;
                $(
                    if k == at {
                        self.$field = values.$read()?;
                        return Some(());
                    }
                    at += 1;
                )*
                let _ = at;
                None
            }
        }
    };
}

allocation_core! {
    /// The core of one allocation's record, as `leaks[]` and `python.view.allocations[]` both
    /// begin.
    pub struct Allocation<S> {
        /// The pointer the program received.
        pub address: Addr => addr,
        /// Bytes the program received (pitch × height for pitched allocations).
        pub size: u64 => u64,
        /// Bytes asked for (width × height for pitched allocations).
        pub requested: u64 => u64,
        /// The driver entry that made it, e.g. `"cuMemAlloc_v2"`.
        #[serde(deserialize_with = "ApiText::read")]
        pub api: S => text,
        /// What kind of memory it is.
        pub memory: Memory => memory,
        /// Device ordinal ([`UNKNOWN_DEVICE`](crate::wire::UNKNOWN_DEVICE) when the shim could
        /// not tell).
        #[serde(with = "crate::wire::device")]
        pub device: u32 => device,
        /// Context id.
        pub context: Option<u32> => opt_u32,
        /// OS thread id of the allocating thread.
        pub thread: u64 => u64,
        /// Global allocation order.
        pub seq: u64 => u64,
        /// When it was made, milliseconds since process start.
        pub time_ms: u64 => u64,
        /// Stack id.
        pub stack: Option<u64> => opt_u64,
        /// The program's name for it (`cuguard.tag`, `cuguard_tag_push`, `cuguard.annotate`);
        /// absent when it has none.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "crate::allocation::opt_text"
        )]
        pub tag: Option<S> => opt_text,
    }
}

/// Each field's value under `map_text`, by how the fast path reads it (the functions are
/// named for [`Values`]' methods): a text field through the change, any other as it is.
pub mod map {
    use super::{Addr, Memory};

    /// A text field: changed.
    pub fn text<S, T>(value: S, f: &mut impl FnMut(S) -> T) -> T {
        f(value)
    }

    /// An optional text field: changed where present.
    pub fn opt_text<S, T>(value: Option<S>, f: &mut impl FnMut(S) -> T) -> Option<T> {
        value.map(f)
    }

    /// Whether a field read by `read` may be absent from the JSON (written only when it has a
    /// value): the optional text fields.
    pub const fn may_be_absent(read: &str) -> bool {
        let (a, b) = (read.as_bytes(), b"opt_text");
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    macro_rules! kept {
        ($($read:ident: $ty:ty),*) => {$(
            #[doc = concat!("A field read by `", stringify!($read), "`: kept.")]
            pub fn $read<S, T>(value: $ty, _: &mut impl FnMut(S) -> T) -> $ty {
                value
            }
        )*};
    }
    kept!(addr: Addr, u64: u64, opt_u32: Option<u32>, opt_u64: Option<u64>, device: u32, memory: Memory);
}

/// A core's text type as serde reads it: [`Arc<str>`] interned (one shared string per
/// distinct driver entry), [`Text`] borrowed from the document where it can be.
pub trait ApiText<'de>: Sized {
    /// Reads one string.
    fn read<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

impl<'de> ApiText<'de> for Arc<str> {
    fn read<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::intern::string(d)
    }
}

impl<'de: 'a, 'a> ApiText<'de> for Text<'a> {
    fn read<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::Deserialize::deserialize(d)
    }
}

/// An optional text field as serde reads it: `null` or a string ([`ApiText::read`]).
pub fn opt_text<'de, D: Deserializer<'de>, S: ApiText<'de>>(d: D) -> Result<Option<S>, D::Error> {
    struct Present<S>(S);
    impl<'de, S: ApiText<'de>> serde::Deserialize<'de> for Present<S> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            S::read(d).map(Present)
        }
    }
    let v: Option<Present<S>> = serde::Deserialize::deserialize(d)?;
    Ok(v.map(|p| p.0))
}

/// What a history knows of one allocation (its block), as [`Allocation::from_history`] and
/// every core [`allocation_core!`](crate::allocation_core) declares read it:
/// `cuguard_history::replay::Facts`. A field the block does not hold comes from the values the
/// history writes beside it, by the field's name (`cuguard_history::Action::Field`).
pub trait HistoryFacts<'a> {
    /// The pointer the program received.
    fn address(&self) -> u64;
    /// Bytes the program received.
    fn size(&self) -> u64;
    /// The kind of memory, as the shim records it.
    fn memory(&self) -> crate::enums::MemoryKind;
    /// Device ordinal ([`UNKNOWN_DEVICE`](crate::wire::UNKNOWN_DEVICE) when unknown).
    fn device(&self) -> u32;
    /// The context's id, if it had one.
    fn context(&self) -> Option<u32>;
    /// The allocating thread.
    fn thread(&self) -> u64;
    /// When it was made, nanoseconds since the process started.
    fn start_ns(&self) -> u64;
    /// Its stack's id, if it has one.
    fn stack(&self) -> Option<u64>;
    /// The program's tag for it.
    fn tag(&self) -> Option<&'a str>;
    /// The value the history gives its field `name`, where it gives one.
    fn field(&self, name: &str) -> Option<u64>;
    /// The text of a name id (a text field's value).
    fn text(&self, id: u64) -> Option<&'a str>;
}

/// Each field's value from a history ([`HistoryFacts`]), by how the fast path reads it (the
/// functions are named for [`Values`]' methods), given the field's name: the core's fields a
/// block holds are read from it (`address`, `size`, `memory`, `device`, `context`, `thread`,
/// `time_ms`, `stack`, `tag`; `requested` is the size unless the history says otherwise);
/// any other field (`api`, `seq`, and a field added to the core) from the values written
/// beside the block, else its default.
pub mod history {
    use super::{Addr, HistoryFacts, Memory, Text};
    use crate::enums::MemoryKind;

    fn text_of<'a>(f: &impl HistoryFacts<'a>, name: &str) -> Option<Text<'a>> {
        f.field(name)
            .and_then(|id| f.text(id))
            .map(|t| Text(t.into()))
    }

    /// An address field.
    pub fn addr<'a>(f: &impl HistoryFacts<'a>, name: &str) -> Addr {
        match name {
            "address" => Addr(f.address()),
            _ => Addr(f.field(name).unwrap_or_default()),
        }
    }

    /// A number field.
    pub fn u64<'a>(f: &impl HistoryFacts<'a>, name: &str) -> u64 {
        match name {
            "size" => f.size(),
            "requested" => f.field(name).unwrap_or_else(|| f.size()),
            "thread" => f.thread(),
            "time_ms" => f.start_ns() / 1_000_000,
            _ => f.field(name).unwrap_or_default(),
        }
    }

    /// An optional number of `u32`'s range.
    pub fn opt_u32<'a>(f: &impl HistoryFacts<'a>, name: &str) -> Option<u32> {
        match name {
            "context" => f.context(),
            _ => f.field(name).and_then(|v| u32::try_from(v).ok()),
        }
    }

    /// An optional number.
    pub fn opt_u64<'a>(f: &impl HistoryFacts<'a>, name: &str) -> Option<u64> {
        match name {
            "stack" => f.stack(),
            _ => f.field(name),
        }
    }

    /// A device ordinal.
    pub fn device<'a>(f: &impl HistoryFacts<'a>, name: &str) -> u32 {
        match name {
            "device" => f.device(),
            _ => f
                .field(name)
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(crate::wire::UNKNOWN_DEVICE),
        }
    }

    /// A memory kind.
    pub fn memory<'a>(f: &impl HistoryFacts<'a>, name: &str) -> Memory {
        match name {
            "memory" => f.memory().report(),
            _ => f
                .field(name)
                .and_then(|v| MemoryKind::of_number(u8::try_from(v).ok()?))
                .map(MemoryKind::report)
                .unwrap_or_default(),
        }
    }

    /// A text field: a name id's text.
    pub fn text<'a>(f: &impl HistoryFacts<'a>, name: &str) -> Text<'a> {
        text_of(f, name).unwrap_or_default()
    }

    /// An optional text field.
    pub fn opt_text<'a>(f: &impl HistoryFacts<'a>, name: &str) -> Option<Text<'a>> {
        match name {
            "tag" => f.tag().map(|t| Text(t.into())),
            _ => text_of(f, name),
        }
    }
}

/// What the fast path reads a field's value with: the document's cursor, at the value.
/// Each method gives `None` where the text is not what the reader's fast path handles, and
/// the reader then gives the document to serde_json.
pub trait Values<'a> {
    /// An address string (`"0x7f00"`).
    fn addr(&mut self) -> Option<Addr>;
    /// A plain non-negative integer.
    fn u64(&mut self) -> Option<u64>;
    /// An integer of `u32`'s range, or `null`.
    fn opt_u32(&mut self) -> Option<Option<u32>>;
    /// A plain non-negative integer, or `null`.
    fn opt_u64(&mut self) -> Option<Option<u64>>;
    /// A device ordinal, `-1` for unknown.
    fn device(&mut self) -> Option<u32>;
    /// A memory kind's name.
    fn memory(&mut self) -> Option<Memory>;
    /// A string without escapes.
    fn text(&mut self) -> Option<Text<'a>>;
    /// A string without escapes, or `null`.
    fn opt_text(&mut self) -> Option<Option<Text<'a>>>;
}

/// A core as the fast path reads it: its keys, in order, and each one's reading.
pub trait Fields<'a>: Default {
    /// The fields' keys in JSON, in the order of the declaration (the shim writes them so).
    const KEYS: &'static [&'static str];
    /// The keys that may be absent, by bit of their index in [`Self::KEYS`] (those read by
    /// `opt_text`: written only when they have a value).
    const OPTIONAL: u64;
    /// Reads the value of `KEYS[k]` into its field; `None` where `k` is not a key of the core
    /// or the value is not one the fast path reads.
    fn read_field<V: Values<'a>>(&mut self, k: usize, values: &mut V) -> Option<()>;
}
