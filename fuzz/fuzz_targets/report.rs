//! Fuzz target: arbitrary bytes through the reader, summary, check, suppressions and view
//! (`cuguard::fuzzing::exercise`). A crash is a bug; keep the input in
//! `tests/fixtures/hostile/` (as `NAME.bad`) so ordinary tests replay it.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cuguard::fuzzing::exercise(data);
});
