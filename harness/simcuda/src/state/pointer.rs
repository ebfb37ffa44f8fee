//! The pointer family's operations on the state: classifying an address by what the driver made
//! there (allocations, VMM mappings), for copies and for the pointer attributes.

use super::State;
use crate::errors::Fault;
use crate::ffi::consts::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
use crate::model::memory::AllocKind;
use crate::model::pointer::{Info, Place};

impl State {
    /// Where `[ptr, ptr + len)` lives. A range that starts in driver memory must end in it
    /// ([`Fault::BadRange`]); VMM memory must allow the access ([`Fault::InaccessibleRange`]).
    pub fn place(&self, ptr: u64, len: u64, write: bool) -> Result<Place, Fault> {
        if let Some(a) = self.containing(ptr) {
            if ptr.checked_add(len).is_none_or(|end| end > a.base + a.size) {
                return Err(Fault::BadRange);
            }
            return Ok(match a.kind {
                AllocKind::Managed => Place::Managed,
                k if k.pinned_host() => Place::Pinned,
                _ => Place::Device,
            });
        }
        match self.vmm.check_access(ptr, len, write)? {
            Some(_) => Ok(Place::Device),
            None => Ok(Place::Pageable),
        }
    }

    /// Everything the driver knows about `ptr`, if it made the memory there.
    pub fn pointer_info(&self, ptr: u64) -> Option<Info> {
        if let Some(a) = self.containing(ptr) {
            let (pool, handle_types) = match a.kind {
                AllocKind::Async { pool, .. } => (
                    pool,
                    self.pools.get(&pool).map_or(0, |p| p.handle_types as u64),
                ),
                _ => (0, 0),
            };
            return Some(Info {
                base: a.base,
                size: a.size,
                host: a.kind.pinned_host(),
                managed: a.kind == AllocKind::Managed,
                ctx: a.ctx.handle,
                device: a.ctx.device,
                buffer_id: a.buffer_id,
                pool,
                ipc_capable: matches!(a.kind, AllocKind::Device | AllocKind::Pitched { .. }),
                handle_types,
                access: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            });
        }
        let (base, m) = self.vmm.mapping_containing(ptr)?;
        let handle_types = self
            .vmm
            .handles
            .get(&m.handle)
            .map_or(0, |p| p.handle_types as u64);
        Some(Info {
            base,
            size: m.size,
            host: false,
            managed: false,
            ctx: 0,
            device: m.device,
            buffer_id: m.handle,
            pool: 0,
            ipc_capable: false,
            handle_types,
            access: m.access,
        })
    }
}
