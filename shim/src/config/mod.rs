//! The shim's settings, read once from the environment.
//!
//! Reading happens in the load-time constructor (the only thing it does) or, if that did not run,
//! on first use. A bad value gets one clear line on stderr and the default; nothing here can fail.

use std::path::PathBuf;

use once_cell::sync::OnceCell;

use amount::{Amount, PoolSettings};
use limit::LimitSpec;

pub mod amount;
pub mod limit;

/// How often the memory timeline is sampled by default (`CUGUARD_TIMELINE_MS`).
pub const DEFAULT_TIMELINE_MS: u64 = 100;
/// The history's bound when `CUGUARD_HISTORY` is not set: 256 MiB, all segments together.
pub const DEFAULT_HISTORY_BYTES: u64 = 256 << 20;
/// The smallest bound `CUGUARD_HISTORY` takes.
pub const MIN_HISTORY_BYTES: u64 = 1 << 20;

/// The bytes kept unused after each pooled block while an NVTX tool is told of the blocks
/// (`CUGUARD_POOL_REDZONE`): one alignment unit of the pool.
pub const DEFAULT_REDZONE: u64 = 256;
/// The largest `CUGUARD_POOL_REDZONE` taken.
pub const MAX_REDZONE: u64 = 1 << 20;

/// `CUGUARD_POOL_REDZONE` from `var`: bytes the pool keeps unused after each block while an NVTX
/// tool is told of the blocks (`crate::serving::regions`), or why the value was not taken (then
/// [`DEFAULT_REDZONE`]). Read when a tool attaches, not with the other settings: it matters only
/// then, and the settings the allocation path reads stay as they were.
pub fn redzone_from(var: Option<String>) -> Result<u64, String> {
    match var.as_deref().map(str::trim) {
        None | Some("") => Ok(DEFAULT_REDZONE),
        Some(v) => match amount::parse(v) {
            Ok(Amount::Bytes(b)) if b <= MAX_REDZONE => Ok(b),
            _ => Err(format!(
                "CUGUARD_POOL_REDZONE={v:?} is not a number of bytes up to {MAX_REDZONE}; using {DEFAULT_REDZONE}"
            )),
        },
    }
}

/// The default report path template.
pub const DEFAULT_REPORT: &str = cuguard_format::template::DEFAULT_TEMPLATE;
/// The default number of frames captured per allocation.
pub const DEFAULT_STACK_DEPTH: usize = 32;
/// The most frames that may be asked for.
pub const MAX_STACK_DEPTH: usize = 256;

