//! Leaks handed to a reader's own code while a report is parsed, instead of kept in
//! [`Report::leaks`](crate::Report::leaks): what lets `cuguard summary` and `cuguard check` fold
//! millions of leaks without holding them.
//!
//! [`with_leak_sink`] installs a [`LeakSink`] on this thread for the length of one parse: every
//! element of `leaks` is then parsed as a [`LeakView`] (its strings borrowed from the document
//! where they have no escapes), given to the sink, and dropped; the parsed report's `leaks` is
//! empty. Without a sink, `leaks` is parsed into `Vec<Leak>` exactly as before. A reader that
//! parses `leaks` by its own means borrows the installed sink with [`with_installed_sink`].

use std::any::Any;
use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use crate::addr::Addr;
use crate::enums::{LeakState, Memory};
use crate::model::Leak;
use crate::{intern, wire};

/// What receives the leaks of a report while it is parsed (see [`with_leak_sink`]).
pub trait LeakSink: Any {
    /// One leak, in the order of the report's `leaks`.
    fn leak(&mut self, leak: LeakView<'_>);
}

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

/// `leaks[]` as parsed for a [`LeakSink`]: the fields of [`Leak`], strings borrowed.
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

thread_local! {
    static SINK: RefCell<Option<Box<dyn LeakSink>>> = const { RefCell::new(None) };
}

/// Runs `parse` (one report's parse, on this thread) with `sink` receiving its leaks; gives the
/// sink back with `parse`'s result. Reports parsed inside have empty `leaks`.
pub fn with_leak_sink<S: LeakSink, R>(sink: S, parse: impl FnOnce() -> R) -> (S, R) {
    let previous = SINK.with(|s| s.borrow_mut().replace(Box::new(sink)));
    let result = parse();
    let installed = SINK.with(|s| std::mem::replace(&mut *s.borrow_mut(), previous));
    let sink: Box<dyn Any> = installed.expect("the sink is put back after each use");
    match sink.downcast::<S>() {
        Ok(sink) => (*sink, result),
        Err(_) => unreachable!("the sink installed is the one taken back"),
    }
}

/// Runs `f` with this thread's sink (`None` when none is installed) taken out for the length of
/// the call, then puts it back: for a reader that hands a report's leaks to the sink by its own
/// means instead of through `Report`'s `Deserialize` (a parse inside `f` sees no sink).
pub fn with_installed_sink<R>(f: impl FnOnce(Option<&mut dyn LeakSink>) -> R) -> R {
    let mut sink = SINK.with(|s| s.borrow_mut().take());
    let result = f(sink.as_deref_mut());
    if let Some(sink) = sink {
        SINK.with(|s| *s.borrow_mut() = Some(sink));
    }
    result
}

/// `deserialize_with` for [`Report::leaks`](crate::Report::leaks): into the thread's sink when
/// one is installed, else into a `Vec`.
pub(crate) fn leaks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Leak>, D::Error> {
    let Some(mut sink) = SINK.with(|s| s.borrow_mut().take()) else {
        return Vec::<Leak>::deserialize(d);
    };
    let result = d.deserialize_seq(IntoSink(&mut *sink));
    SINK.with(|s| *s.borrow_mut() = Some(sink));
    result.map(|()| Vec::new())
}

/// Streams a sequence of leaks into a sink.
struct IntoSink<'s>(&'s mut dyn LeakSink);

impl<'de> Visitor<'de> for IntoSink<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(leak) = seq.next_element::<LeakView<'de>>()? {
            self.0.leak(leak);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Keep(Vec<Leak>);

    impl LeakSink for Keep {
        fn leak(&mut self, leak: LeakView<'_>) {
            self.0.push(leak.to_leak());
        }
    }

    #[test]
    fn a_sink_gets_every_leak_and_the_report_none() {
        let text = br#"[{"address":"0x10","size":8,"requested":7,"api":"cuMemAlloc_v2",
            "memory":"device","device":0,"context":1,"thread":5,"seq":3,"time_ms":9,"stack":2,
            "state":"live_at_exit","owner":"pro\"gram"},
            {"address":"0x20","size":4,"requested":4,"api":"cuMemAllocAsync","memory":"async",
            "device":-1,"context":null,"thread":5,"seq":4,"time_ms":9,"stack":null,
            "state":"released_by_context_destroy"}]"#;
        let plain: Vec<Leak> = serde_json::from_slice(text).unwrap();
        #[derive(Deserialize)]
        struct Holder {
            #[serde(deserialize_with = "leaks")]
            leaks: Vec<Leak>,
        }
        let doc = [&b"{\"leaks\":"[..], text, b"}"].concat();
        let (sink, parsed) =
            with_leak_sink(Keep::default(), || serde_json::from_slice::<Holder>(&doc));
        assert!(parsed.unwrap().leaks.is_empty());
        assert_eq!(sink.0, plain);
        // Without a sink, the leaks are kept.
        let parsed: Holder = serde_json::from_slice(&doc).unwrap();
        assert_eq!(parsed.leaks, plain);
    }
}
