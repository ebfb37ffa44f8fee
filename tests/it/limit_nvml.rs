//! `CUGUARD_LIMIT` as NVML shows it: `nvmlDeviceGetMemoryInfo` and `_v2` answer with the limit
//! as total and what is left of it as free, exactly as cuMemGetInfo does, through every way a
//! program reaches NVML (the linker, `dlsym(RTLD_DEFAULT)`, `dlsym` on a `libnvidia-ml.so.1`
//! handle as pynvml does); devices matched by UUID against the driver, or by
//! `CUDA_VISIBLE_DEVICES` before it is initialized; NVML's own figures without a limit or with
//! `CUGUARD_LIMIT_VIRTUAL=0`.
//!
//! The simulated NVML lives in the simulated driver's library; a test that wants it by name puts
//! a `libnvidia-ml.so.1` link to that library on `LD_LIBRARY_PATH` ([`with_nvml`]).

use std::path::Path;
use std::process::Command;

use crate::limit::infos;
use crate::support::{artifacts, c_program, run, scratch_dir, shim_command, sim_command};

const MIB: u64 = 1 << 20;
const UUID0: &str = "GPU-63756775-6172-642d-7369-6d0000000000";
const UUID1: &str = "GPU-63756775-6172-642d-7369-6d0000000001";

/// One device's memory as NVML said it: v1's (result, total, free, used), then v2's
/// (result, total, reserved, free, used).
#[derive(Debug, PartialEq, Eq)]
struct Nvml {
    v1: (i64, u64, u64, u64),
    v2: (i64, u64, u64, u64, u64),
}

/// What NVML says of a device whose total is `total` and free `free` (bytes), v1 and v2 alike.
fn says(total: u64, free: u64) -> Nvml {
    Nvml {
        v1: (0, total, free, total - free),
        v2: (0, total, 0, free, total - free),
    }
}

/// Puts a `libnvidia-ml.so.1` link to the simulated driver in `dir` and that directory on the
/// command's library path, after the simulated driver's.
fn with_nvml(cmd: &mut Command, dir: &Path) {
    let a = artifacts();
    let link = dir.join("libnvidia-ml.so.1");
    if std::fs::read_link(&link).is_err() {
        std::os::unix::fs::symlink(&a.sim_lib, &link).unwrap();
    }
    let path = format!("{}:{}", a.sim_dir.display(), dir.display());
    cmd.env("LD_LIBRARY_PATH", path);
}

/// Runs `nvml_limit` with `steps` on a simulated driver of 1 GiB per device, under the shim
/// (`shim`) or bare; returns its stdout lines and its stderr.
fn nvml_limit(test: &str, shim: bool, env: &[(&str, &str)], steps: &str) -> (Vec<String>, String) {
    let dir = scratch_dir(test);
    let program = c_program("nvml_limit");
    let mut cmd = if shim {
        shim_command(&program, &dir.join("r.json"))
    } else {
        sim_command(&program)
    };
    cmd.env("CUGUARD_SIM_MEMORY", "1GiB")
        .env("CUGUARD_QUIET", "1")
        .args(steps.split_whitespace());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    (
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The lines starting with `step` (`nvml`, `nvmlsym`, `py`), as (index, figures).
fn figures(lines: &[String], step: &str) -> Vec<(u32, Nvml)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(step)?.strip_prefix(' '))
        .map(|l| {
            let n: Vec<i64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            let u = |i: usize| n[i] as u64;
            (
                n[0] as u32,
                Nvml {
                    v1: (n[1], u(2), u(3), u(4)),
                    v2: (n[5], u(6), u(7), u(8), u(9)),
                },
            )
        })
        .collect()
}

fn pool(on: bool) -> (&'static str, &'static str) {
    ("CUGUARD_POOL", if on { "1" } else { "0" })
}

