//! Test program for the symbolizer's qualified names: prints the call-site offset (return
//! address - 1 - load bias) of calls made from functions in nested modules, inlined or not, a
//! method, a generic function and a closure. Each call line carries a MARK comment that the
//! tests look up to know the expected line. Built by the tests with rustc, with full debug
//! info and with line tables only.

use std::ffi::{c_int, c_void};
use std::hint::black_box;

unsafe extern "C" {
    fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
    fn dl_iterate_phdr(
        callback: unsafe extern "C" fn(*mut c_void, usize, *mut c_void) -> c_int,
        data: *mut c_void,
    ) -> c_int;
}

/// Stores the first module's load bias (`dlpi_addr`, the first field of `dl_phdr_info`).
unsafe extern "C" fn first_module(info: *mut c_void, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: `info` points to a `dl_phdr_info`, whose first field is the load bias; `data` is
    // the `usize` that `load_bias` passes.
    unsafe { *(data as *mut usize) = *(info as *const usize) };
    1
}

fn load_bias() -> usize {
    let mut bias = 0usize;
    // SAFETY: the callback writes only the `usize` it is given.
    unsafe { dl_iterate_phdr(first_module, &mut bias as *mut usize as *mut c_void) };
    bias
}

/// Prints `tag` and the offset of the call that called it.
#[inline(never)]
fn record(tag: &str) -> u64 {
    let mut frames = [std::ptr::null_mut::<c_void>(); 2];
    // SAFETY: the buffer has room for the 2 entries asked for.
    let n = unsafe { backtrace(frames.as_mut_ptr(), 2) };
    assert_eq!(n, 2);
    println!("{tag} {:x}", frames[1] as usize - 1 - load_bias());
    black_box(tag.len() as u64)
}

pub mod outer {
    pub mod inner {
        use std::sync::atomic::{AtomicU64, Ordering};

        pub struct Widget(pub u64);

        impl Widget {
            #[inline(always)]
            pub fn grow(&self) -> u64 {
                crate::record("method") + self.0 /* MARK:method */
            }
        }

        /// Inlined; its static gives the symbol table a name under its path.
        #[inline(always)]
        pub fn helper(x: u64) -> u64 {
            static CALLS: AtomicU64 = AtomicU64::new(0);
            CALLS.fetch_add(1, Ordering::Relaxed);
            crate::record("inlined") + x /* MARK:inlined */
        }

        /// Inlined, and nothing else in the binary is named under its path.
        #[inline(always)]
        pub fn bare(x: u64) -> u64 {
            crate::record("bare") + x /* MARK:bare */
        }

        #[inline(never)]
        pub fn generic<T: Copy + Into<u64>>(x: T) -> u64 {
            crate::record("generic") + x.into() /* MARK:generic */
        }

        #[inline(never)]
        pub fn outer_fn(x: u64) -> u64 {
            let a = helper(x); /* MARK:outer */
            let b = Widget(x).grow();
            let c = bare(x);
            a + b + c
        }
    }
}

fn main() {
    let x = black_box(3u64);
    let mut sum = outer::inner::outer_fn(x);
    sum += outer::inner::generic(black_box(7u32));
    sum += record("main"); /* MARK:main */
    let n = black_box(1u64);
    sum += (0..n)
        .map(|i| record("closure") + i) /* MARK:closure */
        .sum::<u64>();
    black_box(sum);
}
