//! The verdict's rules, each on a refusal's figures.

use super::*;
use crate::attribution::OomLimit;

const MIB: u64 = 1 << 20;

fn oom(size: u64, free: u64, idle: Vec<IdleHolder>) -> OomRecord {
    OomRecord {
        seq: 1,
        time_ms: 1,
        thread: 1,
        api: "cuMemAlloc_v2".into(),
        size,
        device: 0,
        stack: None,
        refused_by: "driver".into(),
        message: None,
        device_free_bytes: Some(free),
        device_total_bytes: Some(1024 * MIB),
        live_bytes: 64 * MIB,
        by_owner: Vec::new(),
        stacks: Vec::new(),
        pool: None,
        labels: None,
        limit: None,
        idle,
        verdict: None,
        within: None,
        other_processes: None,
        other_processes_bytes: None,
        other_processes_note: None,
        card_ns: None,
        framework_ns: None,
        card_parts: None,
    }
}

/// `oom` with other processes on the device: `(pid, bytes)`.
fn beside(mut o: OomRecord, others: &[(u32, u64)]) -> OomRecord {
    o.other_processes = Some(
        others
            .iter()
            .map(|&(pid, bytes)| OtherProcess { pid, bytes })
            .collect(),
    );
    o.other_processes_bytes = Some(others.iter().map(|p| p.1).sum());
    o
}

fn driver_pool(reserved: u64, idle: u64, threshold: u64) -> IdleHolder {
    IdleHolder {
        holder: "driver_pool".into(),
        name: "the default memory pool of device 0".into(),
        handle: Some(0x10),
        reserved_bytes: reserved,
        idle_bytes: idle,
        release_threshold: Some(threshold),
        largest_free_bytes: None,
        ..Default::default()
    }
}

fn torch_cache(reserved: u64, idle: u64, pieces: u64, largest: u64, pages: u64) -> IdleHolder {
    IdleHolder {
        holder: PYTORCH_CACHE.into(),
        name: "PyTorch's caching allocator".into(),
        reserved_bytes: reserved,
        idle_bytes: idle,
        largest_free_bytes: Some(largest),
        pieces: Some(pieces),
        expandable_bytes: Some(pages),
        ..Default::default()
    }
}

/// PyTorch refused under its per-process fraction (8 GiB; 7 GiB reserved).
fn torch_oom(size: u64, free: u64, idle: Vec<IdleHolder>) -> OomRecord {
    OomRecord {
        refused_by: PYTORCH.into(),
        limit: Some(OomLimit {
            limit_bytes: 8192 * MIB,
            held_bytes: 7168 * MIB,
        }),
        device_total_bytes: Some(80 * 1024 * MIB),
        live_bytes: 7168 * MIB,
        ..oom(size, free, idle)
    }
}

#[test]
fn pytorch_s_idle_pieces_in_whole_pages_call_for_expandable_segments() {
    // 3.4 GiB idle in 35 pieces of 100 MiB: 5 whole 20 MiB pages each (3.4 GiB).
    let pieces = torch_cache(7168 * MIB, 3500 * MIB, 35, 100 * MIB, 3500 * MIB);
    let v = of(&torch_oom(
        2560 * MIB,
        70 * 1024 * MIB,
        vec![pieces.clone()],
    ));
    assert_eq!(v.action, "expandable_segments");
    assert!(v.fits);
    assert_eq!(
        v.text,
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True fits: PyTorch's cache held 3.4 GiB \
         idle in 35 pieces between live tensors, the largest 100.0 MiB, each too small; 3.4 GiB \
         of it in whole 20 MiB pages, which expandable segments give back and map to the \
         request"
    );
    assert_eq!(pieces.fragmentation(), Some(1.0 - 100.0 / 3500.0));
    // Pieces of 10 MiB hold no whole page: nothing of it counts; the device has the room,
    // so raising the fraction fits.
    let small = torch_cache(7168 * MIB, 3500 * MIB, 350, 10 * MIB, 0);
    let v = of(&torch_oom(2560 * MIB, 70 * 1024 * MIB, vec![small.clone()]));
    assert_eq!(v.action, "raise_limit");
    assert_eq!(
        v.text,
        "raising PyTorch's memory fraction (torch.cuda.set_per_process_memory_fraction) to \
         9.5 GiB fits: the device had 70.0 GiB free"
    );
    // Against the whole device (no fraction), with nothing else idle: nothing would; the
    // live figure leaves out the cache's idle bytes inside its segments.
    let v = of(&OomRecord {
        limit: None,
        ..torch_oom(2560 * MIB, 512 * MIB, vec![small])
    });
    assert_eq!(v.action, "nothing");
    assert_eq!(
        v.text,
        "nothing cuguard can see would: 2.5 GiB asked, 512.0 MiB left and 0 B idle, 2.0 GiB \
         short; 3.6 GiB is live; PyTorch's caching allocator held 3.4 GiB more idle, in pieces \
         it could not give to this request"
    );
}