/// The effective settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// `CUGUARD_DISABLE=1`: forward everything, track nothing, write nothing.
    pub disabled: bool,
    /// `CUGUARD_QUIET=1`: no summary line at exit.
    pub quiet: bool,
    /// `CUGUARD_LOG=1`: diagnostics on stderr.
    pub log: bool,
    /// `CUGUARD_REPORT`: the report path template, as given.
    pub report_template: String,
    /// `CUGUARD_REPORT_MODE`: the report file's permission bits (octal; default 0600).
    pub report_mode: u32,
    /// The directory a relative report path is resolved against: the working directory at load.
    pub start_dir: PathBuf,
    /// `CUGUARD_STACK_DEPTH`: frames per allocation; 0 = off.
    pub stack_depth: usize,
    /// `CUGUARD_TIMELINE_MS`: how often the memory timeline is sampled; 0 = off.
    pub timeline_ms: u64,
    /// `CUGUARD_HISTORY`: the history's bound in bytes, all its segments together
    /// ([`crate::recorder`]); 0 turns it off.
    pub history_bytes: u64,
    /// `CUGUARD_POOL`: serve cuMemAlloc/cuMemFree from the pool.
    pub pool: bool,
    /// `CUGUARD_POOL_INITIAL`, `CUGUARD_POOL_LIMIT`, `CUGUARD_POOL_KEEP`.
    pub pool_settings: PoolSettings,
    /// `CUGUARD_POOL_THREAD_CACHE`: a per-thread cache of ready blocks in front of the pool's
    /// arenas (`cuguard_pool::ThreadCache`); 0 to compare without it.
    pub thread_cache: bool,
    /// `CUGUARD_POOL_STREAM_REUSE`: a freed block whose pending work was all issued on one
    /// stream is reusable at once, other streams being made to wait for that stream
    /// (`crate::serving::stream_reuse`). On by default; 0 for the fence rule alone.
    pub stream_reuse: bool,
    /// `CUGUARD_TEST_UNSAFE_REUSE=1`: for cuguard's own tests only, the pool reuses freed blocks
    /// at once, ignoring fences, so a test can show that it would then catch the corruption.
    pub unsafe_reuse: bool,
    /// `CUGUARD_TEST_NO_TRACKING=1`: for cuguard's own benchmarks only, the pool serves
    /// allocations but nothing is tracked, to measure what tracking costs.
    pub no_tracking: bool,
    /// Problems met while reading the settings, for the report's `faults`.
    pub problems: Vec<String>,
    /// `CUGUARD_CHECKPOINT_SECS`: a `complete: false` report every N seconds; 0 = off.
    pub checkpoint_secs: u64,
    /// `CUGUARD_WARN_AT`: live device bytes (or a percentage of the device's memory) past which
    /// one warning line and a `warn_threshold_crossed` event are given, once per device.
    pub warn_at: Option<Amount>,
    /// `CUGUARD_SNAPSHOT_SIGNAL`: the signal `cuguard snapshot` sends (a number, `RTMIN+k`, or
    /// `off`); 0 = off. Default `RTMIN+7`.
    pub snapshot_signal: i32,
    /// `CUGUARD_SIGNALS`: write the report when a fatal or terminating signal ends the process.
    pub signals: bool,
    /// Where the stats page goes (`CUGUARD_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/cuguard`, else
    /// `/tmp/cuguard-UID`, [`cuguard_page::RuntimeDir`]); `None` with `CUGUARD_PAGE=0`.
    pub page_dir: Option<cuguard_page::RuntimeDir>,
    /// `CUGUARD_ALERT`: where `CUGUARD_WARN_AT` alerts go.
    pub alert: AlertTo,
    /// `CUGUARD_TEST_SYSLOG_SOCKET`: for cuguard's own tests only, the socket the `syslog` sink
    /// sends to instead of `/dev/log`.
    pub syslog_socket: PathBuf,
    /// `CUGUARD_COST_SAMPLE`: after each thread's first calls, one call in this many is timed
    /// for the report's `cost` (1: every call).
    pub cost_sample_every: u64,
    /// `CUGUARD_LIMIT`: the process's device-memory limit, per device ([`limit`]); `None` for
    /// none (the default, and what a refused value gives).
    pub limit: Option<LimitSpec>,
    /// `CUGUARD_LIMIT_VIRTUAL`: under a limit, cuMemGetInfo reports the limit as the device's
    /// total and what is left of it as free (default on; `0` for enforcement only).
    pub limit_virtual: bool,
    /// `CUGUARD_PYTHON_END`: in a Python process, mark the end of the program's code before the
    /// interpreter's teardown (`crate::lifecycle::python_bootstrap`); `0` for off.
    pub python_end: bool,
    /// `CUGUARD_CACHE_BLOCKS`: record the blocks PyTorch's caching allocator hands out inside
    /// its segments (its tensors) in the history (`crate::hooks::torch_blocks`); `0` for off.
    pub cache_blocks: bool,
    /// `CUGUARD_RMM_OOM`: make a card of RMM's pool refusing a request, seen as its
    /// `rmm::out_of_memory` is thrown (`crate::hooks::cxx_throw`); `0` for off.
    pub rmm_oom: bool,
    /// `CUGUARD_RUN_ID`: the run this process belongs to, set by `cuguard run` for every process
    /// it starts (the report's `run_id`; reports of one run given one path each keep their own
    /// file, a later run's replace an earlier one's, `crate::writer::file`). `None` outside a
    /// run, and for a value that is not 1 to 64 letters, digits, `.`, `_`, `:` or `-`.
    pub run_id: Option<String>,
}

/// Where alerts go (`CUGUARD_ALERT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertTo {
    /// `stderr` (the default): one line a person reads, `cuguard: device 0: …`.
    Stderr,
    /// `json`: one JSON object a line on stderr, for collectors that read the program's output.
    Json,
    /// `syslog`: the JSON object as a syslog message, ident `cuguard`.
    Syslog,
    /// `file:PATH`: JSON objects appended to PATH, one a line (PATH expanded like
    /// `CUGUARD_REPORT`, relative to the start directory).
    File(String),
}

/// Parses `CUGUARD_ALERT`.
pub fn parse_alert(s: &str) -> Result<AlertTo, String> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "" | "stderr" => return Ok(AlertTo::Stderr),
        "json" => return Ok(AlertTo::Json),
        "syslog" => return Ok(AlertTo::Syslog),
        _ => {}
    }
    match t.strip_prefix("file:") {
        Some(path) if !path.trim().is_empty() => Ok(AlertTo::File(path.trim().to_string())),
        _ => Err(format!("{t:?} is not stderr, json, syslog or file:PATH")),
    }
}

