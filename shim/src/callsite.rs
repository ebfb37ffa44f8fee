//! The call stack of an allocation, captured when it is made (see [`crate::stack`] for the
//! unwinder and the table of distinct stacks).

use crate::tracker::NONE;

/// Captures the calling thread's stack; returns its id, or [`NONE`] when capture is off or fails.
#[inline]
pub fn capture() -> u32 {
    NONE
}

/// Writes the report's `stacks` and `modules`.
pub fn write_stacks(j: &mut crate::report::json::Json) {
    j.key("stacks").begin_array().end_array();
    j.key("modules").begin_array().end_array();
}
