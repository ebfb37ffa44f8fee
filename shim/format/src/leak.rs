//! `leaks[]` as the reader parses it to fold ([`LeakView`]): a [`Leak`] whose strings are
//! borrowed from the document, so that `cuguard summary` and `cuguard check` fold millions of
//! leaks without an allocation each. Both hold the one allocation core
//! ([`Allocation`](crate::allocation::Allocation)); the reader's tests check that the fast
//! parser's key list and `docs/report.schema.json` name the same fields.

use serde::Deserialize;

use crate::addr::Addr;
use crate::allocation::Allocation;
use crate::enums::LeakState;
use crate::intern;
use crate::model::Leak;
use crate::text::Text;

/// `leaks[]` as parsed to fold: a [`Leak`], strings borrowed (it derefs to its core).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct LeakView<'a> {
    /// See [`Leak::allocation`].
    #[serde(flatten, borrow)]
    pub allocation: Allocation<Text<'a>>,
    /// See [`Leak::state`].
    pub state: LeakState,
    /// See [`Leak::handle`].
    #[serde(default)]
    pub handle: Option<Addr>,
    /// See [`Leak::owner`].
    #[serde(default, borrow)]
    pub owner: Option<Text<'a>>,
}

impl<'a> std::ops::Deref for LeakView<'a> {
    type Target = Allocation<Text<'a>>;
    fn deref(&self) -> &Allocation<Text<'a>> {
        &self.allocation
    }
}

impl LeakView<'_> {
    /// The leak, owned (its driver entry interned).
    pub fn to_leak(&self) -> Leak {
        Leak {
            allocation: self
                .allocation
                .clone()
                .map_text(|api| intern::intern(&api.0)),
            state: self.state.clone(),
            handle: self.handle,
            owner: self.owner.as_ref().map(|o| o.0.to_string()),
        }
    }
}