/// One device, one limit for all devices and one for device 0: NVML says the limit as total and
/// what is left of it as free, the same figures as cuMemGetInfo at every step, linked and looked
/// up with RTLD_DEFAULT, v1 and v2, pool off and on.
#[test]
fn nvml_says_the_limit_as_cumemgetinfo_does() {
    for limit in ["256MiB", "0:256MiB", "25%"] {
        for on in [false, true] {
            let (lines, stderr) = nvml_limit(
                &format!("nvml-one-{}-{on}", limit.replace([':', '%'], "_")),
                true,
                &[("CUGUARD_LIMIT", limit), pool(on)],
                "nvmlinit cuinit nvml 0 nvmlsym 0 info alloc 100 nvml 0 nvmlsym 0 info \
                 alloc 100 nvml 0 info freeall nvml 0 nvmlsym 0 info",
            );
            let l = 256 * MIB;
            let want = [l, 156 * MIB, 56 * MIB, l];
            let linked: Vec<Nvml> = figures(&lines, "nvml").into_iter().map(|f| f.1).collect();
            let looked_up: Vec<Nvml> = figures(&lines, "nvmlsym")
                .into_iter()
                .map(|f| f.1)
                .collect();
            assert_eq!(
                linked,
                want.iter().map(|&f| says(l, f)).collect::<Vec<_>>(),
                "{limit}, pool {on}: {lines:?}"
            );
            assert_eq!(
                looked_up,
                [want[0], want[1], want[3]]
                    .iter()
                    .map(|&f| says(l, f))
                    .collect::<Vec<_>>(),
                "{limit}, pool {on}: {lines:?}"
            );
            assert_eq!(
                infos(&lines),
                want.iter().map(|&f| (f, l)).collect::<Vec<_>>(),
                "{limit}, pool {on}: cuMemGetInfo says the same"
            );
            assert!(!stderr.contains("NVML"), "{stderr}");
        }
    }
}

/// `CUGUARD_POOL_LIMIT=1GiB` on a 16 GiB device: NVML says a 1 GiB device, as cuMemGetInfo
/// does, before the driver is initialized (one pool limit for every device needs no match) and
/// after, linked and looked up, v1 and v2.
#[test]
fn nvml_says_the_pools_limit() {
    let g = 1u64 << 30;
    let (lines, stderr) = nvml_limit(
        "nvml-pool-limit",
        true,
        &[
            ("CUGUARD_SIM_MEMORY", "16GiB"),
            ("CUGUARD_POOL_LIMIT", "1GiB"),
            pool(true),
        ],
        "nvmlinit nvml 0 cuinit nvml 0 nvmlsym 0 info alloc 100 nvml 0 nvmlsym 0 info \
         freeall nvml 0 info",
    );
    let after = g - 100 * MIB;
    assert_eq!(
        figures(&lines, "nvml")
            .into_iter()
            .map(|f| f.1)
            .collect::<Vec<_>>(),
        vec![says(g, g), says(g, g), says(g, after), says(g, g)],
        "{lines:?}"
    );
    assert_eq!(
        figures(&lines, "nvmlsym")
            .into_iter()
            .map(|f| f.1)
            .collect::<Vec<_>>(),
        vec![says(g, g), says(g, after)],
        "{lines:?}"
    );
    assert_eq!(infos(&lines), vec![(g, g), (after, g), (g, g)]);
    assert_eq!(stderr, "");
}

/// Two devices, each its own limit (bytes, and a share): each NVML device says its own, matched
/// to its CUDA ordinal by UUID, and its own held bytes, as cuMemGetInfo does on that device.
#[test]
fn nvml_two_devices_each_its_own_limit() {
    for on in [false, true] {
        let (lines, _) = nvml_limit(
            &format!("nvml-two-{on}"),
            true,
            &[
                ("CUGUARD_SIM_DEVICES", "2"),
                ("CUGUARD_LIMIT", "0:128MiB,1:50%"),
                pool(on),
            ],
            "nvmlinit cuinit nvml 0 nvml 1 alloc 100 dev 1 alloc 400 \
             nvml 0 nvml 1 nvmlsym 0 nvmlsym 1 info dev 0 info",
        );
        let (l0, l1) = (128 * MIB, 512 * MIB);
        let nvml = figures(&lines, "nvml");
        assert_eq!(
            nvml,
            vec![
                (0, says(l0, l0)),
                (1, says(l1, l1)),
                (0, says(l0, 28 * MIB)),
                (1, says(l1, 112 * MIB)),
            ],
            "pool {on}: {lines:?}"
        );
        assert_eq!(
            figures(&lines, "nvmlsym"),
            nvml.into_iter().skip(2).collect::<Vec<_>>()
        );
        assert_eq!(infos(&lines), vec![(112 * MIB, l1), (28 * MIB, l0)]);
    }
}

