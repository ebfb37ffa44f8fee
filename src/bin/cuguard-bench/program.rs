//! The stacks of `cuguard-bench`'s `functions` and `wide` shapes (issue 56): a program's own
//! frames, every one past the shim's a function drawn from the program's [`FUNCTIONS`], at a
//! line that depends on the function it calls; the site the shim picks is the first of them. The
//! same functions, hence the same sites, recur across stacks and ranks along differing call
//! paths, so that the command's call paths (`src/call_path.rs`) charge many stacks to callers.
//! `functions`' sites are one line per function (200 sites); `wide`'s are drawn from
//! [`WIDE_LINES`] lines per function.

use std::sync::Arc;

use cuguard_format::{Addr, Frame, Stack, StackSite};

/// A splitmix64 of `x`: a fixed pseudo-random function of it.
pub fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How many functions the frames of `functions` and `wide` are drawn from.
pub const FUNCTIONS: u64 = 200;

/// How many lines of its function a site of `wide` is drawn from: with [`FUNCTIONS`], 20,000
/// places, of which a rank of 2,000 stacks hits about 1,900.
pub const WIDE_LINES: u64 = 100;

/// What the shape is, as the benchmark's table says it: `stacks` stacks per process of `depth`
/// frames, `wide` or not.
pub fn what(stacks: u64, depth: usize, wide: bool) -> String {
    let sites = if wide {
        format!(", sites from {FUNCTIONS} functions × {WIDE_LINES} lines")
    } else {
        String::new()
    };
    format!(
        "each process its own rank, {stacks} stacks of {depth} frames each, every frame from \
         {FUNCTIONS} functions{sites}"
    )
}

/// The stack `g`: the shim's `cuMemAlloc_v2`, then `depth - 1` frames of the program, innermost
/// first, each a function `fn_F` (`F` drawn from [`FUNCTIONS`], in `mod_{F / 10}.cc`) at the
/// line where it calls the frame before it (a line of `F` that depends on the callee); the site
/// the shim picks is frame 1, at line `10 + 200 F`, or, when `wide`, one of [`WIDE_LINES`] lines
/// from there.
pub fn stack(g: u64, depth: usize, wide: bool) -> Stack {
    let shim: Arc<str> = "/opt/cuguard/lib/libcuguard.so".into();
    let trainer: Arc<str> = "/opt/fleet/bin/trainer".into();
    let files: Vec<Arc<str>> = (0..FUNCTIONS.div_ceil(10))
        .map(|k| format!("mod_{k}.cc").into())
        .collect();
    let mut callee = 0u64;
    let mut site = None;
    let frames = (0..depth)
        .map(|d| {
            let ip = Addr(0x5500_0000_0000u64 + (g * 64 + d as u64) * 16);
            let offset = Addr((g * 64 + d as u64) * 16);
            if d == 0 {
                return Frame {
                    ip,
                    module: shim.clone(),
                    offset,
                    function: Some("cuMemAlloc_v2".into()),
                    file: None,
                    line: None,
                    inlined: None,
                };
            }
            let z = splitmix(g.wrapping_mul(64) + d as u64);
            let f = z % FUNCTIONS;
            let line = 10
                + 200 * f as u32
                + if d == 1 {
                    if wide {
                        ((z >> 32) % WIDE_LINES) as u32
                    } else {
                        0
                    }
                } else {
                    100 + (callee % 50) as u32
                };
            if d == 1 {
                site = Some(StackSite {
                    in_: "frames".into(),
                    index: 1,
                    fingerprint: format!("{f:03}{line:05}"),
                    kind: Some("user".into()),
                });
            }
            callee = f;
            Frame {
                ip,
                module: trainer.clone(),
                offset,
                function: Some(format!("fn_{f}").into()),
                file: Some(files[(f / 10) as usize].clone()),
                line: Some(line),
                inlined: None,
            }
        })
        .collect();
    Stack {
        id: g,
        frames,
        python: Vec::new(),
        site,
        owner: Some("program".into()),
        mixed: Vec::new(),
        origin: None,
    }
}
