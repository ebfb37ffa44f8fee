//! Links the simulated driver like the real one:
//! - the soname `libcuda.so.1`, so programs linked against it with `-lcuda` record that name and
//!   find whichever driver the loader offers at run time;
//! - `-Bsymbolic-functions`, so the library's own references to its exported entries (the
//!   addresses in the `cuGetProcAddress` table) stay bound to its own functions even when a
//!   preloaded library (the shim) exports the same names. The real driver's `cuGetProcAddress`
//!   returns its own entries under a preload too.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
}
