//! The peer family's model: which contexts may touch which other contexts' memory.
//!
//! Every pair of distinct simulated devices can access each other; a device cannot be its own
//! peer. Access is one-way, from the context current at `cuCtxEnablePeerAccess` to the peer
//! context given, and kept by context id: it ends with `cuCtxDisablePeerAccess` or when either
//! context is destroyed (a primary context that becomes active again starts with no peers).

use crate::errors::Fault;

/// Peer access enabled: (id of the accessing context, id of the peer context).
#[derive(Debug, Default)]
pub struct PeerAccess {
    pairs: Vec<(u64, u64)>,
}

impl PeerAccess {
    /// Whether work issued in the context with id `from` (on device `from_device`) may touch
    /// memory owned by the context with id `owner` (on device `owner_device`): always on the same
    /// device, and across devices once `from` enabled peer access to `owner`.
    pub fn may_touch(&self, from: u64, from_device: i32, owner: u64, owner_device: i32) -> bool {
        from == owner || from_device == owner_device || self.pairs.contains(&(from, owner))
    }

    /// Context `from` may now touch `to`'s memory.
    pub fn enable(&mut self, from: u64, to: u64) -> Result<(), Fault> {
        if self.pairs.contains(&(from, to)) {
            return Err(Fault::PeerAlreadyEnabled);
        }
        self.pairs.push((from, to));
        Ok(())
    }

    /// Context `from` may no longer touch `to`'s memory.
    pub fn disable(&mut self, from: u64, to: u64) -> Result<(), Fault> {
        let before = self.pairs.len();
        self.pairs.retain(|k| *k != (from, to));
        if self.pairs.len() == before {
            return Err(Fault::PeerNotEnabled);
        }
        Ok(())
    }

    /// The context with id `id` is gone: every access from or to it ends.
    pub fn release_context(&mut self, id: u64) {
        self.pairs.retain(|&(from, to)| from != id && to != id);
    }
}