/// The default snapshot signal, as an offset from `SIGRTMIN`.
pub const DEFAULT_SNAPSHOT_RT_OFFSET: i32 = 7;

/// Parses `CUGUARD_SNAPSHOT_SIGNAL`: `off`/`0`, a number, `RTMIN+k` or `SIGRTMIN+k`. Only
/// signals without a default meaning to programs are accepted: real-time signals, SIGUSR1 and
/// SIGUSR2.
pub fn parse_signal(s: &str, rtmin: i32, rtmax: i32) -> Result<i32, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    if matches!(lower.as_str(), "off" | "0" | "none" | "no") {
        return Ok(0);
    }
    let rest = lower.strip_prefix("sig").unwrap_or(&lower);
    let n = if let Some(k) = rest.strip_prefix("rtmin") {
        let k = k.trim();
        let off: i32 = if k.is_empty() {
            0
        } else {
            k.strip_prefix('+')
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("{t:?} is not RTMIN+k"))?
        };
        rtmin + off
    } else if rest == "usr1" {
        libc::SIGUSR1
    } else if rest == "usr2" {
        libc::SIGUSR2
    } else {
        rest.parse::<i32>()
            .map_err(|_| format!("{t:?} is not a signal number, RTMIN+k or off"))?
    };
    if n == libc::SIGUSR1 || n == libc::SIGUSR2 || (rtmin..=rtmax).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{t:?} is not SIGUSR1, SIGUSR2 or a real-time signal ({rtmin}..={rtmax})"
        ))
    }
}

static CONFIG: OnceCell<Config> = OnceCell::new();

/// The settings, read now if the constructor did not run. `CUGUARD_DISABLE=1` makes the shim
/// inert ([`crate::phase::make_inert`]) as soon as it is read.
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        crate::process::clock::start();
        let c = from_env(|k| std::env::var(k).ok());
        crate::process::diag::set_verbose(c.log);
        if c.disabled {
            crate::phase::make_inert();
        }
        crate::process::cost::configure(c.cost_sample_every);
        c
    })
}

/// Reads the settings; called by the load-time constructor.
pub fn init() {
    let _ = get();
}

/// Replaces nothing, but lets tests parse arbitrary environments.
pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Config {
    let mut r = Reader {
        var,
        problems: Vec::new(),
    };
    let disabled = r.flag("CUGUARD_DISABLE", false);
    let quiet = r.flag("CUGUARD_QUIET", false);
    let log = r.flag("CUGUARD_LOG", false);
    let pool = r.flag("CUGUARD_POOL", true);
    let thread_cache = r.flag("CUGUARD_POOL_THREAD_CACHE", true);
    let stream_reuse = r.flag("CUGUARD_POOL_STREAM_REUSE", true);
    let unsafe_reuse = r.flag("CUGUARD_TEST_UNSAFE_REUSE", false);
    let signals = r.flag("CUGUARD_SIGNALS", true);
    let no_tracking = r.flag("CUGUARD_TEST_NO_TRACKING", false);
    let page = r.flag("CUGUARD_PAGE", true);
    let limit_virtual = r.flag("CUGUARD_LIMIT_VIRTUAL", true);
    let python_end = r.flag("CUGUARD_PYTHON_END", true);
    let cache_blocks = r.flag("CUGUARD_CACHE_BLOCKS", true);
    let rmm_oom = r.flag("CUGUARD_RMM_OOM", true);
    let stack_depth = r.stack_depth();
    let pool_settings = r.pool_settings();
    let (report_template, report_mode) = r.report();
    let checkpoint_secs = r.checkpoint_secs();
    let timeline_ms = r.timeline_ms();
    let history_bytes = r.history_bytes();
    let warn_at = r.warn_at();
    let snapshot_signal = r.snapshot_signal();
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let page_dir = page.then(|| cuguard_page::runtime_dir(uid, &r.var));
    let alert = r.alert();
    let syslog_socket = (r.var)("CUGUARD_TEST_SYSLOG_SOCKET")
        .filter(|s| !s.trim().is_empty())
        .map_or_else(|| PathBuf::from("/dev/log"), PathBuf::from);
    let cost_sample_every = r.cost_sample_every();
    let limit = r.limit();
    let run_id = r.run_id();
    let start_dir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));

    Config {
        disabled,
        quiet,
        log,
        report_template,
        start_dir,
        stack_depth,
        timeline_ms,
        history_bytes,
        pool,
        pool_settings,
        thread_cache,
        stream_reuse,
        unsafe_reuse,
        no_tracking,
        problems: r.problems,
        checkpoint_secs,
        warn_at,
        snapshot_signal,
        signals,
        page_dir,
        alert,
        syslog_socket,
        cost_sample_every,
        limit,
        limit_virtual,
        python_end,
        cache_blocks,
        rmm_oom,
        run_id,
        report_mode,
    }
}

