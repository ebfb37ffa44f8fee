//! cuguard's own cost in words: the whole bill in one line ([`cost_line`], `--cost`) and the
//! short line every summary ends a process with ([`cost_short`]).

use cuguard_format::Cost;

/// cuguard's bill in one line, for people:
///
/// ```text
/// cuguard's cost: 1.6 ms in hooks over 10,008 allocations (0.12 µs each after each thread's first 8, of which stacks 0.09 µs, Python frames 0.03 µs; the first 8 of each thread 400.0 µs in all), 3.1 ms once (module tables, 110 unwind rules, thread set-up, arming), 3 pool chunks (36.0 MiB) from the driver in 600.0 µs, 200.0 µs for 3 other stacks, 15.0 ms writing 1 report, 3.4 MiB of its own memory
/// ```
///
/// Times on the allocation path are the report's estimates (see its `cost`). The time each is
/// an allocation's steady cost, after each thread's first calls (which carry its warm-up and
/// are said apart); stacks and Python frames are parts of it, per allocation, so never more
/// than it (the Python part only where Python frames were read). Work done once and stacks
/// captured outside an allocation (contexts', events') are billed apart. A report from before
/// the bill added up says its stacks per capture (`stacks 0.91 µs a capture`), which is not a
/// part.
pub fn cost_line(c: &Cost) -> String {
    let h = &c.hooks;
    let mut s = format!(
        "cuguard's cost: {} in hooks over {}",
        duration(h.ns),
        count(h.calls, "allocation", "allocations")
    );
    let parts = [("stacks", &c.stacks), ("Python frames", &c.python)];
    let parts_known = c.captures.is_some() || c.one_time.is_some() || h.first_calls > 0;
    if h.calls > 0 && parts_known {
        let later = h.later_calls();
        // The steady state when there is one; else every call (all among the first).
        let (calls, whole, after) = if later > 0 {
            (
                later,
                h.later_ns(),
                format!(" after each thread's first {}", c.first_timed),
            )
        } else {
            (h.calls, h.ns, String::new())
        };
        let each = |ns: u64| per_call(ns as f64 / calls as f64);
        let mut inner = format!("{} each{after}", each(whole));
        let of: Vec<String> = parts
            .iter()
            .filter(|(_, p)| p.calls > 0)
            .map(|(label, p)| {
                let ns = if later > 0 { p.later_ns() } else { p.ns };
                format!("{label} {}", each(ns.min(whole)))
            })
            .collect();
        if !of.is_empty() {
            inner.push_str(&format!(", of which {}", of.join(", ")));
        }
        if later > 0 && h.first_calls > 0 {
            inner.push_str(&format!(
                "; the first {} of each thread {} in all",
                c.first_timed,
                duration(h.first_ns)
            ));
        }
        s.push_str(&format!(" ({inner})"));
    } else if let Some(each) = h.per_call_ns() {
        // An older report: its stacks counted every capture, inside an allocation or not.
        let mut inner = vec![format!("{} each", per_call(each))];
        let per_capture: Vec<String> = parts
            .iter()
            .filter_map(|(label, p)| {
                Some(format!("{label} {} a capture", per_call(p.per_call_ns()?)))
            })
            .collect();
        if !per_capture.is_empty() {
            inner.push(per_capture.join(", "));
        }
        s.push_str(&format!(" ({})", inner.join("; ")));
    }
    if let Some(once) = c.one_time.filter(|o| o.calls > 0) {
        let rules = c.unwind.map_or(0, |u| u.evaluated);
        let rules = if rules > 0 {
            format!("{}, ", count(rules, "unwind rule", "unwind rules"))
        } else {
            String::new()
        };
        s.push_str(&format!(
            ", {} once (module tables, {rules}thread set-up, arming)",
            duration(once.ns)
        ));
    }
    if let Some(g) = c.pool_growth.filter(|g| g.chunks > 0) {
        s.push_str(&format!(
            ", {} ({}) from the driver in {}",
            count(g.chunks, "pool chunk", "pool chunks"),
            crate::wording::bytes(g.bytes),
            duration(g.ns)
        ));
    }
    if let Some(b) = c.cache_blocks.filter(|b| b.calls > 0) {
        s.push_str(&format!(
            ", {} recording {} of PyTorch's tensors ({} each)",
            duration(b.ns),
            count(b.calls, "allocation or free", "allocations and frees"),
            per_call(steady(&b))
        ));
    }
    if let Some(other) = c.captures.filter(|o| o.calls > 0) {
        s.push_str(&format!(
            ", {} for {}",
            duration(other.ns),
            count(other.calls, "other stack", "other stacks")
        ));
    }
    s.push_str(&format!(
        ", {} writing {}, {} of its own memory",
        duration(c.reports.ns),
        count(c.reports.written, "report", "reports"),
        crate::wording::bytes(c.heap_bytes)
    ));
    s
}

/// cuguard's own cost in one short line (about 100 characters): what each allocation cost
/// (after each thread's first, when there were later ones), each of PyTorch's tensors where the
/// hook recorded them, and the memory it kept, with the way to the whole bill ([`cost_line`],
/// `--cost`):
///
/// ```text
/// cuguard's cost: 8.4 µs per allocation, 10.0 MiB of memory (--cost: the whole bill)
/// ```
pub fn cost_short(c: &Cost) -> String {
    let h = &c.hooks;
    let each = (h.calls > 0).then(|| steady(h));
    let memory = format!("{} of memory", crate::wording::bytes(c.heap_bytes));
    let tensors = c
        .cache_blocks
        .filter(|b| b.calls > 0)
        .map(|b| format!("{} per tensor, ", per_call(steady(&b))))
        .unwrap_or_default();
    match each {
        Some(ns) => format!(
            "cuguard's cost: {} per allocation, {tensors}{memory} (--cost: the whole bill)",
            per_call(ns)
        ),
        None => format!("cuguard's cost: {tensors}{memory} (--cost: the whole bill)"),
    }
}

/// A sampled bill's time a call: after each thread's first calls where there were later ones
/// (the steady state), else over every call.
fn steady(t: &cuguard_format::CostTiming) -> f64 {
    if t.later_calls() > 0 {
        t.later_ns() as f64 / t.later_calls() as f64
    } else {
        t.ns as f64 / t.calls.max(1) as f64
    }
}

/// `850 ns`, `12.3 µs`, `1.2 ms`, `3.4 s`.
fn duration(ns: u64) -> String {
    let ns = ns as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.1} s", ns / 1e9)
    }
}

/// Time per call: `0.12 µs`, `1.34 µs`, `12.3 µs`, `42.0 ms` from a millisecond on.
fn per_call(ns: f64) -> String {
    if ns < 10_000.0 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        duration(ns as u64)
    }
}

/// `1 allocation`, `10,000 allocations`.
fn count(n: u64, one: &str, many: &str) -> String {
    let digits = n.to_string();
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{grouped} {}", if n == 1 { one } else { many })
}