#[test]
fn under_pytorch_s_fraction_other_holders_do_not_count() {
    // cuguard's pool holds 4 GiB idle, but the fraction refused: only PyTorch's cache counts.
    let pool = IdleHolder {
        holder: "cuguard_pool".into(),
        name: "cuguard's pool".into(),
        reserved_bytes: 8192 * MIB,
        idle_bytes: 4096 * MIB,
        largest_free_bytes: Some(2 * MIB),
        ..Default::default()
    };
    let v = of(&torch_oom(2560 * MIB, 2048 * MIB, vec![pool.clone()]));
    assert_eq!(v.action, "nothing");
    // Against the device, it counts.
    let v = of(&OomRecord {
        limit: None,
        ..torch_oom(2560 * MIB, 2048 * MIB, vec![pool])
    });
    assert_eq!(v.action, "without_cuguard_pool");
}

#[test]
fn an_idle_driver_pool_that_covers_the_request_calls_for_a_synchronization() {
    let v = of(&oom(
        512 * MIB,
        384 * MIB,
        vec![driver_pool(576 * MIB, 576 * MIB, u64::MAX)],
    ));
    assert_eq!(v.action, "sync_driver_pool");
    assert!(v.fits);
    assert_eq!(
        v.text,
        "synchronizing before the request fits: the default memory pool of device 0 held \
         576.0 MiB freed with cuMemFreeAsync and not yet synchronized, which the driver lends \
         no other allocation until cuStreamSynchronize or cuCtxSynchronize (release \
         threshold unlimited)"
    );
}

#[test]
fn a_limit_counts_only_cuguards_pool() {
    let mut o = oom(
        256 * MIB,
        600 * MIB,
        vec![driver_pool(512 * MIB, 512 * MIB, 0)],
    );
    o.refused_by = "limit".into();
    o.limit = Some(OomLimit {
        limit_bytes: 512 * MIB,
        held_bytes: 400 * MIB,
    });
    assert_eq!(of(&o).action, "raise_limit");
}

#[test]
fn too_little_idle_anywhere_is_nothing() {
    let v = of(&oom(
        900 * MIB,
        384 * MIB,
        vec![driver_pool(64 * MIB, 64 * MIB, 0)],
    ));
    assert_eq!(v.action, "nothing");
    assert!(!v.fits);
    assert_eq!(
        v.text,
        "nothing cuguard can see would: 900.0 MiB asked, 384.0 MiB left and 64.0 MiB idle, 452.0 MiB short; 64.0 MiB is live"
    );
}

#[test]
fn two_holders_together() {
    let mut cg = driver_pool(200 * MIB, 200 * MIB, 0);
    cg.holder = "cuguard_pool".into();
    cg.name = "cuguard's pool".into();
    let v = of(&oom(
        800 * MIB,
        384 * MIB,
        vec![driver_pool(300 * MIB, 300 * MIB, 0), cg],
    ));
    assert_eq!(v.action, "all_idle");
    assert!(v.fits);
}

#[test]
fn the_request_is_rounded_to_the_granularity() {
    // 1 byte more than is free and idle together needs another 2 MiB.
    let v = of(&oom(
        (64 * MIB) + 1,
        32 * MIB,
        vec![driver_pool(32 * MIB, 32 * MIB, 0)],
    ));
    assert_eq!(v.action, "nothing");
}