/// The environment being read ([`from_env`]), and the problems met so far, in the order met.
/// Each method reads one setting or one group of settings, giving the default and a problem for
/// a value it does not take.
struct Reader<F> {
    var: F,
    problems: Vec<String>,
}

impl<F: Fn(&str) -> Option<String>> Reader<F> {
    /// A switch: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`; `default` when unset or empty.
    fn flag(&mut self, name: &str, default: bool) -> bool {
        let value = (self.var)(name);
        match value.as_deref().map(str::trim) {
            None | Some("") => default,
            Some("1" | "true" | "yes" | "on") => true,
            Some("0" | "false" | "no" | "off") => false,
            Some(other) => {
                self.problems.push(format!(
                    "{name}={other:?} is not 0 or 1; using {}",
                    u8::from(default)
                ));
                default
            }
        }
    }

    /// `CUGUARD_STACK_DEPTH`, capped at [`MAX_STACK_DEPTH`].
    fn stack_depth(&mut self) -> usize {
        let value = (self.var)("CUGUARD_STACK_DEPTH");
        match value.as_deref().map(str::trim) {
            None | Some("") => DEFAULT_STACK_DEPTH,
            Some(s) => match s.parse::<usize>() {
                Ok(n) if n <= MAX_STACK_DEPTH => n,
                Ok(n) => {
                    self.problems.push(format!(
                        "CUGUARD_STACK_DEPTH={n} is more than {MAX_STACK_DEPTH}; using {MAX_STACK_DEPTH}"
                    ));
                    MAX_STACK_DEPTH
                }
                Err(_) => {
                    self.problems.push(format!(
                        "CUGUARD_STACK_DEPTH={s:?} is not a number; using {DEFAULT_STACK_DEPTH}"
                    ));
                    DEFAULT_STACK_DEPTH
                }
            },
        }
    }

    /// An amount of memory ([`amount::parse`]); `none` or `unlimited` is `None` where `none_ok`.
    fn amount(&mut self, name: &str, default: Option<Amount>, none_ok: bool) -> Option<Amount> {
        let value = (self.var)(name);
        match value.as_deref().map(str::trim) {
            None | Some("") => default,
            Some(v)
                if none_ok && matches!(v.to_ascii_lowercase().as_str(), "none" | "unlimited") =>
            {
                None
            }
            Some(v) => match amount::parse(v) {
                Ok(a) => Some(a),
                Err(why) => {
                    self.problems
                        .push(format!("{name}: {why}; using the default"));
                    default
                }
            },
        }
    }

    /// `CUGUARD_POOL_INITIAL`, `CUGUARD_POOL_LIMIT`, `CUGUARD_POOL_KEEP`.
    fn pool_settings(&mut self) -> PoolSettings {
        let defaults = PoolSettings::default();
        PoolSettings {
            initial: self
                .amount("CUGUARD_POOL_INITIAL", Some(defaults.initial), false)
                .unwrap_or(defaults.initial),
            limit: self.amount("CUGUARD_POOL_LIMIT", defaults.limit, true),
            keep: self
                .amount("CUGUARD_POOL_KEEP", Some(defaults.keep), true)
                .unwrap_or(Amount::Bytes(u64::MAX)),
        }
    }

    /// `CUGUARD_REPORT` and `CUGUARD_REPORT_MODE`: the report's path template and permission
    /// bits.
    fn report(&mut self) -> (String, u32) {
        let template = match (self.var)("CUGUARD_REPORT") {
            Some(s) if !s.trim().is_empty() => s,
            _ => DEFAULT_REPORT.to_string(),
        };
        let value = (self.var)("CUGUARD_REPORT_MODE");
        let mode = match value.as_deref().map(str::trim) {
            None | Some("") => 0o600,
            Some(v) => match u32::from_str_radix(v, 8) {
                Ok(m) if m <= 0o777 => m,
                _ => {
                    self.problems.push(format!(
                        "CUGUARD_REPORT_MODE={v:?} is not a file mode in octal (as 600 or 0640); using 0600"
                    ));
                    0o600
                }
            },
        };
        (template, mode)
    }

