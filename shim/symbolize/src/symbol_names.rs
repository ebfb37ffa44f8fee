//! Qualified names from the symbol tables, for DWARF that has only short names (a Rust unit built
//! with `debug = "line-tables-only"`: no linkage names, no namespace DIEs).
//!
//! - **The outermost frame** of an address has a symbol of its own: [`with_symbol_path`] puts
//!   the symbol's path before DWARF's name (`malloc_async` and
//!   `cudarc::driver::result::malloc_async` give the latter; `alloc<f32>` and
//!   `cudarc::driver::safe::core::CudaStream::alloc` give
//!   `cudarc::driver::safe::core::CudaStream::alloc<f32>`), when the symbol's last segment is
//!   DWARF's name; a legacy name's `{{closure}}` takes DWARF's `{closure#N}`.
//! - **An inlined frame** (closures aside: see `dwarf_names`) has no symbol, but the function it
//!   was inlined from often has something named under it (its own out-of-line copy, a `static`
//!   inside it, a closure): [`SegmentIndex`] finds the Rust symbols with a path segment equal to
//!   the name, and when they agree on one path to it, in the crate DWARF says the function is
//!   from, that path is used.

use std::collections::HashMap;

use crate::demangle::{demangle, looks_rust};
use crate::site_frame::qualified_path;

/// DWARF's short `name` (`alloc<f32>`) qualified by the path of the symbol `mangled` that covers
/// the same address. `None` when the symbol is not a mangled name or its last segment is not
/// `name`'s.
pub(crate) fn with_symbol_path(mangled: &str, name: &str) -> Option<String> {
    let demangled = demangle(mangled);
    if demangled == mangled {
        return None;
    }
    let base = base_name(name);
    if looks_rust(mangled) {
        // v0 names carry generic arguments (`…::alloc::<f32>`); legacy ones do not.
        let path = strip_generic_suffix(&demangled);
        // A legacy name writes every closure `{{closure}}`; DWARF numbers them.
        let last = if base.starts_with("{closure#") {
            "{{closure}}"
        } else {
            base
        };
        let prefix = path.strip_suffix(last)?;
        if !(prefix.is_empty() || prefix.ends_with("::")) {
            return None;
        }
        Some(format!("{prefix}{name}"))
    } else {
        // C++: the demangled symbol already says everything (parameters included).
        let q = qualified_path(&demangled);
        let last = q.rsplit("::").next().unwrap_or(&q);
        (last == base).then(|| demangled.into_owned())
    }
}

/// `alloc<f32>` → `alloc`.
fn base_name(name: &str) -> &str {
    name.split('<').next().unwrap_or(name)
}

/// `a::b::<T>` → `a::b`; `a::b<T>` → `a::b`; anything else unchanged.
fn strip_generic_suffix(path: &str) -> &str {
    if !path.ends_with('>') {
        return path;
    }
    let mut depth = 0i32;
    for (i, c) in path.char_indices().rev() {
        match c {
            '>' => depth += 1,
            '<' => {
                depth -= 1;
                if depth == 0 {
                    let head = &path[..i];
                    return head.strip_suffix("::").unwrap_or(head);
                }
            }
            _ => {}
        }
    }
    path
}

/// The segments of a legacy Rust or Itanium nested name (`_ZN` `<len><ident>`… `E`), up to
/// the first thing that is not a plain length-prefixed identifier.
fn segments(mangled: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = mangled.strip_prefix(b"_ZN").unwrap_or(&[]);
    std::iter::from_fn(move || {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let len: usize = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
        let ident = rest.get(digits..digits + len)?;
        rest = &rest[digits + len..];
        Some(ident)
    })
}

fn is_plain_ident(s: &[u8]) -> bool {
    !s.is_empty()
        && s.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && !s[0].is_ascii_digit()
}

/// Legacy Rust symbols by their last two path segments (the hash left out), so an inlined
/// function's name can be found under the path of its copy, its statics or its closures.
pub(crate) struct SegmentIndex {
    /// Segment → (mangled symbol, index of the segment in it).
    by_segment: HashMap<&'static [u8], Vec<(&'static [u8], u8)>>,
}

