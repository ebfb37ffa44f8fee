//! The procaddr family's C entry points: `cuGetProcAddress` (CUDA 11.3, four arguments) and
//! `cuGetProcAddress_v2` (CUDA 12.0, with the `symbolStatus` out-argument), answered from the
//! table of export addresses kept here (its rows: `symbols.rs`).
//!
//! A program passes a base name ("cuMemAlloc") and the CUDA version it was built for, and gets
//! the newest entry whose ABI that version knows (`cuMemAlloc_v2`). With
//! `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` it gets the `_ptds`/`_ptsz` variant where one
//! exists. An unknown name (a versioned name such as "cuMemAlloc_v2" included) gives
//! `*pfn = NULL` and status `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`; a name that exists only in
//! newer versions gives `*pfn = NULL` and `CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT`. As
//! measured on the real driver, `cuGetProcAddress_v2` returns `CUDA_SUCCESS` in both cases (the
//! status says what happened) while the four-argument `cuGetProcAddress` returns
//! `CUDA_ERROR_NOT_FOUND`; the codes themselves live in `errors.rs`. Both work before `cuInit`
//! (that is how the runtime finds `cuInit`).

use std::ffi::{CStr, c_char, c_int, c_void};

use super::{guard, put};
use crate::errors::Fault;
use crate::ffi::CUresult;
use crate::ffi::consts::{
    CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, CU_GET_PROC_ADDRESS_SUCCESS,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
};

/// Which of the two entries is answering.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Abi {
    /// `cuGetProcAddress`: no status argument.
    V1,
    /// `cuGetProcAddress_v2`: `symbolStatus` (which may be NULL).
    V2,
}

/// Looks `symbol` up and writes the answer.
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string; `pfn` and `status` are NULL or writable.
unsafe fn get(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    abi: Abi,
    status: *mut c_int,
) -> Result<(), Fault> {
    if symbol.is_null() || pfn.is_null() {
        return Err(Fault::NullPointer);
    }
    let per_thread = match flags {
        CU_GET_PROC_ADDRESS_DEFAULT | CU_GET_PROC_ADDRESS_LEGACY_STREAM => false,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM => true,
        _ => return Err(Fault::BadFlags),
    };
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let name = unsafe { CStr::from_ptr(symbol) }.to_str().unwrap_or("");
    let (addr, code, fault) = match lookup(name, version, per_thread) {
        Lookup::Found(_, addr) => (addr.cast_mut(), CU_GET_PROC_ADDRESS_SUCCESS, None),
        Lookup::NotFound => (
            std::ptr::null_mut(),
            CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
            Some(if abi == Abi::V1 {
                Fault::SymbolNotFound
            } else {
                Fault::SymbolNotFoundV2
            }),
        ),
        Lookup::VersionTooLow => (
            std::ptr::null_mut(),
            CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
            Some(if abi == Abi::V1 {
                Fault::VersionNotSufficient
            } else {
                Fault::VersionNotSufficientV2
            }),
        ),
    };
    // SAFETY: `pfn` is non-null and writable; `status` is NULL or writable.
    unsafe {
        put(pfn, addr)?;
        if !status.is_null() {
            put(status, code)?;
        }
    }
    fault.map_or(Ok(()), Err)
}

/// `cuGetProcAddress` (the CUDA 11.3 ABI, four arguments).
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string; `pfn` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    guard("cuGetProcAddress", || unsafe {
        get(
            symbol,
            pfn,
            cudaVersion,
            flags,
            Abi::V1,
            std::ptr::null_mut(),
        )
    })
}

/// `cuGetProcAddress_v2` (CUDA 12.0, with `symbolStatus`, which may be NULL).
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string; `pfn` and `symbolStatus` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
    symbolStatus: *mut c_int,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    guard("cuGetProcAddress_v2", || unsafe {
        get(symbol, pfn, cudaVersion, flags, Abi::V2, symbolStatus)
    })
}

/// Default-stream or per-thread variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The entry itself (legacy default stream semantics for handle 0).
    Default,
    /// `_ptds`: a synchronous entry on the per-thread default stream.
    Ptds,
    /// `_ptsz`: a stream-taking entry where handle 0 is the per-thread default stream.
    Ptsz,
}

/// One row of the table.
#[derive(Debug)]
pub struct Entry {
    pub base: &'static str,
    pub symbol: &'static str,
    pub since: i32,
    pub kind: Kind,
    pub addr: *const c_void,
}

// SAFETY: the rows are immutable; `addr` is the address of a function, shared freely.
unsafe impl Sync for Entry {}

macro_rules! row {
    ($kind:ident, $base:literal, $since:literal, $module:ident :: $f:ident) => {
        Entry {
            base: $base,
            symbol: stringify!($f),
            since: $since,
            kind: Kind::$kind,
            addr: super::$module::$f as *const c_void,
        }
    };
}

/// Every exported driver entry, with its address.
pub static ENTRIES: &[Entry] = &crate::symbols::driver_entries!(row);

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(&'static str, *const c_void),
    /// No row has this base name.
    NotFound,
    /// Rows exist, none introduced at or before the version asked.
    VersionTooLow,
}