    /// `CUGUARD_CHECKPOINT_SECS`, at most a year; 0 (off) for a value not taken.
    fn checkpoint_secs(&mut self) -> u64 {
        let value = (self.var)("CUGUARD_CHECKPOINT_SECS");
        match value.as_deref().map(str::trim) {
            None | Some("") => 0,
            Some(v) => match v.parse::<u64>() {
                Ok(n) => n.min(86_400 * 365),
                Err(_) => {
                    self.problems.push(format!(
                        "CUGUARD_CHECKPOINT_SECS={v:?} is not a whole number of seconds; checkpoints are off"
                    ));
                    0
                }
            },
        }
    }

    /// `CUGUARD_TIMELINE_MS`.
    fn timeline_ms(&mut self) -> u64 {
        let value = (self.var)("CUGUARD_TIMELINE_MS");
        match value.as_deref().map(str::trim) {
            None | Some("") => DEFAULT_TIMELINE_MS,
            Some(v) => match v.parse::<u64>() {
                Ok(n) => n,
                Err(_) => {
                    self.problems.push(format!(
                        "CUGUARD_TIMELINE_MS={v:?} is not a whole number of milliseconds; using {}",
                        DEFAULT_TIMELINE_MS
                    ));
                    DEFAULT_TIMELINE_MS
                }
            },
        }
    }

    /// `CUGUARD_HISTORY`: the history's bound in bytes, at least [`MIN_HISTORY_BYTES`]; 0 (in
    /// any of its spellings) for off.
    fn history_bytes(&mut self) -> u64 {
        let value = (self.var)("CUGUARD_HISTORY");
        match value.as_deref().map(str::trim) {
            None | Some("") => DEFAULT_HISTORY_BYTES,
            Some(v)
                if matches!(
                    v.to_ascii_lowercase().as_str(),
                    "0" | "off" | "no" | "false"
                ) =>
            {
                0
            }
            Some(v) => {
                let default = DEFAULT_HISTORY_BYTES >> 20;
                match amount::parse(v) {
                    // Zero however written (`00`, `0MiB`) is off, as `0` is; not a fraction of a
                    // byte (`0.5`), which is under the least bound.
                    Ok(Amount::Bytes(0))
                        if v.chars()
                            .take_while(|c| c.is_ascii_digit() || *c == '.')
                            .all(|c| c == '0' || c == '.') =>
                    {
                        0
                    }
                    Ok(Amount::Bytes(b)) if b >= MIN_HISTORY_BYTES => b,
                    Ok(Amount::Bytes(_)) => {
                        let least = MIN_HISTORY_BYTES >> 20;
                        self.problems.push(format!(
                            "CUGUARD_HISTORY={v:?} is less than the least bound, {least}MiB; using {least}MiB"
                        ));
                        MIN_HISTORY_BYTES
                    }
                    // A percentage is of a device's memory, which the history is not on.
                    Ok(Amount::Percent(_)) => {
                        self.problems.push(format!(
                            "CUGUARD_HISTORY={v:?} is not a size; give a size (as {default}MiB) or 0 for off; using {default}MiB"
                        ));
                        DEFAULT_HISTORY_BYTES
                    }
                    Err(why) => {
                        self.problems.push(format!(
                            "CUGUARD_HISTORY={why}; give a size (as {default}MiB) or 0 for off; using {default}MiB"
                        ));
                        DEFAULT_HISTORY_BYTES
                    }
                }
            }
        }
    }

