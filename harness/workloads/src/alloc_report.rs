//! What `alloc_bench`'s parent prints and writes: the method in one line, every figure of every
//! run as its median and interquartile range over the counted rounds, the ratios between
//! configurations, this build over the baseline's, and, with an A/A control, every A/B
//! difference beside the control's ([`crate::pair_stats`]); `--json FILE` gets all of it,
//! written as a new file of mode 0600 renamed into place.

use std::io::Write;
use std::path::Path;

use crate::pair_stats::{self, Comparison, Summaries, json_string};

/// How the figures were measured.
pub struct Method {
    /// Counted rounds.
    pub rounds: usize,
    /// Rounds run first and discarded.
    pub warmup: usize,
    /// The core every child but `threads`' was pinned to.
    pub core: Option<usize>,
    /// The A/A control: the configuration and its copy's run name.
    pub control: Option<(String, String)>,
}

/// One run of the benchmark, measured.
pub struct Report<'a> {
    /// The runs, in the order of the configurations.
    pub names: &'a [String],
    pub summaries: &'a Summaries,
    pub method: &'a Method,
    /// The A/B comparisons, (A, B) for B against A.
    pub pairs: Vec<(String, String)>,
}

impl Report<'_> {
    /// Run `v`'s median of figure `k`; NaN when there is none.
    fn get(&self, v: &str, k: &str) -> f64 {
        self.summaries
            .get(v)
            .and_then(|m| m.get(k))
            .map_or(f64::NAN, |s| s.median)
    }

    /// The control's row and the A/B rows; none without a control.
    fn comparisons(&self) -> Vec<Comparison> {
        match &self.method.control {
            Some((a, a2)) => pair_stats::comparisons(self.summaries, (a, a2), &self.pairs),
            None => Vec::new(),
        }
    }

    /// Everything, as markdown, to standard output.
    pub fn print(&self) {
        let m = self.method;
        let pinned = match m.core {
            Some(c) => format!("pinned to core {c} (threads: not pinned)"),
            None => "not pinned".into(),
        };
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        println!(
            "alloc_bench: {} counted ({} discarded), each configuration its own process {pinned}, in an order shuffled every round (seed {:#x}); each figure: median [interquartile range] over the counted rounds",
            plural(m.rounds, "round"),
            plural(m.warmup, "warm-up round"),
            pair_stats::ORDER_SEED
        );
        println!();
        self.print_table();
        self.print_ratios();
        if self.names.iter().any(|n| n.ends_with("@baseline")) {
            self.print_baseline();
        }
        if let Some((a, a2)) = &m.control {
            println!();
            println!(
                "A/A control: {a} and {a2}, the same shim and setting run as two configurations. Every A/B difference is set beside the control's difference for the same figure, |median {a2} - median {a}| / median {a}; a difference no larger is reported as none."
            );
            println!();
            pair_stats::print_comparisons(&self.comparisons());
        }
    }

    /// The table of every figure, one column a run.
    fn print_table(&self) {
        let mut metrics: Vec<&String> = self.summaries.values().flat_map(|m| m.keys()).collect();
        metrics.sort();
        metrics.dedup();
        println!("| metric | {} |", self.names.join(" | "));
        println!(
            "|---|{}|",
            self.names
                .iter()
                .map(|_| "---")
                .collect::<Vec<_>>()
                .join("|")
        );
        for k in metrics {
            let cells: Vec<String> = self
                .names
                .iter()
                .map(|v| {
                    self.summaries
                        .get(v.as_str())
                        .and_then(|m| m.get(k))
                        .map_or("-".into(), |s| s.cell())
                })
                .collect();
            println!("| {k} | {} |", cells.join(" | "));
        }
    }

    /// The ratios between configurations, those whose configurations ran.
    fn print_ratios(&self) {
        let get = |v: &str, k: &str| self.get(v, k);
        let mut rows: Vec<(String, f64)> = Vec::new();
        for size in ["4KiB", "1MiB"] {
            let k = format!("overhead_{size}_ns");
            rows.push((
                format!("pass-through overhead per pair, {size}, interleaved in one process (ns)"),
                get("passthrough", &k),
            ));
            rows.push((
                format!("pass-through + stacks overhead per pair, {size} (ns)"),
                get("passthrough+stacks", &k),
            ));
        }
        for size in ["256B", "4KiB", "1MiB", "64MiB"] {
            let k = format!("pair_{size}_ns");
            let ratio = |a: &str, b: &str| get(a, &k) / get(b, &k);
            rows.push((format!("bare / pool, {size} pair"), ratio("bare", "pool")));
            rows.push((
                format!("pool+stacks / pool, {size} pair"),
                ratio("pool+stacks", "pool"),
            ));
            rows.push((
                format!("pool-nocache / pool (thread cache off / on), {size} pair"),
                ratio("pool-nocache", "pool"),
            ));
        }
        rows.push((
            "bare async pair / pool 4KiB pair".into(),
            get("bare", "async_pair_4KiB_ns") / get("pool", "pair_4KiB_ns"),
        ));
        rows.push((
            "pool: live1000 / single 4KiB pair".into(),
            get("pool", "live1000_pair_4KiB_ns") / get("pool", "pair_4KiB_ns"),
        ));
        for v in ["pool", "pool-nocache"] {
            rows.push((
                format!("{v}: 16 threads / 1 thread throughput"),
                get(v, "threads16_pairs_per_s") / get(v, "threads1_pairs_per_s"),
            ));
        }
        for size in ["4KiB", "1MiB"] {
            let k = format!("streampair_{size}_ns");
            rows.push((
                format!("pool-fence / pool (stream-aware reuse off / on), {size} pair with a memset on a stream"),
                get("pool-fence", &k) / get("pool", &k),
            ));
            rows.push((
                format!("bare / pool, {size} pair with a memset on a stream"),
                get("bare", &k) / get("pool", &k),
            ));
        }
        rows.retain(|(_, x)| x.is_finite());
        if rows.is_empty() {
            return;
        }
        println!();
        println!("| ratio (of medians) | value |");
        println!("|---|---|");
        for (what, x) in rows {
            println!("| {what} | {x:.2} |");
        }
    }

    /// This build's figures over the baseline's.
    fn print_baseline(&self) {
        println!();
        println!("| this build / baseline (lower is faster for ns, higher for pairs/s) | value |");
        println!("|---|---|");
        for v in ["passthrough", "pool", "pool+stacks"] {
            for k in [
                "pair_256B_ns",
                "pair_4KiB_ns",
                "pair_1MiB_ns",
                "live1000_pair_4KiB_ns",
                "threads1_pairs_per_s",
                "threads16_pairs_per_s",
            ] {
                let (now, before) = (self.get(v, k), self.get(&format!("{v}@baseline"), k));
                if now.is_finite() && before.is_finite() {
                    println!("| {v} {k}: {now:.1} / {before:.1} | {:.3} |", now / before);
                }
            }
        }
    }

    /// Everything as one JSON object: `method`, `runs` (each run's figures, each a median,
    /// quartiles, extremes and the rounds counted) and `comparisons`.
    fn json(&self) -> String {
        let m = self.method;
        let (control, copy) = match &m.control {
            Some((a, a2)) => (json_string(a), json_string(a2)),
            None => ("null".into(), "null".into()),
        };
        let method = format!(
            "{{\"rounds\":{},\"warmup_rounds\":{},\"core\":{},\"order_seed\":{},\"spread\":\"interquartile range over the counted rounds\",\"control\":{control},\"control_copy\":{copy}}}",
            m.rounds,
            m.warmup,
            m.core.map_or("null".into(), |c| c.to_string()),
            pair_stats::ORDER_SEED
        );
        let runs: Vec<String> = self
            .summaries
            .iter()
            .map(|(run, figures)| {
                let f: Vec<String> = figures
                    .iter()
                    .map(|(k, s)| format!("{}:{}", json_string(k), pair_stats::summary_json(s)))
                    .collect();
                format!("{}:{{{}}}", json_string(run), f.join(","))
            })
            .collect();
        format!(
            "{{\"method\":{method},\"runs\":{{{}}},\"comparisons\":{}}}\n",
            runs.join(","),
            pair_stats::comparisons_json(&self.comparisons())
        )
    }

    /// Writes [`Report::json`] to `path`: a new file of mode 0600 beside it (created, never
    /// opened through a link or over another's file), renamed over `path`. A failure stops the
    /// program saying what could not be written.
    pub fn write_json(&self, path: &Path) {
        if let Err(e) = replace(path, self.json().as_bytes()) {
            eprintln!("alloc_bench: cannot write {}: {e}", path.display());
            std::process::exit(1);
        }
    }
}

/// `bytes` into a new file (mode 0600, `create_new`) beside `path`, renamed over it.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp = path.with_file_name(temp_name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        // Ours: made above.
        let _ = std::fs::remove_file(&temp);
    }
    written
}
