//! The call stack of an allocation: captured when it is made (through [`crate::stack`]), and
//! written into the report as instruction pointers with their module and offset.

use std::sync::Once;

use crate::report::json::Json;
use crate::tracker::NONE;

static CONFIGURED: Once = Once::new();

/// Captures the calling thread's stack; returns its id, or [`NONE`] when capture is off or fails.
#[inline]
pub fn capture() -> u32 {
    CONFIGURED.call_once(|| crate::stack::configure(crate::config::get().stack_depth));
    crate::stack::capture().unwrap_or(NONE)
}

/// Writes the report's `stacks` (frames: ip, module, offset; names where known) and `modules`.
pub fn write_stacks(j: &mut Json) {
    let stacks = crate::stack::stacks();
    let modules = if stacks.is_empty() { Vec::new() } else { crate::stack::modules() };
    j.key("stacks").begin_array();
    for (id, ips) in &stacks {
        j.begin_object();
        j.key("id").u64((*id).into());
        j.key("frames").begin_array();
        for ip in ips {
            j.begin_object();
            j.key("ip").addr(*ip);
            match crate::stack::locate(*ip, &modules) {
                Some((m, offset)) => {
                    j.key("module").str(&modules[m].path);
                    j.key("offset").addr(offset);
                }
                None => {
                    j.key("module").null();
                    j.key("offset").null();
                }
            }
            j.key("function").null();
            j.key("file").null();
            j.key("line").null();
            j.end_object();
        }
        j.end_array();
        j.end_object();
    }
    j.end_array();
    j.key("modules").begin_array();
    for m in &modules {
        j.begin_object();
        j.key("path").str(&m.path);
        j.key("build_id").opt_str(m.build_id.as_deref());
        j.key("base").addr(m.base);
        j.key("size").u64(m.end.saturating_sub(m.start));
        j.end_object();
    }
    j.end_array();
}