    /// `CUGUARD_WARN_AT`; `off` or `none` for no warning.
    fn warn_at(&mut self) -> Option<Amount> {
        let value = (self.var)("CUGUARD_WARN_AT");
        match value.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(v) if matches!(v.to_ascii_lowercase().as_str(), "off" | "none") => None,
            Some(v) => match amount::parse(v) {
                Ok(a) => Some(a),
                Err(why) => {
                    self.problems
                        .push(format!("CUGUARD_WARN_AT: {why}; no warning is given"));
                    None
                }
            },
        }
    }

    /// `CUGUARD_SNAPSHOT_SIGNAL` ([`parse_signal`]); `RTMIN+7` by default.
    fn snapshot_signal(&mut self) -> i32 {
        let (rtmin, rtmax) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        let default_snapshot = rtmin + DEFAULT_SNAPSHOT_RT_OFFSET;
        let value = (self.var)("CUGUARD_SNAPSHOT_SIGNAL");
        match value.as_deref().map(str::trim) {
            None | Some("") => default_snapshot,
            Some(v) => match parse_signal(v, rtmin, rtmax) {
                Ok(n) => n,
                Err(why) => {
                    self.problems.push(format!(
                        "CUGUARD_SNAPSHOT_SIGNAL: {why}; using RTMIN+{DEFAULT_SNAPSHOT_RT_OFFSET}"
                    ));
                    default_snapshot
                }
            },
        }
    }

    /// `CUGUARD_ALERT` ([`parse_alert`]); stderr by default.
    fn alert(&mut self) -> AlertTo {
        match (self.var)("CUGUARD_ALERT") {
            None => AlertTo::Stderr,
            Some(v) => parse_alert(&v).unwrap_or_else(|why| {
                self.problems
                    .push(format!("CUGUARD_ALERT: {why}; alerts go to stderr"));
                AlertTo::Stderr
            }),
        }
    }

    /// `CUGUARD_COST_SAMPLE`: at least 1.
    fn cost_sample_every(&mut self) -> u64 {
        let default_sample = crate::process::cost::DEFAULT_SAMPLE_EVERY;
        let value = (self.var)("CUGUARD_COST_SAMPLE");
        match value.as_deref().map(str::trim) {
            None | Some("") => default_sample,
            Some(s) => match s.parse::<u64>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    self.problems.push(format!(
                        "CUGUARD_COST_SAMPLE={s:?} is not a number of at least 1; using {default_sample}"
                    ));
                    default_sample
                }
            },
        }
    }

    /// `CUGUARD_LIMIT` ([`limit::parse`]); no limit for a value not taken.
    fn limit(&mut self) -> Option<LimitSpec> {
        match (self.var)("CUGUARD_LIMIT") {
            None => None,
            Some(v) => limit::parse(&v).unwrap_or_else(|why| {
                self.problems
                    .push(format!("CUGUARD_LIMIT: {why}; no limit is set"));
                None
            }),
        }
    }

    /// `CUGUARD_RUN_ID`, when [`run_id_ok`] takes it.
    fn run_id(&mut self) -> Option<String> {
        let value = (self.var)("CUGUARD_RUN_ID");
        match value.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(id) if run_id_ok(id) => Some(id.to_string()),
            Some(id) => {
                self.problems.push(format!(
                    "CUGUARD_RUN_ID={id:?} is not 1 to 64 letters, digits, '.', '_', ':' or '-'; \
                     the process belongs to no run"
                ));
                None
            }
        }
    }
}

