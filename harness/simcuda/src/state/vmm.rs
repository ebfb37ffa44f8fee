//! The VMM family's operations on the state: a physical allocation's memory goes back to its
//! device once it is released and unmapped.

use super::State;
use crate::hostmem;

impl State {
    /// Frees a physical allocation that is released and unmapped.
    pub fn drop_phys_if_done(&mut self, handle: u64) {
        let done = self
            .vmm
            .handles
            .get(&handle)
            .is_some_and(|p| p.released && p.mappings == 0);
        if !done {
            return;
        }
        let Some(p) = self.vmm.handles.remove(&handle) else {
            return;
        };
        hostmem::close(p.fd);
        if let Ok(d) = self.device_mut(p.device) {
            d.mem.uncharge(p.size);
            d.mem.drop_live(p.size);
        }
    }
}
