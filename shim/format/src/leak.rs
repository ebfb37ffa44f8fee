//! `leaks[]` as the reader parses it to fold ([`LeakView`]): the fields of [`Leak`], strings
//! borrowed from the document, so that `cuguard summary` and `cuguard check` fold millions of
//! leaks without an allocation each. [`Leak`] is the owned record; the reader's tests check that
//! both, `PyAllocation`, the fast parser's key list and `docs/report.schema.json` name the same
//! fields.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::addr::Addr;
use crate::enums::{LeakState, Memory};
use crate::model::Leak;
use crate::{intern, wire};

/// A string of the document: borrowed where it has no escapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

/// `leaks[]` as parsed to fold: the fields of [`Leak`], strings borrowed.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct LeakView<'a> {
    /// See [`Leak::address`].
    pub address: Addr,
    /// See [`Leak::size`].
    pub size: u64,
    /// See [`Leak::requested`].
    pub requested: u64,
    /// See [`Leak::api`].
    #[serde(borrow)]
    pub api: Text<'a>,
    /// See [`Leak::memory`].
    pub memory: Memory,
    /// See [`Leak::device`].
    #[serde(with = "wire::device")]
    pub device: u32,
    /// See [`Leak::context`].
    pub context: Option<u32>,
    /// See [`Leak::thread`].
    pub thread: u64,
    /// See [`Leak::seq`].
    pub seq: u64,
    /// See [`Leak::time_ms`].
    pub time_ms: u64,
    /// See [`Leak::stack`].
    pub stack: Option<u64>,
    /// See [`Leak::state`].
    pub state: LeakState,
    /// See [`Leak::handle`].
    #[serde(default)]
    pub handle: Option<Addr>,
    /// See [`Leak::owner`].
    #[serde(default, borrow)]
    pub owner: Option<Text<'a>>,
}

impl LeakView<'_> {
    /// The leak, owned (its driver entry interned).
    pub fn to_leak(&self) -> Leak {
        Leak {
            address: self.address,
            size: self.size,
            requested: self.requested,
            api: intern::intern(&self.api.0),
            memory: self.memory.clone(),
            device: self.device,
            context: self.context,
            thread: self.thread,
            seq: self.seq,
            time_ms: self.time_ms,
            stack: self.stack,
            state: self.state.clone(),
            handle: self.handle,
            owner: self.owner.as_ref().map(|o| o.0.to_string()),
        }
    }
}
