//! `cuguard_file_alias`: a name for people of a source file the program made, kept by
//! [`crate::process::aliases`]. IPython compiles each cell as a file of its own
//! (`/tmp/ipykernel_4242/817962334.py`) and names it `Cell In[2]` in its tracebacks; the Python
//! package tells the shim so (`cuguard._cells.install`), and every report written afterwards
//! gives Python frames in that file `display: "Cell In[2]"` (frames keep `file`), which
//! `cuguard` shows as `Cell In[2], line 5`.

use std::ffi::c_char;

use crate::process::aliases::{self, MAX_DISPLAY_BYTES, MAX_FILE_BYTES, Refused};

use super::{E_FULL, E_INVALID, OK, call, text};

/// Names `file` `display` in the reports written from now on.
///
/// # Safety
///
/// `file` and `display` are NULL or NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_file_alias(file: *const c_char, display: *const c_char) -> i32 {
    // SAFETY: the caller promises NUL-terminated strings (NULL is refused).
    let (file, display) =
        match unsafe { (text(file, MAX_FILE_BYTES), text(display, MAX_DISPLAY_BYTES)) } {
            (Ok(f), Ok(d)) => (f, d),
            _ => return E_INVALID,
        };
    call(|| match aliases::set(file, display) {
        Ok(()) => OK,
        Err(Refused::Full) => E_FULL,
        Err(Refused::Invalid) => E_INVALID,
    })
}