/// Whether `id` is a run id the report can carry and the report writer can compare in place:
/// 1 to 64 ASCII letters, digits, `.`, `_`, `:` or `-` (nothing JSON escapes).
pub fn run_id_ok(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Says each problem met while reading the settings, on stderr, once per process. Called at the
/// shim's first use in the process, not when the library loads: a program runs many processes
/// that never touch CUDA (a shell, `pyenv`'s wrappers, compilers), and a bad setting is worth one
/// line, from the process it matters to.
pub fn warn_problems_once() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    for p in &get().problems {
        crate::process::diag::warn(p);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stand-in for the environment holding exactly `pairs` (shared by the settings tests).
    pub(crate) fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| {
            owned
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn defaults() {
        let c = from_env(env(&[]));
        assert!(!c.disabled && !c.quiet && c.pool);
        assert_eq!(c.stack_depth, DEFAULT_STACK_DEPTH);
        assert_eq!(c.report_template, DEFAULT_REPORT);
        assert!(c.problems.is_empty());
    }

    #[test]
    fn a_run_id_is_taken_as_given_or_not_at_all() {
        assert_eq!(from_env(env(&[])).run_id, None);
        let c = from_env(env(&[("CUGUARD_RUN_ID", " 1f2e-3d.run:7_x ")]));
        assert_eq!(c.run_id.as_deref(), Some("1f2e-3d.run:7_x"));
        for bad in ["a\"b", "with space", &"x".repeat(65)] {
            let c = from_env(env(&[("CUGUARD_RUN_ID", bad)]));
            assert_eq!(c.run_id, None, "{bad}");
            assert_eq!(c.problems.len(), 1, "{bad}");
            assert!(c.problems[0].starts_with("CUGUARD_RUN_ID="), "{bad}");
        }
    }

    #[test]
    fn bad_values_fall_back_with_a_message() {
        let c = from_env(env(&[
            ("CUGUARD_STACK_DEPTH", "deep"),
            ("CUGUARD_QUIET", "maybe"),
        ]));
        assert_eq!(c.stack_depth, DEFAULT_STACK_DEPTH);
        assert!(!c.quiet);
        assert_eq!(c.problems.len(), 2);
        assert!(c.problems[0].contains("CUGUARD_QUIET"));
        assert!(c.problems[1].contains("CUGUARD_STACK_DEPTH"));
    }

    #[test]
    fn report_modes_are_octal_or_the_default_with_a_line() {
        assert_eq!(from_env(env(&[])).report_mode, 0o600);
        assert_eq!(
            from_env(env(&[("CUGUARD_REPORT_MODE", "0640")])).report_mode,
            0o640
        );
        for bad in ["garbage", "999", "7777", "-1"] {
            let c = from_env(env(&[("CUGUARD_REPORT_MODE", bad)]));
            assert_eq!(c.report_mode, 0o600, "{bad}");
            assert_eq!(
                c.problems,
                [format!(
                    "CUGUARD_REPORT_MODE={bad:?} is not a file mode in octal (as 600 or 0640); using 0600"
                )]
            );
        }
    }

    #[test]
    fn pool_amounts() {
        let c = from_env(env(&[
            ("CUGUARD_POOL_LIMIT", "8GiB"),
            ("CUGUARD_POOL_KEEP", "none"),
        ]));
        assert_eq!(c.pool_settings.limit, Some(Amount::Bytes(8 << 30)));
        assert_eq!(c.pool_settings.keep, Amount::Bytes(u64::MAX));
        let c = from_env(env(&[("CUGUARD_POOL_INITIAL", "huge")]));
        assert_eq!(c.pool_settings.initial, Amount::Bytes(0));
        assert_eq!(c.problems.len(), 1);
        assert!(c.problems[0].starts_with("CUGUARD_POOL_INITIAL"));
    }

    #[test]
    fn reliability_settings() {
        let c = from_env(env(&[]));
        assert_eq!(c.checkpoint_secs, 0);
        assert_eq!(c.warn_at, None);
        assert!(c.signals);
        let rtmin = libc::SIGRTMIN();
        assert_eq!(c.snapshot_signal, rtmin + DEFAULT_SNAPSHOT_RT_OFFSET);
        let c = from_env(env(&[
            ("CUGUARD_CHECKPOINT_SECS", "5"),
            ("CUGUARD_WARN_AT", "80%"),
            ("CUGUARD_SNAPSHOT_SIGNAL", "off"),
            ("CUGUARD_SIGNALS", "0"),
        ]));
        assert_eq!(c.checkpoint_secs, 5);
        assert_eq!(c.warn_at, Some(Amount::Percent(80.0)));
        assert_eq!(c.snapshot_signal, 0);
        assert!(!c.signals);
        let c = from_env(env(&[
            ("CUGUARD_WARN_AT", "1GiB"),
            ("CUGUARD_CHECKPOINT_SECS", "soon"),
        ]));
        assert_eq!(c.warn_at, Some(Amount::Bytes(1 << 30)));
        assert_eq!(c.checkpoint_secs, 0);
        assert_eq!(c.problems.len(), 1);
    }

    #[test]
    fn page_and_alert_settings() {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let c = from_env(env(&[]));
        assert_eq!(
            c.page_dir,
            Some(cuguard_page::RuntimeDir::Shared(
                format!("/tmp/cuguard-{uid}").into()
            ))
        );
        assert_eq!(c.alert, AlertTo::Stderr);
        assert_eq!(c.syslog_socket, PathBuf::from("/dev/log"));
        let c = from_env(env(&[
            ("CUGUARD_RUNTIME_DIR", "/run/x"),
            ("CUGUARD_ALERT", "file:/var/log/cuguard.%h.log"),
        ]));
        assert_eq!(
            c.page_dir,
            Some(cuguard_page::RuntimeDir::Given("/run/x".into()))
        );
        assert_eq!(c.alert, AlertTo::File("/var/log/cuguard.%h.log".into()));
        let c = from_env(env(&[("CUGUARD_PAGE", "0"), ("CUGUARD_ALERT", "SysLog")]));
        assert_eq!(c.page_dir, None);
        assert_eq!(c.alert, AlertTo::Syslog);
        assert!(c.problems.is_empty());
        for bad in ["file:", "email", "file"] {
            let c = from_env(env(&[("CUGUARD_ALERT", bad)]));
            assert_eq!(c.alert, AlertTo::Stderr, "{bad}");
            assert_eq!(c.problems.len(), 1, "{bad}");
            assert!(
                c.problems[0].starts_with("CUGUARD_ALERT"),
                "{:?}",
                c.problems
            );
        }
        assert_eq!(parse_alert(" json "), Ok(AlertTo::Json));
        let c = from_env(env(&[("CUGUARD_PAGE", "maybe")]));
        assert!(c.page_dir.is_some(), "a bad value keeps the default");
    }

    #[test]
    fn snapshot_signals() {
        assert_eq!(parse_signal("RTMIN+7", 34, 64), Ok(41));
        assert_eq!(parse_signal("SIGRTMIN+2", 34, 64), Ok(36));
        assert_eq!(parse_signal("40", 34, 64), Ok(40));
        assert_eq!(parse_signal("usr2", 34, 64), Ok(libc::SIGUSR2));
        assert_eq!(parse_signal("off", 34, 64), Ok(0));
        assert!(
            parse_signal("15", 34, 64).is_err(),
            "SIGTERM is the program's"
        );
        assert!(parse_signal("RTMIN+40", 34, 64).is_err());
        assert!(parse_signal("soon", 34, 64).is_err());
    }

    #[test]
    fn limit_settings() {
        let c = from_env(env(&[]));
        assert_eq!(c.limit, None);
        assert!(c.limit_virtual);
        let c = from_env(env(&[
            ("CUGUARD_LIMIT", "0:8GiB,1:50%"),
            ("CUGUARD_LIMIT_VIRTUAL", "0"),
        ]));
        let spec = c.limit.expect("a limit");
        assert_eq!(spec.for_device(0), Some(Amount::Bytes(8 << 30)));
        assert_eq!(spec.for_device(1), Some(Amount::Percent(50.0)));
        assert!(!c.limit_virtual);
        assert!(c.problems.is_empty());
        for bad in ["0", "lots", "0:1GiB,0:2GiB"] {
            let c = from_env(env(&[("CUGUARD_LIMIT", bad)]));
            assert_eq!(c.limit, None, "{bad}");
            assert_eq!(c.problems.len(), 1, "{bad}");
            assert!(
                c.problems[0].starts_with("CUGUARD_LIMIT: "),
                "{:?}",
                c.problems
            );
            assert!(
                c.problems[0].ends_with("; no limit is set"),
                "{:?}",
                c.problems
            );
        }
    }

    #[test]
    fn history_bounds() {
        let history = |v: &str| {
            let c = from_env(env(&[("CUGUARD_HISTORY", v)]));
            (c.history_bytes, c.problems)
        };
        assert_eq!(from_env(env(&[])).history_bytes, DEFAULT_HISTORY_BYTES);
        assert_eq!(history("64MiB"), (64 << 20, vec![]));
        assert_eq!(history(" 1MiB "), (MIN_HISTORY_BYTES, vec![]));
        assert_eq!(
            history("18446744073709551615"),
            (u64::MAX, vec![]),
            "the largest bound is taken"
        );
        // Zero, however written, is off, as `0` is; never "less than 1MiB".
        for off in ["0", "00", "000", "0B", "0MiB", "0.0", "off", "No", "FALSE"] {
            assert_eq!(history(off), (0, vec![]), "{off}");
        }
        // Under the least bound: the least bound, said.
        for small in ["1", "512KiB", "1048575", "0.5", "0.0001KiB"] {
            assert_eq!(
                history(small),
                (
                    MIN_HISTORY_BYTES,
                    vec![format!(
                        "CUGUARD_HISTORY={small:?} is less than the least bound, 1MiB; using 1MiB"
                    )]
                ),
                "{small}"
            );
        }
        // Past 2^64 - 1 bytes: a bad value, the default, never unbounded.
        for huge in [
            "18446744073709551616",
            "99999999999999999999999",
            "16777216TiB",
        ] {
            let (bytes, problems) = history(huge);
            assert_eq!(bytes, DEFAULT_HISTORY_BYTES, "{huge}");
            assert_eq!(problems.len(), 1, "{huge}: {problems:?}");
            assert!(
                problems[0].starts_with(&format!("CUGUARD_HISTORY={huge:?} ")),
                "{problems:?}"
            );
            assert!(problems[0].ends_with("; using 256MiB"), "{problems:?}");
        }
        assert_eq!(
            history("18446744073709551616").1,
            [
                "CUGUARD_HISTORY=\"18446744073709551616\" is out of range (16EiB or more); \
                 give a size (as 256MiB) or 0 for off; using 256MiB"
            ]
        );
        for bad in ["lots", "25%", "-1"] {
            let (bytes, problems) = history(bad);
            assert_eq!(bytes, DEFAULT_HISTORY_BYTES, "{bad}");
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
            assert!(
                problems[0].starts_with(&format!("CUGUARD_HISTORY={bad:?} ")),
                "{problems:?}"
            );
            assert!(
                problems[0].ends_with("give a size (as 256MiB) or 0 for off; using 256MiB"),
                "{problems:?}"
            );
        }
    }

    #[test]
    fn depth_is_capped() {
        let c = from_env(env(&[("CUGUARD_STACK_DEPTH", "100000")]));
        assert_eq!(c.stack_depth, MAX_STACK_DEPTH);
        let c = from_env(env(&[("CUGUARD_STACK_DEPTH", "0")]));
        assert_eq!(c.stack_depth, 0);
    }
}
