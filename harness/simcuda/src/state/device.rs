//! The device family's operations on the state: making the devices at `cuInit`, each with its
//! (inactive) primary context, its default pool, and the memory other processes hold on it.

use super::State;
use crate::model::device::Device;
use crate::model::memory::DeviceMem;

impl State {
    /// Builds the devices, their primary contexts (inactive) and default pools, each of
    /// `memory` bytes of which other processes hold `others`.
    pub fn build_devices(&mut self, count: u32, memory: u64, others: u64) {
        for ordinal in 0..count as i32 {
            let primary = self.new_primary(ordinal);
            let default_pool = self.new_default_pool(ordinal);
            self.devices.push(Device {
                mem: DeviceMem::beside(memory, others),
                primary,
                default_pool,
                current_pool: default_pool,
            });
        }
    }
}
