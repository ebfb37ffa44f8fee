//! Loaded modules, read from the dynamic loader's list (`dl_iterate_phdr`) and from the mapped
//! program headers: address ranges, load bias, build-id, and where the mapped `.eh_frame_hdr`
//! and `.eh_frame` lie (found through `PT_GNU_EH_FRAME`, so no file is opened).
//!
//! `dl_iterate_phdr` takes the loader's `dl_load_write_lock` while it runs the callback. The
//! callbacks here only read mapped headers and push to a `Vec` (malloc, which does not take
//! that lock). glibc (2.36 here) does not re-initialise that lock in a forked child: a fork while
//! another thread of the shim (its history's drain, a capture's refresh) was inside
//! `dl_iterate_phdr` left the child waiting forever at its first look at its modules (its
//! report, at exit; seen in CI's load as a Python child that never ended). So every call here
//! holds [`ITERATING`], which [`before_fork`] takes and [`after_fork_parent`] gives back, and
//! which [`reset_after_fork`] makes anew in the child (the one fork handler, `crate::lifecycle`):
//! no thread of the shim is inside the loader's list when the process forks. (One of the program's own threads inside it then is
//! the program's, and glibc's, to avoid.)

use std::ffi::{CStr, c_int, c_void};

/// One loaded module, as mapped in this process. Addresses are absolute (AVMAs) unless said.
#[derive(Clone, Debug, Default)]
pub(crate) struct Mapped {
    /// The loader's name for it (`dlpi_name`); empty for the main program.
    pub name: Vec<u8>,
    /// Load bias: absolute address = bias + file vaddr.
    pub bias: u64,
    /// Lowest and one-past-highest absolute address covered by its `PT_LOAD` segments.
    pub start: u64,
    pub end: u64,
    /// File vaddr range of the executable `PT_LOAD` segment(s) (the lowest to the highest).
    pub text_svma: Option<(u64, u64)>,
    /// File vaddr range of `.eh_frame_hdr` (the `PT_GNU_EH_FRAME` segment).
    pub eh_frame_hdr_svma: Option<(u64, u64)>,
    /// File vaddr range from the start of `.eh_frame` to the end of the segment holding it (the
    /// section's exact size is not in the program headers; an upper bound suffices).
    pub eh_frame_svma: Option<(u64, u64)>,
    /// The GNU build-id note, raw bytes.
    pub build_id: Option<Vec<u8>>,
}

/// Held around each of the shim's `dl_iterate_phdr` calls and across a fork (see the module
/// doc). Recursive, as the loader's own lock is: a fatal signal's report may look at the modules
/// on a thread interrupted inside a look.
static mut ITERATING: libc::pthread_mutex_t = libc::PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

/// `dl_iterate_phdr(cb, data)` with [`ITERATING`] held.
///
/// # Safety
///
/// As `dl_iterate_phdr`: `cb` may use `data` only as what it points to.
unsafe fn iterate(
    cb: unsafe extern "C" fn(*mut libc::dl_phdr_info, usize, *mut c_void) -> c_int,
    data: *mut c_void,
) {
    // SAFETY: a statically initialised mutex, never moved, locked and unlocked in pairs.
    unsafe {
        libc::pthread_mutex_lock(&raw mut ITERATING);
        libc::dl_iterate_phdr(Some(cb), data);
        libc::pthread_mutex_unlock(&raw mut ITERATING);
    }
}

/// The fork handler's prepare step: waits for the shim's threads to leave the loader's list.
pub(crate) fn before_fork() {
    // SAFETY: the static mutex, unlocked by `after_fork_parent` (made anew in the child).
    unsafe { libc::pthread_mutex_lock(&raw mut ITERATING) };
}

/// The fork handler's parent step: gives back what [`before_fork`] took.
pub(crate) fn after_fork_parent() {
    // SAFETY: held by this thread since `before_fork`.
    unsafe { libc::pthread_mutex_unlock(&raw mut ITERATING) };
}

/// The fork handler's child step (first of the stack's): the lock anew. (Not an unlock: the child's thread has
/// another thread id than the one that took the lock, and a recursive mutex refuses an unlock
/// by a thread that does not own it.)
pub(crate) fn reset_after_fork() {
    // SAFETY: the child has one thread, this one, and nothing else uses the lock while it runs
    // its fork handlers; writing the initializer makes it a new, unlocked mutex.
    unsafe { (&raw mut ITERATING).write(libc::PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP) };
}

/// Calls `f` for each loaded module, in the loader's order (main program first).
pub(crate) fn for_each(mut f: impl FnMut(&libc::dl_phdr_info)) {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the `&mut dyn FnMut` passed below, alive for the whole call; the
        // loader passes a valid `info` for the duration of the callback.
        let f = unsafe { &mut *(data as *mut &mut dyn FnMut(&libc::dl_phdr_info)) };
        // SAFETY: see above.
        f(unsafe { &*info });
        0
    }
    let mut dyn_f: &mut dyn FnMut(&libc::dl_phdr_info) = &mut f;
    // SAFETY: the callback only uses `data` as the closure reference it is.
    unsafe { iterate(cb, &mut dyn_f as *mut _ as *mut c_void) };
}