impl SegmentIndex {
    /// Indexes the legacy Rust names among `names`.
    pub(crate) fn new(names: impl Iterator<Item = &'static [u8]>) -> SegmentIndex {
        let mut by_segment: HashMap<&'static [u8], Vec<(&'static [u8], u8)>> = HashMap::new();
        for name in names {
            let Ok(s) = std::str::from_utf8(name) else {
                continue;
            };
            if !s.starts_with("_ZN") || !looks_rust(s) {
                continue;
            }
            let segs: Vec<&'static [u8]> = segments(name).take(64).collect();
            // The last segment is the hash.
            let n = segs.len().saturating_sub(1);
            let first = n.saturating_sub(2);
            for (i, seg) in segs.iter().enumerate().take(n).skip(first) {
                by_segment.entry(*seg).or_default().push((name, i as u8));
            }
        }
        SegmentIndex { by_segment }
    }

    /// `name` (a short DWARF name, generic arguments allowed) under the one path the symbols of
    /// crate `krate` give it; `None` when there is no such symbol or they disagree.
    pub(crate) fn qualify(&self, name: &str, krate: &str) -> Option<String> {
        let base = base_name(name);
        if !is_plain_ident(base.as_bytes()) {
            return None;
        }
        let mut found: Option<String> = None;
        for &(mangled, at) in self.by_segment.get(base.as_bytes())? {
            let segs: Vec<&[u8]> = segments(mangled).take(at as usize).collect();
            if segs.first() != Some(&krate.as_bytes()) || !segs.iter().all(|s| is_plain_ident(s)) {
                continue;
            }
            let path = segs
                .iter()
                .map(|s| String::from_utf8_lossy(s))
                .collect::<Vec<_>>()
                .join("::");
            match &found {
                None => found = Some(path),
                Some(p) if *p == path => {}
                Some(_) => return None,
            }
        }
        found.map(|p| format!("{p}::{name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbol_path_before_dwarf_name() {
        assert_eq!(
            with_symbol_path(
                "_ZN6cudarc6driver4safe4core10CudaStream5alloc17hd7e59a1a849a031bE",
                "alloc<f32>"
            )
            .as_deref(),
            Some("cudarc::driver::safe::core::CudaStream::alloc<f32>")
        );
        assert_eq!(
            with_symbol_path("_ZN12cudarc_leaks4main17h2c78b1303ac4e477E", "main").as_deref(),
            Some("cudarc_leaks::main")
        );
        // v0: the symbol's own generic arguments give way to DWARF's.
        assert_eq!(
            with_symbol_path("_RINvNtCs7AxpzGtwJwD_4mycr3sub5allocfEB4_", "alloc<f32>").as_deref(),
            Some("mycr::sub::alloc<f32>")
        );
        assert_eq!(
            with_symbol_path(
                "_ZN12cudarc_leaks4main28_$u7b$$u7b$closure$u7d$$u7d$17h2c78b1303ac4e477E",
                "{closure#3}"
            )
            .as_deref(),
            Some("cudarc_leaks::main::{closure#3}")
        );
        // Another function at that address (folded code): DWARF's name stays.
        assert_eq!(
            with_symbol_path("_ZN12cudarc_leaks4main17h2c78b1303ac4e477E", "other"),
            None
        );
        // A C name is not mangled: nothing to add.
        assert_eq!(with_symbol_path("static_leaker", "static_leaker"), None);
        // C++: the symbol's demangled name.
        assert_eq!(
            with_symbol_path("_ZN2ns3Foo3barEl", "bar").as_deref(),
            Some("ns::Foo::bar(long)")
        );
    }

    #[test]
    fn generic_suffixes() {
        assert_eq!(strip_generic_suffix("a::b::<f32>"), "a::b");
        assert_eq!(strip_generic_suffix("a::b<x<y>>"), "a::b");
        assert_eq!(strip_generic_suffix("a::b"), "a::b");
    }

    #[test]
    fn segment_index_agrees_or_gives_up() {
        let names: Vec<&'static [u8]> = vec![
            b"_ZN6cudarc6driver3sys15cuMemAllocAsync2_S17hdd8058079d0acc2fE.llvm.31",
            b"_ZN6cudarc6driver3sys13cuMemAlloc_v22_S17h0123456789abcdefE",
            b"_ZN5other6driver3sys13cuMemAlloc_v22_S17h0123456789abcdefE",
            b"_ZN4core4iter3new17h0123456789abcdefE",
            b"_ZN4core3vec3new17h0123456789abcdefE",
        ];
        let idx = SegmentIndex::new(names.into_iter());
        assert_eq!(
            idx.qualify("cuMemAllocAsync", "cudarc").as_deref(),
            Some("cudarc::driver::sys::cuMemAllocAsync")
        );
        // Only the crate DWARF names counts.
        assert_eq!(
            idx.qualify("cuMemAlloc_v2", "cudarc").as_deref(),
            Some("cudarc::driver::sys::cuMemAlloc_v2")
        );
        assert_eq!(idx.qualify("cuMemAllocAsync", "other"), None);
        // Two paths: no answer.
        assert_eq!(idx.qualify("new<u8>", "core"), None);
        assert_eq!(idx.qualify("{closure#0}", "cudarc"), None);
        assert_eq!(idx.qualify("missing", "cudarc"), None);
    }
}