/// Before the program initializes the driver: devices named by UUID in `CUDA_VISIBLE_DEVICES`
/// get the limit of their position there (a share of NVML's total); with per-device limits and
/// no way to match, NVML's own figures and one line on stderr; one limit for every device needs
/// no match.
#[test]
fn nvml_before_the_driver_is_initialized() {
    let visible = format!("{UUID1},{UUID0}");
    let two = [
        ("CUGUARD_SIM_DEVICES", "2"),
        ("CUGUARD_LIMIT", "0:128MiB,1:50%"),
    ];
    let (lines, stderr) = nvml_limit(
        "nvml-visible",
        true,
        &[two[0], two[1], ("CUDA_VISIBLE_DEVICES", &visible)],
        "nvmlinit nvml 0 nvml 1",
    );
    assert_eq!(
        figures(&lines, "nvml"),
        vec![
            (0, says(512 * MIB, 512 * MIB)),
            (1, says(128 * MIB, 128 * MIB))
        ],
        "{lines:?}"
    );
    assert_eq!(stderr, "");

    let g = 1 << 30;
    let (lines, stderr) = nvml_limit(
        "nvml-unmatched",
        true,
        &two,
        "nvmlinit nvml 0 nvml 1 nvml 0",
    );
    assert_eq!(
        figures(&lines, "nvml"),
        vec![(0, says(g, g)), (1, says(g, g)), (0, says(g, g))]
    );
    let said: Vec<&str> = stderr.lines().collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!(
        said[0].starts_with(&format!(
            "cuguard: CUGUARD_LIMIT: NVML device {UUID0} matches no CUDA device"
        )),
        "{stderr}"
    );

    let (lines, stderr) = nvml_limit(
        "nvml-uniform",
        true,
        &[("CUGUARD_SIM_DEVICES", "2"), ("CUGUARD_LIMIT", "25%")],
        "nvmlinit nvml 0 nvml 1",
    );
    assert_eq!(
        figures(&lines, "nvml"),
        vec![
            (0, says(256 * MIB, 256 * MIB)),
            (1, says(256 * MIB, 256 * MIB))
        ]
    );
    assert_eq!(stderr, "");
}

/// NVML's own figures: with `CUGUARD_LIMIT_VIRTUAL=0`, with no limit, and without the shim, all
/// the same; a failing NVML call is returned untouched under a limit.
#[test]
fn nvml_real_figures_without_virtualization() {
    let steps = "nvmlinit cuinit nvml 0 nvmlsym 0 alloc 100 nvml 0 nvmlsym 0";
    let g = 1 << 30;
    let want = vec![
        (0, says(g, g)),
        (0, says(g, g)),
        (0, says(g, g - 100 * MIB)),
        (0, says(g, g - 100 * MIB)),
    ];
    for (test, shim, env) in [
        (
            "nvml-novirt",
            true,
            &[("CUGUARD_LIMIT", "256MiB"), ("CUGUARD_LIMIT_VIRTUAL", "0")][..],
        ),
        ("nvml-nolimit", true, &[][..]),
        ("nvml-bare", false, &[][..]),
    ] {
        let (lines, _) = nvml_limit(test, shim, env, steps);
        let mut all = figures(&lines, "nvml");
        all.extend(figures(&lines, "nvmlsym"));
        all.sort_by_key(|(_, n)| std::cmp::Reverse(n.v1.2));
        assert_eq!(all, want, "{test}: {lines:?}");
    }

    let (lines, _) = nvml_limit(
        "nvml-fails",
        true,
        &[
            ("CUGUARD_LIMIT", "256MiB"),
            ("CUGUARD_SIM_FAIL", "nvmlDeviceGetMemoryInfo:1:3"),
        ],
        "nvmlinit cuinit nvml 0 nvml 0",
    );
    let l = 256 * MIB;
    assert_eq!(
        figures(&lines, "nvml"),
        vec![
            (
                0,
                Nvml {
                    v1: (3, 0, 0, 0),
                    v2: (0, l, 0, l, 0)
                }
            ),
            (0, says(l, l)),
        ]
    );
}