/// The loader's counters of modules loaded and unloaded since start (`dlpi_adds`,
/// `dlpi_subs`): when they have not moved, the module list has not changed.
pub(crate) fn load_counters() -> (u64, u64) {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        size: usize,
        data: *mut c_void,
    ) -> c_int {
        let need = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8;
        if size >= need {
            // SAFETY: `data` points at the `(u64, u64)` below; `info` is valid and, by `size`,
            // has the two counters.
            unsafe {
                *(data as *mut (u64, u64)) = ((*info).dlpi_adds, (*info).dlpi_subs);
            }
        }
        1 // the counters are the same in every entry: stop after the first
    }
    let mut counters = (0u64, 0u64);
    // SAFETY: the callback writes only the tuple it is given.
    unsafe { iterate(cb, &mut counters as *mut _ as *mut c_void) };
    counters
}

/// Whether a module the loader has now maps `addr` in one of its `PT_LOAD` segments: what
/// tells an address in a library loaded since the last snapshot (worth a rebuild) from JIT code
/// or a garbage frame (not). Walks the loader's list (its `dl_load_write_lock` held), stopping
/// at the first match; reads only mapped program headers and allocates nothing.
pub(crate) fn loaded_at(addr: u64) -> bool {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` points at the `(u64, bool)` below; the loader passes a valid `info`
        // whose `dlpi_phnum` program headers at `dlpi_phdr` are mapped during the callback.
        unsafe {
            let (addr, found) = &mut *(data as *mut (u64, bool));
            let info = &*info;
            if info.dlpi_phdr.is_null() {
                return 0;
            }
            let phdrs = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let hit = phdrs.iter().any(|p| {
                let start = info.dlpi_addr.wrapping_add(p.p_vaddr);
                p.p_type == libc::PT_LOAD && start <= *addr && *addr - start < p.p_memsz
            });
            if hit {
                *found = true;
                return 1;
            }
        }
        0
    }
    let mut state = (addr, false);
    // SAFETY: the callback only reads the headers it is given and writes the tuple.
    unsafe { iterate(cb, &mut state as *mut _ as *mut c_void) };
    state.1
}

/// Reads what this module needs from the mapped program headers of `info`.
pub(crate) fn describe(info: &libc::dl_phdr_info) -> Option<Mapped> {
    if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
        return None;
    }
    // SAFETY: the loader gives `dlpi_phnum` program headers at `dlpi_phdr`, mapped while the
    // module is loaded (we are inside its dl_iterate_phdr callback).
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let bias = info.dlpi_addr;
    let loads: Vec<&libc::Elf64_Phdr> =
        phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD).collect();
    if loads.is_empty() {
        return None;
    }
    let lo = loads.iter().map(|p| p.p_vaddr).min()?;
    let hi = loads
        .iter()
        .map(|p| p.p_vaddr.checked_add(p.p_memsz))
        .max()??;
    let mut m = Mapped {
        name: if info.dlpi_name.is_null() {
            Vec::new()
        } else {
            // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_bytes()
                .to_vec()
        },
        bias,
        start: bias.wrapping_add(lo),
        end: bias.wrapping_add(hi),
        ..Mapped::default()
    };
    // Readable, file-backed bytes of a segment: [vaddr, vaddr + filesz).
    let readable = |svma: u64, len: u64| {
        loads.iter().any(|p| {
            p.p_flags & libc::PF_R != 0
                && svma >= p.p_vaddr
                && svma
                    .checked_add(len)
                    .is_some_and(|e| e <= p.p_vaddr + p.p_filesz)
        })
    };
    for p in loads.iter().filter(|p| p.p_flags & libc::PF_X != 0) {
        let (a, b) = (p.p_vaddr, p.p_vaddr + p.p_memsz);
        m.text_svma = Some(match m.text_svma {
            None => (a, b),
            Some((x, y)) => (x.min(a), y.max(b)),
        });
    }
    for p in phdrs {
        match p.p_type {
            libc::PT_GNU_EH_FRAME if p.p_memsz >= 8 && readable(p.p_vaddr, p.p_memsz) => {
                let hdr = bias.wrapping_add(p.p_vaddr) as *const u8;
                // SAFETY: the range was checked to lie in a readable, file-backed PT_LOAD.
                let bytes = unsafe { std::slice::from_raw_parts(hdr, p.p_memsz as usize) };
                m.eh_frame_hdr_svma = Some((p.p_vaddr, p.p_vaddr + p.p_memsz));
                if let Some(eh) = eh_frame_svma(bytes, p.p_vaddr) {
                    let seg = loads.iter().find(|s| {
                        s.p_flags & libc::PF_R != 0
                            && eh >= s.p_vaddr
                            && eh < s.p_vaddr + s.p_filesz
                    });
                    if let Some(s) = seg {
                        m.eh_frame_svma = Some((eh, s.p_vaddr + s.p_filesz));
                    }
                }
            }
            libc::PT_NOTE if m.build_id.is_none() && readable(p.p_vaddr, p.p_memsz) => {
                let note = bias.wrapping_add(p.p_vaddr) as *const u8;
                // SAFETY: the range was checked to lie in a readable, file-backed PT_LOAD.
                let bytes = unsafe { std::slice::from_raw_parts(note, p.p_memsz as usize) };
                m.build_id = gnu_build_id(bytes).map(<[u8]>::to_vec);
            }
            _ => {}
        }
    }
    Some(m)
}

/// The file vaddr of `.eh_frame`, decoded from the `eh_frame_ptr` field of `.eh_frame_hdr`.
fn eh_frame_svma(hdr: &[u8], hdr_svma: u64) -> Option<u64> {
    let (version, enc) = (*hdr.first()?, *hdr.get(1)?);
    if version != 1 || enc == 0xff {
        return None;
    }
    let field = hdr.get(4..)?;
    let value: i64 = match enc & 0x0f {
        0x00 | 0x04 => u64::from_le_bytes(field.get(..8)?.try_into().ok()?) as i64,
        0x0c => i64::from_le_bytes(field.get(..8)?.try_into().ok()?),
        0x03 => i64::from(u32::from_le_bytes(field.get(..4)?.try_into().ok()?)),
        0x0b => i64::from(i32::from_le_bytes(field.get(..4)?.try_into().ok()?)),
        0x02 => i64::from(u16::from_le_bytes(field.get(..2)?.try_into().ok()?)),
        0x0a => i64::from(i16::from_le_bytes(field.get(..2)?.try_into().ok()?)),
        _ => return None,
    };
    let base = match enc & 0x70 {
        0x00 => 0,
        0x10 => hdr_svma + 4, // pc-relative: relative to the field itself
        0x30 => hdr_svma,     // data-relative: relative to the start of .eh_frame_hdr
        _ => return None,
    };
    Some(base.wrapping_add_signed(value))
}

/// The descriptor of the first `NT_GNU_BUILD_ID` note ("GNU", type 3) in a note segment.
pub(crate) fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let word = |b: &[u8], at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (word(notes, 0)?, word(notes, 4)?, word(notes, 8)?);
        let name_end = 12usize.checked_add(align4(namesz)?)?;
        let desc_end = name_end.checked_add(align4(descsz)?)?;
        let name = notes.get(12..12 + namesz)?;
        let desc = notes.get(name_end..name_end + descsz)?;
        if kind == 3 && name == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

/// All loaded modules, described.
pub(crate) fn all() -> Vec<Mapped> {
    let mut out = Vec::with_capacity(64);
    for_each(|info| {
        if let Some(m) = describe(info) {
            out.push(m);
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_main_program_and_libc_with_unwind_data() {
        let mods = all();
        assert!(mods.len() >= 2, "{mods:?}");
        let here = finds_main_program_and_libc_with_unwind_data as *const () as u64;
        let main = mods
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("this test's own module");
        assert!(main.eh_frame_hdr_svma.is_some() && main.eh_frame_svma.is_some());
        let libc = mods
            .iter()
            .find(|m| String::from_utf8_lossy(&m.name).contains("libc.so"))
            .expect("libc");
        assert!(libc.eh_frame_svma.is_some());
        assert!(libc.build_id.as_ref().is_some_and(|b| b.len() >= 8));
        assert!(loaded_at(here) && loaded_at(main.start) && !loaded_at(main.end + (1 << 40)));
        let on_stack = &mods as *const _ as u64;
        assert!(!loaded_at(on_stack), "the stack is no module");
        let (adds, subs) = load_counters();
        assert!(adds as usize >= mods.len() && subs <= adds, "{adds} {subs}");
    }

    #[test]
    fn build_id_note_parse() {
        let mut n = Vec::new();
        // A non-GNU note first, then the build-id.
        n.extend_from_slice(&5u32.to_le_bytes());
        n.extend_from_slice(&2u32.to_le_bytes());
        n.extend_from_slice(&1u32.to_le_bytes());
        n.extend_from_slice(b"Linux\0\0\0\x01\x02\0\0");
        n.extend_from_slice(&4u32.to_le_bytes());
        n.extend_from_slice(&3u32.to_le_bytes());
        n.extend_from_slice(&3u32.to_le_bytes());
        n.extend_from_slice(b"GNU\0\xaa\xbb\xcc\0");
        assert_eq!(gnu_build_id(&n), Some(&[0xaa, 0xbb, 0xcc][..]));
        assert_eq!(gnu_build_id(&n[..20]), None);
    }

    #[test]
    fn eh_frame_ptr_encodings() {
        // pcrel | sdata4: value -0x10 relative to field at hdr+4.
        let hdr = [1, 0x1b, 0x03, 0x3b, 0xf0, 0xff, 0xff, 0xff];
        assert_eq!(eh_frame_svma(&hdr, 0x1000), Some(0x1000 + 4 - 0x10));
        let hdr = [1, 0x03, 0, 0, 0x00, 0x20, 0, 0];
        assert_eq!(eh_frame_svma(&hdr, 0x1000), Some(0x2000));
        assert_eq!(eh_frame_svma(&[1, 0xff, 0, 0, 0, 0, 0, 0], 0), None);
    }
}
