//! The host memory that stands in for device memory: thin wrappers over `mmap`, `munmap`,
//! `mprotect` and `memfd_create`.
//!
//! Every mapping is page-aligned (so at least the 512-byte alignment of the real driver) and made
//! with `MAP_NORESERVE`, so a large simulated device costs nothing until its bytes are touched.

use std::ffi::c_int;

use crate::errors::Fault;

/// The host page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// `len` rounded up to whole pages (at least one page).
pub fn page_round(len: usize) -> Option<usize> {
    let page = page_size();
    len.max(1).checked_next_multiple_of(page)
}

/// Maps `len` bytes (rounded up to pages) of fresh zeroed read-write memory. Returns the address
/// and the mapped length.
pub fn map_anon(len: usize) -> Result<(u64, usize), Fault> {
    let len = page_round(len).ok_or(Fault::OutOfMemory)?;
    // SAFETY: an anonymous mapping at an address of the kernel's choice touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Fault::HostResources);
    }
    Ok((p as u64, len))
}

/// Reserves `len` bytes of address space with no access, aligned to `align` (a power of two).
/// Returns the aligned start; exactly `[start, start + len)` stays reserved.
pub fn reserve(len: usize, align: usize) -> Result<u64, Fault> {
    let align = align.max(page_size());
    let total = len.checked_add(align).ok_or(Fault::OutOfMemory)?;
    // SAFETY: an anonymous PROT_NONE mapping at an address of the kernel's choice.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Fault::HostResources);
    }
    let raw = p as usize;
    let start = raw.next_multiple_of(align);
    let head = start - raw;
    let tail = total - head - len;
    // SAFETY: both trimmed pieces lie inside the mapping just made, which nothing else uses.
    unsafe {
        if head > 0 {
            libc::munmap(raw as *mut _, head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut _, tail);
        }
    }
    Ok(start as u64)
}

/// Unmaps `[addr, addr + len)`.
///
/// # Safety
/// The range is a mapping (or part of one) made by this module that nothing will touch again.
pub unsafe fn unmap(addr: u64, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: by the caller's contract the range is ours and dead.
    unsafe { libc::munmap(addr as *mut _, len) };
}

/// Puts a no-access anonymous mapping over `[addr, addr + len)`, returning a range that held a
/// file mapping to plain reserved address space.
///
/// # Safety
/// The range belongs to a reservation made by [`reserve`], and nothing uses its contents anymore.
pub unsafe fn unmap_to_reserved(addr: u64, len: usize) -> Result<(), Fault> {
    // SAFETY: MAP_FIXED replaces only the caller's own range.
    let p = unsafe {
        libc::mmap(
            addr as *mut _,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Fault::HostResources)
    } else {
        Ok(())
    }
}

/// Maps `len` bytes of `fd` at `offset` over `[addr, addr + len)`, shared, with protection `prot`.
///
/// # Safety
/// The range belongs to the caller (a reservation or an allocation it owns); its old contents are
/// replaced.
pub unsafe fn map_fd_fixed(
    addr: u64,
    len: usize,
    fd: c_int,
    offset: u64,
    prot: c_int,
) -> Result<(), Fault> {
    // SAFETY: MAP_FIXED replaces only the caller's own range.
    let p = unsafe {
        libc::mmap(
            addr as *mut _,
            len,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Fault::HostResources)
    } else {
        Ok(())
    }
}

/// Maps `len` bytes of `fd`, shared and read-write, at an address of the kernel's choice.
pub fn map_fd(len: usize, fd: c_int) -> Result<u64, Fault> {
    // SAFETY: a new mapping at an address of the kernel's choice touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Fault::HostResources)
    } else {
        Ok(p as u64)
    }
}

/// Changes the protection of `[addr, addr + len)`.
///
/// # Safety
/// The range is a mapping the caller owns.
pub unsafe fn protect(addr: u64, len: usize, prot: c_int) -> Result<(), Fault> {
    // SAFETY: by the caller's contract the range is ours.
    let rc = unsafe { libc::mprotect(addr as *mut _, len, prot) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Fault::HostResources)
    }
}

/// A new anonymous memory file of `len` bytes (close-on-exec).
///
/// Made with the system call rather than glibc's `memfd_create` wrapper, which glibc has only
/// from 2.27 on: the wheel's binaries link against glibc 2.17 (`scripts/release-wheel.sh`).
pub fn memfd(len: usize) -> Result<c_int, Fault> {
    // SAFETY: memfd_create(2) takes a NUL-terminated name (a literal) and flags; it returns a
    // new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_memfd_create,
            c"cuguard-sim".as_ptr(),
            libc::MFD_CLOEXEC,
        )
    } as c_int;
    if fd < 0 {
        return Err(Fault::HostResources);
    }
    // SAFETY: fd was just created and is ours.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
        close(fd);
        return Err(Fault::HostResources);
    }
    Ok(fd)
}

/// Closes a descriptor this module handed out.
pub fn close(fd: c_int) {
    // SAFETY: closing a descriptor we own; the result does not matter.
    unsafe { libc::close(fd) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_memory_is_zeroed_and_writable() {
        let (p, len) = map_anon(10_000).unwrap();
        assert_eq!(p % 4096, 0);
        assert!(len >= 10_000);
        // SAFETY: the mapping is ours and `len` bytes long.
        unsafe {
            let s = std::slice::from_raw_parts_mut(p as *mut u8, len);
            assert!(s.iter().all(|&b| b == 0));
            s[9_999] = 7;
            unmap(p, len);
        }
    }

    #[test]
    fn reservation_is_aligned() {
        let p = reserve(4 << 20, 2 << 20).unwrap();
        assert_eq!(p % (2 << 20), 0);
        // SAFETY: the reservation is ours.
        unsafe { unmap(p, 4 << 20) };
    }

    #[test]
    fn memfd_shares_bytes_between_mappings() {
        let fd = memfd(8192).unwrap();
        let a = map_fd(8192, fd).unwrap();
        let b = map_fd(8192, fd).unwrap();
        // SAFETY: both mappings are ours and 8192 bytes long.
        unsafe {
            *(a as *mut u8).add(100) = 42;
            assert_eq!(*(b as *const u8).add(100), 42);
            unmap(a, 8192);
            unmap(b, 8192);
        }
        close(fd);
    }
}
