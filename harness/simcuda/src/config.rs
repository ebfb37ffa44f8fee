//! Settings of the simulated driver, read from the environment once, at the first `cuInit` or
//! `nvmlInit` (never at load time), and the two behaviours they drive at every call: failure
//! injection and the alloc/free latency.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `CUGUARD_SIM_DEVICES` | number of devices (0 makes `cuInit` fail with `CUDA_ERROR_NO_DEVICE`) | 1 |
//! | `CUGUARD_SIM_MEMORY` | memory per device: bytes with an optional unit `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024) or `KB`/`MB`/`GB`/`TB` (powers of 1000) | `16GiB` |
//! | `CUGUARD_SIM_ALLOC_LATENCY_US` | busy-wait at each call of the synchronous `cuMemAlloc*` entries and `cuMemHostAlloc` | 0 |
//! | `CUGUARD_SIM_FREE_LATENCY_US` | busy-wait at each call of `cuMemFree_v2` and `cuMemFreeHost` | 0 |
//! | `CUGUARD_SIM_FAIL` | `ENTRY:N[:CODE]`, comma-separated: the Nth call (1-based) of export `ENTRY` returns `CODE` (default 2) and does nothing; `ENTRY:N+` fails the Nth and every later call; the simulated NVML's entries (`entries/nvml.rs`) too, where `CODE` is an NVML return code | none |
//! | `CUGUARD_SIM_VERSION` | what `cuDriverGetVersion` reports | 13000 |
//! | `CUGUARD_SIM_WORK_DELAY_US` | every copy and memset queued on a stream (the `Async` entries, and the synchronous ones that return before their work is done) waits this long on its stream before it runs, like a slow kernel ahead of it | 0 |
//! | `CUGUARD_SIM_OTHERS` | `PID:SIZE`, comma-separated (SIZE as `CUGUARD_SIM_MEMORY` reads it): other processes holding that much memory on every device from the start: `cuMemGetInfo_v2`'s free and every allocation's room shrink by their bytes, NVML's used includes them, and `nvmlDeviceGetComputeRunningProcesses_v3` lists them beside this process (`entries/nvml.rs`) | none |
//!
//! A value that does not parse costs one line on stderr, and the default is used instead.
//! Calls are counted for failure injection from the moment the settings are read, so the
//! `cuInit` that reads them is call 1 of `cuInit`.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::ffi::CUresult;
use crate::symbols;

/// The simulator's settings.
#[derive(Debug)]
pub struct Config {
    pub devices: u32,
    /// Bytes of memory per device.
    pub memory: u64,
    pub alloc_latency: Duration,
    pub free_latency: Duration,
    /// Added in front of each queued copy or memset.
    pub work_delay: Duration,
    pub version: i32,
    /// Other processes holding memory on every device: `(pid, bytes)`, as configured.
    pub others: Vec<(u32, u64)>,
    /// Failure rules by export name, with the count of calls of that export so far.
    fail: HashMap<String, (AtomicU64, Vec<FailRule>)>,
}

/// One `ENTRY:N[+][:CODE]` rule of `CUGUARD_SIM_FAIL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailRule {
    pub entry: String,
    pub nth: u64,
    pub and_later: bool,
    pub code: CUresult,
}

const DEFAULT_DEVICES: u32 = 1;
const DEFAULT_MEMORY: u64 = 16 << 30;
const DEFAULT_VERSION: i32 = 13000;
const MAX_DEVICES: u32 = 64;

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The settings, reading the environment the first time.
pub fn load() -> &'static Config {
    CONFIG.get_or_init(|| from_env(|name| std::env::var(name).ok()))
}

/// The settings if `cuInit` has read them.
pub fn get() -> Option<&'static Config> {
    CONFIG.get()
}

/// `CUGUARD_SIM_VERSION` before `cuInit` has read the settings (silently the default if bad).
pub fn version_before_init() -> i32 {
    std::env::var("CUGUARD_SIM_VERSION")
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_VERSION)
}

/// The code to return instead of running the `entry` call now, if a rule says it fails.
/// Counts the call.
pub fn injected_failure(entry: &str) -> Option<CUresult> {
    let cfg = get()?;
    let (count, rules) = cfg.fail.get(entry)?;
    let n = count.fetch_add(1, Ordering::Relaxed) + 1;
    rules
        .iter()
        .find(|r| r.nth == n || (r.and_later && n > r.nth))
        .map(|r| r.code)
}

/// Busy-waits the configured latency if `entry` belongs to the synchronous allocation or free
/// family. The stream-ordered entries (`cuMemAllocAsync`, `cuMemFreeAsync`, ...) cost well under
/// a microsecond on the real driver and get none.
pub fn spend_latency(entry: &str) {
    let Some(cfg) = get() else { return };
    let wait = if is_alloc_family(entry) {
        cfg.alloc_latency
    } else if is_free_family(entry) {
        cfg.free_latency
    } else {
        return;
    };
    if wait.is_zero() {
        return;
    }
    let start = Instant::now();
    while start.elapsed() < wait {
        std::hint::spin_loop();
    }
}