/// The program that reads NVML as pynvml does: `CDLL("libnvidia-ml.so.1")`, then attribute
/// lookups (`dlsym` on the handle). NVML and the driver are one library there (shared state).
const PYNVML_WAY: &str = r#"
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
nv = ctypes.CDLL("libnvidia-ml.so.1")
print("same", int(cu._handle == nv._handle))
class M(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in ("total", "free", "used")]
class M2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint)] + [
        (n, ctypes.c_ulonglong) for n in ("total", "reserved", "free", "used")]
def show(i):
    h = ctypes.c_void_p()
    assert nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    m, m2 = M(), M2()
    m2.version = ctypes.sizeof(M2) | (2 << 24)
    r = nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))
    r2 = nv.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m2))
    print("py", i, r, m.total, m.free, m.used, r2, m2.total, m2.reserved, m2.free, m2.used)
def use(dev, mib):
    ctx, p = ctypes.c_void_p(), ctypes.c_ulonglong()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(mib << 20)) == 0
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)) == 0
    print("info", f.value, t.value)
assert nv.nvmlInit_v2() == 0
assert cu.cuInit(0) == 0
show(0); show(1)
use(0, 100); use(1, 400)
show(0); show(1)
"#;

/// pynvml's way, two devices with their own limits; and NVML's own figures with
/// `CUGUARD_LIMIT_VIRTUAL=0`. Without the link, there is no NVML to open.
#[test]
fn nvml_through_a_handle_as_pynvml_does() {
    let g = 1 << 30;
    let (l0, l1) = (128 * MIB, 512 * MIB);
    for (virt, want, infos_want) in [
        (
            "1",
            vec![
                (0, says(l0, l0)),
                (1, says(l1, l1)),
                (0, says(l0, 28 * MIB)),
                (1, says(l1, 112 * MIB)),
            ],
            vec![(28 * MIB, l0), (112 * MIB, l1)],
        ),
        (
            "0",
            vec![
                (0, says(g, g)),
                (1, says(g, g)),
                (0, says(g, g - 100 * MIB)),
                (1, says(g, g - 400 * MIB)),
            ],
            vec![(g - 100 * MIB, g), (g - 400 * MIB, g)],
        ),
    ] {
        let dir = scratch_dir(&format!("nvml-pynvml-{virt}"));
        let mut cmd = shim_command(Path::new("python3"), &dir.join("r.json"));
        with_nvml(&mut cmd, &dir);
        cmd.args(["-c", PYNVML_WAY])
            .env("CUGUARD_QUIET", "1")
            .env("CUGUARD_SIM_MEMORY", "1GiB")
            .env("CUGUARD_SIM_DEVICES", "2")
            .env("CUGUARD_LIMIT", "0:128MiB,1:50%")
            .env("CUGUARD_LIMIT_VIRTUAL", virt);
        let out = cmd.output().unwrap();
        if out.status.code() == Some(127) {
            eprintln!("skipped: no python3");
            return;
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let lines: Vec<String> = stdout.lines().map(str::to_string).collect();
        assert_eq!(lines[0], "same 1", "one library, one state");
        assert_eq!(figures(&lines, "py"), want, "virtual {virt}: {stdout}");
        assert_eq!(infos(&lines), infos_want, "virtual {virt}");
        assert_eq!(stderr, "", "virtual {virt}");
    }

    // No link: the simulated NVML cannot be opened; with no NVML at all, an RTLD_DEFAULT lookup
    // finds nothing, as without the shim.
    let dir = scratch_dir("nvml-absent");
    let mut cmd = shim_command(Path::new("python3"), &dir.join("r.json"));
    cmd.args([
        "-c",
        "import ctypes\n\
         try:\n    l = ctypes.CDLL('libnvidia-ml.so.1')\n    \
         print('sim' if hasattr(l, 'cusimGetUsage') else 'real nvml')\n\
         except OSError:\n    print('no nvml')\n\
         print(hasattr(ctypes.CDLL(None), 'nvmlDeviceGetMemoryInfo'))",
    ])
    .env("CUGUARD_QUIET", "1")
    .env("CUGUARD_LIMIT", "256MiB");
    let out = run(&mut cmd, true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_ne!(
        lines[0], "sim",
        "the simulated NVML is seen only through the link"
    );
    if lines[0] == "no nvml" {
        assert_eq!(lines[1], "False", "{stdout}");
    }
}