#[test]
fn a_limit_with_room_on_the_device_is_raised() {
    let mut o = oom(256 * MIB, 600 * MIB, Vec::new());
    o.refused_by = "limit".into();
    o.limit = Some(OomLimit {
        limit_bytes: 512 * MIB,
        held_bytes: 400 * MIB,
    });
    let v = of(&o);
    assert_eq!(v.action, "raise_limit");
    assert_eq!(
        v.text,
        "raising CUGUARD_LIMIT to 656.0 MiB fits: the device had 600.0 MiB free"
    );
}

#[test]
fn a_limit_raised_by_less_than_its_words_show_says_by_how_much() {
    // Run 49: CUGUARD_LIMIT of 16 GiB with 4 MiB left refusing a 20 MiB page: 16.02 GiB reads
    // as the limit it was.
    let gib = 1024 * MIB;
    let mut o = oom(20 * MIB, 62 * gib, Vec::new());
    o.refused_by = "limit".into();
    o.limit = Some(OomLimit {
        limit_bytes: 16 * gib,
        held_bytes: 16 * gib - 4 * MIB,
    });
    let v = of(&o);
    assert_eq!(
        v.text,
        "raising CUGUARD_LIMIT to 16.0 GiB (16.0 MiB more) fits: the device had 62.0 GiB free"
    );
}

#[test]
fn hostile_figures_never_overflow() {
    let mut o = oom(
        u64::MAX,
        u64::MAX - 1,
        vec![driver_pool(u64::MAX, u64::MAX, 0)],
    );
    o.refused_by = "limit".into();
    o.limit = Some(OomLimit {
        limit_bytes: u64::MAX,
        held_bytes: 0,
    });
    let _ = of(&o);
    o.refused_by = "driver".into();
    let _ = of(&o);
}

#[test]
fn what_other_processes_hold_is_named_when_only_it_would_fit() {
    // 1 GiB device, 600 MiB held by pid 4242, nothing live here: 424 MiB left of 512.
    let mut o = beside(oom(512 * MIB, 424 * MIB, Vec::new()), &[(4242, 600 * MIB)]);
    o.live_bytes = 0;
    let v = of(&o);
    assert_eq!(v.action, OTHER_PROCESSES);
    assert!(v.fits);
    assert_eq!(
        v.text,
        "other processes hold 600.0 MiB of device 0 (pid 4242: 600.0 MiB): the request fits \
         only once they free it"
    );
    // Several: the first three by pid, the rest counted.
    let o = beside(
        oom(3 << 30, 1 << 30, Vec::new()),
        &[
            (17, 2 << 30),
            (18, 1 << 30),
            (19, 512 * MIB),
            (20, 256 * MIB),
            (21, 256 * MIB),
        ],
    );
    assert_eq!(
        of(&o).text,
        "other processes hold 4.0 GiB of device 0 (pid 17: 2.0 GiB, pid 18: 1.0 GiB, pid 19: \
         512.0 MiB, and 2 more (512.0 MiB)): the request fits only once they free it"
    );
}

#[test]
fn a_remedy_inside_the_process_wins_over_other_processes() {
    let o = beside(
        oom(
            512 * MIB,
            384 * MIB,
            vec![driver_pool(576 * MIB, 576 * MIB, u64::MAX)],
        ),
        &[(4242, 600 * MIB)],
    );
    assert_eq!(of(&o).action, "sync_driver_pool");
    // Too little even with theirs: nothing, as before.
    let o = beside(oom(900 * MIB, 100 * MIB, Vec::new()), &[(4242, 200 * MIB)]);
    assert_eq!(of(&o).action, "nothing");
    // None listed, or not known: as before.
    let o = beside(oom(512 * MIB, 424 * MIB, Vec::new()), &[]);
    assert_eq!(of(&o).action, "nothing");
    let o = oom(512 * MIB, 424 * MIB, Vec::new());
    assert_eq!(of(&o).action, "nothing");
    // A limit's refusal is the limit's, whatever other processes hold.
    let mut o = beside(oom(256 * MIB, 600 * MIB, Vec::new()), &[(4242, 600 * MIB)]);
    o.refused_by = "limit".into();
    o.limit = Some(OomLimit {
        limit_bytes: 512 * MIB,
        held_bytes: 400 * MIB,
    });
    assert_eq!(of(&o).action, "raise_limit");
}

