//! The first door, and the functions the other two hand out: both made from the driver-entry
//! table ([`crate::driver::entry_table`]), a few lines per entry.
//!
//! For every entry of every role but `pass`, there are two functions with the entry's exact C
//! signature:
//!
//! - [`exported`]`::NAME`, the shim's exported symbol (`#[no_mangle]`), which a program linked
//!   with `-lcuda` binds to. It counts one call through the exported door (per thread, for the
//!   report's `doors.exported`).
//! - [`handed`]`::NAME`, what `dlsym` and `cuGetProcAddress` hand out in place of the driver's
//!   entry (they count their own lookups).
//!
//! Both then do the same: take the real entry from the table ([`crate::driver::real`]) and call
//! the handler, or answer `CUDA_ERROR_NOT_INITIALIZED` when there is no real entry (the driver
//! is not loaded, or lacks it), saying so once:
//!
//! | role     | handler                                                           |
//! |----------|-------------------------------------------------------------------|
//! | `track`, `query` | `hooks::FIRST_FORM(entry, real, args…)`                   |
//! | `door`   | `doors::procaddr::FIRST_FORM(entry, real, substitute, args…)`     |
//! | `submit` | [`crate::hooks::submit::before`], the real entry, then [`crate::hooks::submit::counted_on`], with the submission's stream ([`stream_key!`]) |
//! | `copy`   | `hooks::FIRST_FORM(entry, real, args…)`, which counts it too      |
//!
//! `FIRST_FORM` is the row's first form: one handler serves all forms of a row, and is told
//! which one was called.
//!
//! [`substitute`], which both lookup doors route through, is here beside [`handed_for`]: it
//! hands out these functions, `cuGetProcAddress`'s among them, so `procaddr` is given it as an
//! argument rather than importing it.

#![allow(non_snake_case, clippy::too_many_arguments)]

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::driver::{Entry, for_each_entry};
use crate::ffi::*;
use crate::tracker::doors::Door;

/// The real entry `e` is missing: says so once, and answers what a missing driver answers.
#[cold]
pub fn missing(e: Entry) -> CUresult {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::process::diag::warn(&format!(
            "the real driver's {} could not be found; calls to it fail with CUDA_ERROR_NOT_INITIALIZED",
            e.name()
        ));
    }
    CUDA_ERROR_NOT_INITIALIZED
}

/// Defines the functions of one kind (`exported` or `handed`) for every row.
macro_rules! door_functions {
    (($kind:ident) $( $role:ident [$first:ident $(, $more:ident)* $(,)?] fn $sig:tt; )*) => {
        $( door_functions!(@row $kind $role $first [$first $(, $more)*] $sig); )*
    };
    (@row $kind:ident pass $first:ident [$($form:ident),+] $sig:tt) => {};
    (@row $kind:ident $role:ident $first:ident [$($form:ident),+] $sig:tt) => {
        $( door_functions!(@one $kind $role $first $form $sig); )+
    };
    (@one exported $role:ident $first:ident $form:ident ($($p:ident : $t:ty),* $(,)?)) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $form($($p: $t),*) -> CUresult {
            crate::tracker::counters::count_exported_call();
            let Some(real) = crate::driver::real::$form() else {
                return super::missing(Entry::$form);
            };
            // SAFETY: the program's own arguments, under the driver's contract for this entry.
            unsafe { door_functions!(@call $role $first $form real ($($p),*)) }
        }
    };
    (@one handed $role:ident $first:ident $form:ident ($($p:ident : $t:ty),* $(,)?)) => {
        pub unsafe extern "C" fn $form($($p: $t),*) -> CUresult {
            let Some(real) = crate::driver::real::$form() else {
                return super::missing(Entry::$form);
            };
            // SAFETY: the program's own arguments, under the driver's contract for this entry.
            unsafe { door_functions!(@call $role $first $form real ($($p),*)) }
        }
    };
    (@call track $first:ident $form:ident $real:ident ($($p:ident),*)) => {
        crate::hooks::$first(Entry::$form, $real, $($p),*)
    };
    (@call query $first:ident $form:ident $real:ident ($($p:ident),*)) => {
        crate::hooks::$first(Entry::$form, $real, $($p),*)
    };
    (@call copy $first:ident $form:ident $real:ident ($($p:ident),*)) => {
        crate::hooks::$first(Entry::$form, $real, $($p),*)
    };
    (@call door $first:ident $form:ident $real:ident ($($p:ident),*)) => {
        super::super::procaddr::$first(Entry::$form, $real, super::substitute, $($p),*)
    };
    (@call submit $first:ident $form:ident $real:ident ($($p:ident),*)) => {{
        let key = stream_key!($first $form; $($p),*);
        crate::hooks::submit::before(key);
        crate::hooks::submit::counted_on($real($($p),*), key)
    }};
}

