//! exit_rust MODE: loads the driver with dlopen (so its entries come through the shim's dlsym
//! door), allocates a 2 MiB block and a 1 MiB one, frees the 1 MiB one, then calls
//! `std::process::exit(9)` from main (`main`) or from another thread (`thread`). The report must
//! hold the 2 MiB block.

use std::ffi::{CStr, c_void};

type Init = unsafe extern "C" fn(u32) -> u32;
type DeviceGet = unsafe extern "C" fn(*mut i32, i32) -> u32;
type Retain = unsafe extern "C" fn(*mut *mut c_void, i32) -> u32;
type SetCurrent = unsafe extern "C" fn(*mut c_void) -> u32;
type Alloc = unsafe extern "C" fn(*mut u64, usize) -> u32;
type Free = unsafe extern "C" fn(u64) -> u32;

fn sym<T>(lib: *mut c_void, name: &CStr) -> T {
    // SAFETY: lib is a dlopen handle; the name is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    assert!(!p.is_null(), "{name:?} not found");
    // SAFETY: T is the entry's C signature (a function pointer, the size of a pointer).
    unsafe { std::mem::transmute_copy(&p) }
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "main".into());
    // SAFETY: dlopen with a NUL-terminated name.
    let lib = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
    assert!(!lib.is_null(), "no libcuda.so.1");
    let init: Init = sym(lib, c"cuInit");
    let device_get: DeviceGet = sym(lib, c"cuDeviceGet");
    let retain: Retain = sym(lib, c"cuDevicePrimaryCtxRetain");
    let set_current: SetCurrent = sym(lib, c"cuCtxSetCurrent");
    let alloc: Alloc = sym(lib, c"cuMemAlloc_v2");
    let free: Free = sym(lib, c"cuMemFree_v2");
    let (mut dev, mut ctx, mut keep, mut gone) = (0i32, std::ptr::null_mut(), 0u64, 0u64);
    // SAFETY: the driver's entries with valid out-parameters.
    unsafe {
        assert_eq!(init(0), 0);
        assert_eq!(device_get(&mut dev, 0), 0);
        assert_eq!(retain(&mut ctx, dev), 0);
        assert_eq!(set_current(ctx), 0);
        assert_eq!(alloc(&mut keep, 2 << 20), 0);
        assert_eq!(alloc(&mut gone, 1 << 20), 0);
        assert_eq!(free(gone), 0);
    }
    if mode == "thread" {
        std::thread::spawn(|| std::process::exit(9)).join().ok();
        loop {
            std::thread::park();
        }
    }
    std::process::exit(9);
}