#[test]
fn older_reports_read_without_other_processes() {
    let o = oom(512 * MIB, 424 * MIB, Vec::new());
    let mut v = serde_json::to_value(&o).unwrap();
    let keys = v.as_object().unwrap();
    assert!(
        !keys.keys().any(|k| k.starts_with("other_processes")),
        "{v}"
    );
    v.as_object_mut().unwrap().remove("within");
    let back: OomRecord = serde_json::from_value(v).unwrap();
    assert_eq!(back.other_processes, None);
    // Known and none: an empty list, which is not "not known".
    let o = beside(o, &[]);
    let v = serde_json::to_value(&o).unwrap();
    assert_eq!(v["other_processes"], serde_json::json!([]));
    assert_eq!(v["other_processes_bytes"], 0);
}

#[test]
fn without_the_free_memory_it_is_unknown() {
    let mut o = oom(256 * MIB, 0, Vec::new());
    o.device_free_bytes = None;
    assert_eq!(of(&o).action, "unknown");
}

/// CuPy refused: its pool `reserved` of which `idle` idle in `pieces`, `freeable` of it
/// in whole blocks; under a limit of `limit` where one is given.
fn cupy_oom(
    size: u64,
    free: u64,
    reserved: u64,
    idle: u64,
    freeable: u64,
    limit: Option<u64>,
) -> OomRecord {
    OomRecord {
        refused_by: "cupy".into(),
        limit: limit.map(|l| OomLimit {
            limit_bytes: l,
            held_bytes: reserved,
        }),
        live_bytes: reserved,
        ..oom(
            size,
            free,
            vec![IdleHolder {
                holder: "cupy_pool".into(),
                name: "CuPy's memory pool".into(),
                reserved_bytes: reserved,
                idle_bytes: idle,
                pieces: Some(2),
                freeable_bytes: Some(freeable),
                ..Default::default()
            }],
        )
    }
}

#[test]
fn cupy_s_whole_idle_blocks_under_its_limit_call_for_free_all_blocks() {
    let v = of(&cupy_oom(
        512 * MIB,
        900 * MIB,
        768 * MIB,
        512 * MIB,
        512 * MIB,
        Some(1024 * MIB),
    ));
    assert_eq!(v.action, "free_all_blocks");
    assert!(v.fits);
    assert_eq!(
        v.text,
        "cupy.get_default_memory_pool().free_all_blocks() fits: CuPy's pool held 512.0 MiB idle, \
         512.0 MiB of it in whole blocks, which it gives back to the device"
    );
}

#[test]
fn cupy_s_split_blocks_under_its_limit_call_for_a_higher_limit_where_the_device_has_room() {
    // The same idle memory, all of it in blocks split by live arrays.
    let v = of(&cupy_oom(
        512 * MIB,
        900 * MIB,
        768 * MIB,
        512 * MIB,
        0,
        Some(1024 * MIB),
    ));
    assert_eq!(v.action, "raise_limit");
    assert_eq!(
        v.text,
        "raising CuPy's pool limit (MemoryPool.set_limit, CUPY_GPU_MEMORY_LIMIT) to 1.2 GiB \
         fits: the device had 900.0 MiB free"
    );
    // Without the room on the device, nothing would.
    let v = of(&cupy_oom(
        512 * MIB,
        300 * MIB,
        768 * MIB,
        512 * MIB,
        0,
        Some(1024 * MIB),
    ));
    assert_eq!(v.action, "nothing");
}