/// The stream key of a `submit` row's call (see [`crate::hooks::submit`]): from the argument
/// named `hStream` or `stream`, `cuLaunchKernelEx`'s config, or the default stream when there is
/// none; unknown for `cuLaunchCooperativeKernelMultiDevice`. `$form` says whether handle 0 is
/// the per-thread stream.
macro_rules! stream_key {
    (@per_thread $form:ident) => {{
        const PER_THREAD: bool = crate::hooks::submit::is_per_thread_name(stringify!($form));
        PER_THREAD
    }};
    (@scan $form:ident;) => {
        crate::hooks::submit::default_key(stream_key!(@per_thread $form))
    };
    (@scan $form:ident; $p:ident $(, $rest:ident)*) => {
        stream_key!(@is $form; $p [$p] $($rest),*)
    };
    (@is $form:ident; hStream [$s:ident] $($rest:ident),*) => {
        crate::hooks::submit::key_of($s as u64, stream_key!(@per_thread $form))
    };
    (@is $form:ident; stream [$s:ident] $($rest:ident),*) => {
        crate::hooks::submit::key_of($s as u64, stream_key!(@per_thread $form))
    };
    (@is $form:ident; $other:ident [$s:ident] $($rest:ident),*) => {
        stream_key!(@scan $form; $($rest),*)
    };
    (cuLaunchKernelEx $form:ident; $config:ident $(, $p:ident)*) => {
        // Inside the door's unsafe block: the program's CUlaunchConfig or NULL, under the
        // entry's contract.
        crate::hooks::submit::config_key($config as *const c_void, stream_key!(@per_thread $form))
    };
    (cuLaunchCooperativeKernelMultiDevice $form:ident; $($p:ident),*) => {
        crate::hooks::submit::UNKNOWN_KEY
    };
    ($first:ident $form:ident; $($p:ident),*) => {
        stream_key!(@scan $form; $($p),*)
    };
}

/// The shim's exported symbols: the door of programs linked with `-lcuda`.
pub mod exported {
    use super::*;
    for_each_entry!(door_functions, exported);
}

/// The functions `dlsym` and `cuGetProcAddress` hand out in place of the driver's entries.
pub mod handed {
    use super::*;
    for_each_entry!(door_functions, handed);
}

/// Maps each entry to one kind of its functions (`None` for `pass` rows).
macro_rules! function_of {
    (($kind:ident $e:ident) $( $role:ident [$($form:ident),+ $(,)?] fn $sig:tt; )*) => {
        match $e {
            $($( Entry::$form => function_of!(@one $kind $role $form), )+)*
        }
    };
    (@one $kind:ident pass $form:ident) => {
        None
    };
    (@one $kind:ident $role:ident $form:ident) => {
        Some($kind::$form as *mut c_void)
    };
}

/// The function handed out in place of the real entry `e`, if the shim stands in for it.
pub fn handed_for(e: Entry) -> Option<*mut c_void> {
    for_each_entry!(function_of, handed, e)
}

/// The shim's exported symbol for `e`, if it exports one.
pub fn exported_for(e: Entry) -> Option<*mut c_void> {
    for_each_entry!(function_of, exported, e)
}

/// The function standing in for the real driver entry at `addr`, if the shim stands in for it;
/// counts it for `door`.
pub fn substitute(addr: *mut c_void, door: Door) -> Option<*mut c_void> {
    // Reading the settings first makes a disabled shim inert.
    crate::config::init();
    if !crate::phase::substitutes() {
        return None;
    }
    let entry = crate::driver::entry_at(addr as usize)?;
    let function = handed_for(entry)?;
    crate::tracker::doors::handed_out(door);
    Some(function)
}

/// Whether `p` is one of the shim's own functions for a driver entry (exported or handed out).
pub fn is_own(p: *mut c_void) -> bool {
    !p.is_null()
        && Entry::ALL
            .iter()
            .any(|&e| handed_for(e) == Some(p) || exported_for(e) == Some(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::entry_table::Role;

    #[test]
    fn every_entry_but_pass_has_two_distinct_functions() {
        for &e in Entry::ALL {
            let (h, x) = (handed_for(e), exported_for(e));
            if e.role() == Role::Pass {
                assert_eq!((h, x), (None, None), "{e:?}");
            } else {
                assert!(h.is_some() && x.is_some() && h != x, "{e:?}");
                assert!(is_own(h.unwrap()) && is_own(x.unwrap()));
            }
        }
        assert!(!is_own(std::ptr::null_mut()));
    }
}
