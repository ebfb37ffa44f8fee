//! Gives the simulated driver the soname of the real one, so programs linked against it with
//! `-lcuda` record `libcuda.so.1` and find whichever driver the loader offers at run time.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