fn is_alloc_family(entry: &str) -> bool {
    (entry.starts_with("cuMemAlloc") && !entry.contains("Async")) || entry == "cuMemHostAlloc"
}

fn is_free_family(entry: &str) -> bool {
    entry.starts_with("cuMemFree") && !entry.contains("Async")
}

/// Builds the settings from an environment lookup, warning on stderr about bad values.
fn from_env(var: impl Fn(&str) -> Option<String>) -> Config {
    let devices = setting(
        &var,
        "CUGUARD_SIM_DEVICES",
        DEFAULT_DEVICES,
        "1",
        "a device count (0-64)",
        |v| v.trim().parse::<u32>().ok().filter(|&n| n <= MAX_DEVICES),
    );
    let memory = setting(
        &var,
        "CUGUARD_SIM_MEMORY",
        DEFAULT_MEMORY,
        "16GiB",
        "a size such as 512MiB or 16GiB",
        parse_size,
    );
    let micros = |v: &str| v.trim().parse::<u64>().ok();
    let alloc_us = setting(
        &var,
        "CUGUARD_SIM_ALLOC_LATENCY_US",
        0,
        "0",
        "microseconds",
        micros,
    );
    let free_us = setting(
        &var,
        "CUGUARD_SIM_FREE_LATENCY_US",
        0,
        "0",
        "microseconds",
        micros,
    );
    let delay_us = setting(
        &var,
        "CUGUARD_SIM_WORK_DELAY_US",
        0,
        "0",
        "microseconds",
        micros,
    );
    let version = setting(
        &var,
        "CUGUARD_SIM_VERSION",
        DEFAULT_VERSION,
        "13000",
        "a version such as 13000",
        |v| v.trim().parse::<i32>().ok().filter(|&n| n > 0),
    );
    let rules = setting(
        &var,
        "CUGUARD_SIM_FAIL",
        Vec::new(),
        "no failures",
        "ENTRY:N[+][:CODE],... naming exported entries",
        |v| parse_fail_rules(v, symbols::is_export),
    );
    let others = setting(
        &var,
        "CUGUARD_SIM_OTHERS",
        Vec::new(),
        "no other processes",
        "PID:SIZE,... such as 4242:600MiB",
        parse_others,
    );
    let mut fail: HashMap<String, (AtomicU64, Vec<FailRule>)> = HashMap::new();
    for rule in rules {
        fail.entry(rule.entry.clone())
            .or_insert_with(|| (AtomicU64::new(0), Vec::new()))
            .1
            .push(rule);
    }
    Config {
        devices,
        memory,
        alloc_latency: Duration::from_micros(alloc_us),
        free_latency: Duration::from_micros(free_us),
        work_delay: Duration::from_micros(delay_us),
        version,
        others,
        fail,
    }
}

impl Config {
    /// What the other processes (`CUGUARD_SIM_OTHERS`) hold on each device, no more than the
    /// device has.
    pub fn others_bytes(&self) -> u64 {
        self.others
            .iter()
            .fold(0u64, |sum, o| sum.saturating_add(o.1))
            .min(self.memory)
    }
}

/// Reads one variable: absent means `default`; a value `parse` rejects means one line on stderr
/// (naming the default as `shown`) and `default`.
fn setting<T>(
    var: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: T,
    shown: &str,
    expected: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> T {
    let Some(value) = var(name) else {
        return default;
    };
    match parse(&value) {
        Some(v) => v,
        None => {
            eprintln!(
                "cuguard-simcuda: ignoring {name}={value:?}: expected {expected}; using {shown}"
            );
            default
        }
    }
}

/// Parses `1234`, `512MiB`, `16 GiB`, `1GB`: an integer and an optional unit.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    number.checked_mul(scale).filter(|&n| n > 0)
}

/// Parses `CUGUARD_SIM_OTHERS`: `PID:SIZE` pairs, comma-separated, each pid a positive integer
/// named once, each size as [`parse_size`] reads it. One bad pair rejects the whole value.
pub fn parse_others(text: &str) -> Option<Vec<(u32, u64)>> {
    let mut others: Vec<(u32, u64)> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (pid, size) = item.split_once(':')?;
        let pid: u32 = pid.trim().parse().ok().filter(|&p| p > 0)?;
        let size = parse_size(size)?;
        if others.iter().any(|o| o.0 == pid) {
            return None;
        }
        others.push((pid, size));
    }
    Some(others)
}

