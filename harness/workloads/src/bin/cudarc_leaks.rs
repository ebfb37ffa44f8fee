//! A real Rust client on cudarc that leaks on purpose.
//!
//! It makes 10 device allocations and keeps 4 (11 MiB):
//! - 6 stream-ordered ones through cudarc's safe API (`alloc_zeros`, 1–6 MiB), keeping the 2 and
//!   5 MiB ones;
//! - 1 for a host→device→host round trip, freed;
//! - 3 with `cuMemAlloc_v2` (`result::malloc_sync`, 1–3 MiB), freeing the 2 MiB one.
//!
//! By default the context is leaked too, so the kept memory is live at exit. With
//! `--drop-context` the context is released before exit, and the kept memory goes with it.
//!
//! It prints one JSON line: `{"case":"cudarc","allocated":10,"kept":4,"kept_sizes":[…],"checksum":…}`.

use std::error::Error;

use cudarc::driver::{CudaContext, result};

fn main() -> Result<(), Box<dyn Error>> {
    let drop_context = std::env::args().any(|a| a == "--drop-context");
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();

    let mut kept = Vec::new();
    for i in 0..6usize {
        let slice = stream.alloc_zeros::<f32>((i + 1) << 18)?;
        if i % 3 == 1 {
            kept.push(slice);
        }
    }

    let host: Vec<f32> = (0..4096).map(|i| i as f32 * 0.5).collect();
    let device = stream.clone_htod(&host)?;
    let back = stream.clone_dtoh(&device)?;
    drop(device);
    let checksum: f64 = back.iter().map(|v| f64::from(*v)).sum();
    if back != host {
        return Err("round trip through device memory changed the data".into());
    }

    // SAFETY: plain allocations of the sizes given, in the current context (made current by
    // CudaContext::new above).
    let sync: Vec<_> = (0..3usize)
        .map(|i| unsafe { result::malloc_sync((i + 1) << 20) })
        .collect::<Result<_, _>>()?;
    // SAFETY: sync[1] was allocated above and is freed once.
    unsafe { result::free_sync(sync[1])? };
    stream.synchronize()?;

    // Leak the kept slices' memory (not their handles, which would keep the context alive).
    for slice in kept {
        let _ = slice.leak();
    }
    let kept_sizes = [2u64 << 20, 5 << 20, 1 << 20, 3 << 20];
    println!(
        "{{\"case\":\"cudarc\",\"allocated\":10,\"kept\":4,\"kept_sizes\":{kept_sizes:?},\"checksum\":{checksum}}}"
    );
    if drop_context {
        drop(stream);
        drop(ctx);
    } else {
        std::mem::forget(stream);
        std::mem::forget(ctx);
    }
    Ok(())
}
