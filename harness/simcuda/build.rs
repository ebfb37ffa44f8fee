//! Links the simulated driver like the real one:
//! - the soname `libcuda.so.1`, so programs linked against it with `-lcuda` record that name and
//!   find whichever driver the loader offers at run time;
//! - `-Bsymbolic`, so the library's own references to its exported entries (the addresses in the
//!   `cuGetProcAddress` table) stay bound to its own functions even when a preloaded library (the
//!   shim) exports the same names. The real driver's `cuGetProcAddress` returns its own entries
//!   under a preload too. The library exports functions only, so this binds exactly what
//!   `-Bsymbolic-functions` would; it is the form every linker takes, zig's among them (the
//!   release wheel is linked by `zig cc` against an older glibc: `scripts/release-wheel.sh`).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
