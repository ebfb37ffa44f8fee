//! Demangling of C++ (Itanium ABI) and Rust (legacy and v0) symbol names.

use std::borrow::Cow;

/// The demangled form of `name`, or `name` itself when it is not a mangled C++ or Rust name.
/// Rust names lose their hash suffix (`::h0123…`).
pub fn demangle(name: &str) -> Cow<'_, str> {
    if looks_rust(name)
        && let Ok(d) = rustc_demangle::try_demangle(name)
    {
        return Cow::Owned(format!("{d:#}"));
    }
    if name.starts_with("_Z")
        && let Ok(sym) = cpp_demangle::Symbol::new(name)
        && let Ok(d) = sym.demangle()
    {
        return Cow::Owned(d);
    }
    Cow::Borrowed(name)
}

/// Rust v0 names start with `_R`; legacy ones are `_ZN…17h<16 hex>E` (maybe with a `.llvm.…`
/// suffix), which a C++ name (parameter types follow its `E`) never is. A legacy name may also
/// hold dots of its own (`..` stands for `::` in `_$LT$a..B$u20$as$u20$…`), so suffixes are cut
/// one dot at a time from the end.
pub(crate) fn looks_rust(name: &str) -> bool {
    if name.starts_with("_R") {
        return true;
    }
    if !name.starts_with("_ZN") {
        return false;
    }
    let mut base = name.as_bytes();
    loop {
        let n = base.len();
        if n > 21
            && base[n - 1] == b'E'
            && &base[n - 20..n - 17] == b"17h"
            && base[n - 17..n - 1].iter().all(u8::is_ascii_hexdigit)
        {
            return true;
        }
        match base.iter().rposition(|&b| b == b'.') {
            Some(i) => base = &base[..i],
            None => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_rust_and_plain() {
        assert_eq!(
            demangle(
                "_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator6mallocEPPvimP11CUstream_st"
            ),
            "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, int, unsigned long, CUstream_st*)"
        );
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE.llvm.123"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        // `..` inside a legacy name is `::`, not a suffix.
        let trait_impl = "_ZN102_$LT$core..iter..adapters..map..Map$LT$I$C$F$GT$$u20$as$u20$core..iter..traits..iterator..Iterator$GT$4fold17h50fc3f8050afeee9E";
        let want =
            "<core::iter::adapters::map::Map<I,F> as core::iter::traits::iterator::Iterator>::fold";
        assert_eq!(demangle(trait_impl), want);
        assert_eq!(demangle(&format!("{trait_impl}.llvm.42")), want);
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Znot_really"), "_Znot_really");
    }
}