/// The entry a program gets for base name `base` at CUDA version `version`: the newest
/// default-stream row not newer than `version`. With `per_thread`, for a base name that has
/// per-thread variants, that row's `_ptds`/`_ptsz` variant, which must not be newer than
/// `version` either (measured: `cuEventRecord` with the per-thread flag at 3020 is "version not
/// sufficient"); a base name without variants gives its default row.
pub fn lookup(base: &str, version: i32, per_thread: bool) -> Lookup {
    let mut rows = ENTRIES.iter().filter(|e| e.base == base).peekable();
    if rows.peek().is_none() {
        return Lookup::NotFound;
    }
    let Some(default) = rows
        .filter(|e| e.kind == Kind::Default && e.since <= version)
        .max_by_key(|e| e.since)
    else {
        return Lookup::VersionTooLow;
    };
    let has_variants = ENTRIES
        .iter()
        .any(|e| e.base == base && e.kind != Kind::Default);
    if per_thread && has_variants {
        let variant = ENTRIES.iter().find(|e| {
            e.kind != Kind::Default
                && e.base == base
                && e.since <= version
                && default_symbol(e) == Some(default.symbol)
        });
        return match variant {
            Some(v) => Lookup::Found(v.symbol, v.addr),
            None => Lookup::VersionTooLow,
        };
    }
    Lookup::Found(default.symbol, default.addr)
}

/// The default-stream symbol a per-thread row is the variant of.
fn default_symbol(e: &Entry) -> Option<&'static str> {
    match e.kind {
        Kind::Default => Some(e.symbol),
        Kind::Ptds => e.symbol.strip_suffix("_ptds"),
        Kind::Ptsz => e.symbol.strip_suffix("_ptsz"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(base: &str, version: i32, per_thread: bool) -> Option<&'static str> {
        match lookup(base, version, per_thread) {
            Lookup::Found(s, _) => Some(s),
            _ => None,
        }
    }

    #[test]
    fn symbols_are_unique_and_variants_have_a_default() {
        for (i, e) in ENTRIES.iter().enumerate() {
            assert!(
                ENTRIES[i + 1..].iter().all(|f| f.symbol != e.symbol),
                "{} twice",
                e.symbol
            );
            let d = default_symbol(e).unwrap_or_else(|| panic!("{} lacks its suffix", e.symbol));
            assert!(
                ENTRIES.iter().any(|f| f.kind == Kind::Default
                    && f.symbol == d
                    && f.base == e.base
                    && f.since <= e.since),
                "{} has no default row",
                e.symbol
            );
        }
    }

    #[test]
    fn versions_choose_the_abi() {
        assert_eq!(symbol("cuMemAlloc", 3020, false), Some("cuMemAlloc_v2"));
        assert_eq!(symbol("cuMemAlloc", 13000, false), Some("cuMemAlloc_v2"));
        assert_eq!(symbol("cuMemAlloc", 3010, false), Some("cuMemAlloc"));
        assert_eq!(symbol("cuCtxCreate", 12050, false), Some("cuCtxCreate_v4"));
        assert_eq!(symbol("cuCtxCreate", 12040, false), Some("cuCtxCreate_v3"));
        assert_eq!(symbol("cuCtxCreate", 11040, false), Some("cuCtxCreate_v3"));
        assert_eq!(symbol("cuCtxCreate", 11030, false), Some("cuCtxCreate_v2"));
        assert_eq!(
            symbol("cuGetProcAddress", 12000, false),
            Some("cuGetProcAddress_v2")
        );
        assert_eq!(
            symbol("cuGetProcAddress", 11080, false),
            Some("cuGetProcAddress")
        );
        assert_eq!(
            lookup("cuMemAllocAsync", 11010, false),
            Lookup::VersionTooLow
        );
        assert_eq!(lookup("cuNoSuchThing", 13000, false), Lookup::NotFound);
        assert_eq!(lookup("cuMemAlloc_v2", 13000, false), Lookup::NotFound);
    }

    #[test]
    fn per_thread_variants() {
        assert_eq!(
            symbol("cuMemAllocAsync", 12000, true),
            Some("cuMemAllocAsync_ptsz")
        );
        assert_eq!(
            symbol("cuMemcpyHtoD", 12000, true),
            Some("cuMemcpyHtoD_v2_ptds")
        );
        assert_eq!(lookup("cuMemcpyHtoD", 6050, true), Lookup::VersionTooLow);
        assert_eq!(lookup("cuMemcpyHtoD", 2000, true), Lookup::VersionTooLow);
        assert_eq!(lookup("cuEventRecord", 3020, true), Lookup::VersionTooLow);
        assert_eq!(symbol("cuEventRecord", 3020, false), Some("cuEventRecord"));
        assert_eq!(symbol("cuMemcpyHtoD", 2000, false), Some("cuMemcpyHtoD"));
        assert_eq!(symbol("cuCtxDestroy", 3020, false), Some("cuCtxDestroy"));
        assert_eq!(symbol("cuMemAlloc", 12000, true), Some("cuMemAlloc_v2"));
        assert_eq!(
            symbol("cuStreamSynchronize", 13000, true),
            Some("cuStreamSynchronize_ptsz")
        );
        assert_eq!(
            symbol("cuStreamSynchronize", 13000, false),
            Some("cuStreamSynchronize")
        );
    }
}