/// Parses `CUGUARD_SIM_FAIL`. Every rule must name an export (`known`); one bad rule rejects the
/// whole value.
pub fn parse_fail_rules(text: &str, known: impl Fn(&str) -> bool) -> Option<Vec<FailRule>> {
    let mut rules = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut parts = item.split(':');
        let entry = parts.next()?.trim();
        let nth = parts.next()?.trim();
        let code = match parts.next() {
            Some(c) => c.trim().parse::<CUresult>().ok()?,
            None => crate::errors::code::CUDA_ERROR_OUT_OF_MEMORY,
        };
        if parts.next().is_some() || !known(entry) {
            return None;
        }
        let (nth, and_later) = match nth.strip_suffix('+') {
            Some(n) => (n, true),
            None => (nth, false),
        };
        let nth: u64 = nth.parse().ok().filter(|&n| n >= 1)?;
        rules.push(FailRule {
            entry: entry.to_string(),
            nth,
            and_later,
            code,
        });
    }
    Some(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("16GiB"), Some(16 << 30));
        assert_eq!(parse_size("16 GiB"), Some(16 << 30));
        assert_eq!(parse_size("2GB"), Some(2_000_000_000));
        assert_eq!(parse_size("3KB"), Some(3000));
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("12XB"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999TiB"), None);
    }

    #[test]
    fn fail_rules() {
        let known = |n: &str| n.starts_with("cu");
        let rules = parse_fail_rules("cuMemAlloc_v2:3, cuMemFree_v2:2+:1", known).unwrap();
        assert_eq!(
            rules,
            vec![
                FailRule {
                    entry: "cuMemAlloc_v2".into(),
                    nth: 3,
                    and_later: false,
                    code: 2
                },
                FailRule {
                    entry: "cuMemFree_v2".into(),
                    nth: 2,
                    and_later: true,
                    code: 1
                },
            ]
        );
        assert_eq!(parse_fail_rules("", known), Some(vec![]));
        assert_eq!(parse_fail_rules("cuMemAlloc_v2", known), None);
        assert_eq!(parse_fail_rules("cuMemAlloc_v2:0", known), None);
        assert_eq!(parse_fail_rules("cuMemAlloc_v2:x", known), None);
        assert_eq!(parse_fail_rules("malloc:1", known), None);
        assert_eq!(parse_fail_rules("cuMemAlloc_v2:1:2:3", known), None);
    }

    #[test]
    fn other_processes() {
        assert_eq!(
            parse_others("4242:600MiB, 17:1GiB"),
            Some(vec![(4242, 600 << 20), (17, 1 << 30)])
        );
        assert_eq!(parse_others(""), Some(vec![]));
        assert_eq!(parse_others("4242"), None);
        assert_eq!(parse_others("4242:"), None);
        assert_eq!(parse_others("0:1MiB"), None);
        assert_eq!(parse_others("-3:1MiB"), None);
        assert_eq!(parse_others("x:1MiB"), None);
        assert_eq!(parse_others("4242:lots"), None);
        assert_eq!(parse_others("4242:0"), None);
        assert_eq!(parse_others("4242:1MiB,4242:2MiB"), None);
        assert_eq!(parse_others("4242:1MiB:3"), None);
        // What they hold together, no more than the device has.
        let env: HashMap<&str, &str> = [
            ("CUGUARD_SIM_MEMORY", "1GiB"),
            ("CUGUARD_SIM_OTHERS", "1:600MiB,2:600MiB"),
        ]
        .into_iter()
        .collect();
        let cfg = from_env(|k| env.get(k).map(|v| v.to_string()));
        assert_eq!(cfg.others, [(1, 600 << 20), (2, 600 << 20)]);
        assert_eq!(cfg.others_bytes(), 1 << 30);
    }

    #[test]
    fn environment_with_bad_values_falls_back() {
        let env: HashMap<&str, &str> = [
            ("CUGUARD_SIM_DEVICES", "two"),
            ("CUGUARD_SIM_MEMORY", "64MiB"),
            ("CUGUARD_SIM_VERSION", "12080"),
            ("CUGUARD_SIM_FAIL", "cuMemAlloc_v2:1+"),
            ("CUGUARD_SIM_OTHERS", "4242:600MiB,oops"),
        ]
        .into_iter()
        .collect();
        let cfg = from_env(|k| env.get(k).map(|v| v.to_string()));
        assert_eq!(cfg.devices, 1);
        assert_eq!(cfg.others, []);
        assert_eq!(cfg.others_bytes(), 0);
        assert_eq!(cfg.memory, 64 << 20);
        assert_eq!(cfg.version, 12080);
        assert_eq!(cfg.fail["cuMemAlloc_v2"].1.len(), 1);
    }

    #[test]
    fn latency_families() {
        assert!(is_alloc_family("cuMemAlloc_v2"));
        assert!(is_alloc_family("cuMemAllocPitch_v2"));
        assert!(is_alloc_family("cuMemHostAlloc"));
        assert!(!is_alloc_family("cuMemAllocAsync"));
        assert!(!is_alloc_family("cuMemAllocFromPoolAsync_ptsz"));
        assert!(is_free_family("cuMemFree_v2"));
        assert!(is_free_family("cuMemFreeHost"));
        assert!(!is_free_family("cuMemFreeAsync"));
    }
}