#[test]
fn after_the_driver_refused_cupy_s_idle_pieces_are_not_counted_but_other_holders_are() {
    // No limit: the device refused; CuPy gave back its whole blocks already.
    let mut o = cupy_oom(512 * MIB, 100 * MIB, 768 * MIB, 512 * MIB, 0, None);
    assert_eq!(of(&o).action, "nothing");
    o.idle.push(driver_pool(600 * MIB, 600 * MIB, 0));
    assert_eq!(of(&o).action, "sync_driver_pool");
}

/// JAX refused: its region of `region` bytes (its limit too), `in_use` of it used, the
/// largest free piece `largest`; the device had `free` beside it, of `total`.
fn jax_oom(size: u64, free: u64, region: u64, in_use: u64, largest: u64) -> OomRecord {
    OomRecord {
        refused_by: "jax".into(),
        limit: Some(OomLimit {
            limit_bytes: region,
            held_bytes: in_use,
        }),
        device_total_bytes: Some(16 * 1024 * MIB),
        live_bytes: region,
        ..oom(
            size,
            free,
            vec![IdleHolder {
                holder: "jax_allocator".into(),
                name: "JAX's allocator".into(),
                reserved_bytes: region,
                idle_bytes: region - in_use,
                largest_free_bytes: Some(largest),
                ..Default::default()
            }],
        )
    }
}

#[test]
fn jax_refusing_with_room_under_its_limit_calls_for_the_platform_allocator() {
    let gib = 1024 * MIB;
    let v = of(&jax_oom(gib, 4 * gib, 12 * gib, 10 * gib, 100 * MIB));
    assert_eq!(v.action, "jax_platform_allocator");
    assert!(v.fits);
    assert_eq!(
        v.text,
        "XLA_PYTHON_CLIENT_ALLOCATOR=platform fits: JAX's allocator held 2.0 GiB idle under its \
         limit, the largest free piece 100.0 MiB, too small for the 1.0 GiB asked; the platform \
         allocator takes each array from the driver as it is made and gives it back when it is \
         freed (slower)"
    );
}

#[test]
fn jax_refusing_past_its_limit_calls_for_a_larger_fraction_where_the_device_has_room() {
    let gib = 1024 * MIB;
    let v = of(&jax_oom(3 * gib, 4 * gib, 12 * gib, 10 * gib, 2 * gib));
    assert_eq!(v.action, "raise_limit");
    assert_eq!(
        v.text,
        "raising XLA_PYTHON_CLIENT_MEM_FRACTION to 0.82 (13.0 GiB) fits: the device had 4.0 GiB \
         free beside JAX's allocator"
    );
    // The region's idle 2 GiB and 512 MiB of the device are too little for 3 GiB.
    let v = of(&jax_oom(3 * gib, 512 * MIB, 12 * gib, 10 * gib, 2 * gib));
    assert_eq!(v.action, "nothing");
}

#[test]
fn jax_s_device_memory_beyond_its_region_is_not_its_room() {
    // JAX 0.11.2 on the H100 (run 46): 59.38 GiB asked of a 59.4 GiB region with 2.2 GiB
    // in use; the device had 19.2 GiB free beside the region, which XLA may not take.
    let gib = 1024 * MIB;
    let asked = 59.38 * gib as f64;
    let mut o = jax_oom(
        asked as u64,
        19 * gib,
        59 * gib + 400 * MIB,
        2 * gib + 200 * MIB,
        55 * gib,
    );
    o.device_total_bytes = Some(79 * gib + 200 * MIB);
    let v = of(&o);
    assert_eq!(v.action, "raise_limit", "{}", v.text);
    // (2.2 GiB + 59.38 GiB) / 79.2 GiB = 0.7775…, rounded up.
    assert!(
        v.text
            .starts_with("raising XLA_PYTHON_CLIENT_MEM_FRACTION to 0.78 (61.6 GiB) fits"),
        "{}",
        v.text
    );
}

#[test]
fn a_framework_s_idle_memory_is_not_counted_live_twice() {
    let gib = 1024 * MIB;
    let o = jax_oom(3 * gib, 4 * gib, 12 * gib, 10 * gib, 2 * gib);
    assert_eq!(live_outside_idle(o.live_bytes, &o.idle), 10 * gib);
}
