//! The IPC family's operations on the state: moving an allocation's bytes into a memory file
//! another process can map, once, at its first export.

use std::ffi::c_int;

use super::State;
use crate::errors::Fault;
use crate::hostmem;

impl State {
    /// Moves the bytes of allocation `base` into a memory file mapped at the same address, once.
    pub fn share_alloc(&mut self, base: u64) -> Result<c_int, Fault> {
        let a = self.allocs.get(&base).ok_or(Fault::UnknownPointer)?;
        if let Some(fd) = a.ipc_fd {
            return Ok(fd);
        }
        let len = a.map_len;
        let fd = hostmem::memfd(len)?;
        let copy = (|| {
            let tmp = hostmem::map_fd(len, fd)?;
            let page = hostmem::page_size();
            // SAFETY: `base` is a live allocation of `len` mapped bytes and `tmp` a fresh mapping of
            // the same length; pages that are all zero are skipped (the file starts zeroed), so
            // untouched memory stays untouched.
            unsafe {
                for off in (0..len).step_by(page) {
                    let src = std::slice::from_raw_parts((base as usize + off) as *const u8, page);
                    if src.iter().any(|&x| x != 0) {
                        std::ptr::copy_nonoverlapping(
                            src.as_ptr(),
                            (tmp as usize + off) as *mut u8,
                            page,
                        );
                    }
                }
                hostmem::unmap(tmp, len);
                hostmem::map_fd_fixed(base, len, fd, 0, libc::PROT_READ | libc::PROT_WRITE)
            }
        })();
        if let Err(f) = copy {
            hostmem::close(fd);
            return Err(f);
        }
        if let Some(a) = self.allocs.get_mut(&base) {
            a.ipc_fd = Some(fd);
        }
        Ok(fd)
    }
}
