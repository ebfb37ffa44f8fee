//! The statistics of `alloc_bench`'s rounds (issue 56): what tells a change from noise.
//!
//! - Each figure of each run (a configuration, one child process a round) is summarised over
//!   the counted rounds as its median and its **interquartile range** (the first and third
//!   quartiles, linear between the nearest rounds): the middle half of the rounds, so that one
//!   round the machine disturbed widens nothing; the lowest and highest rounds are kept in the
//!   JSON.
//! - The **A/A control** is one configuration run twice as two runs, `NAME` and `NAME@control`
//!   (the same shim, the same setting, each its own child every round). Their difference,
//!   |median A − median A′| / median A, is what the method cannot tell from nothing, figure by
//!   figure.
//! - An **A/B comparison** (B against A: a setting against another, or this build against the
//!   baseline build) reports B / A when |median B − median A| / median A is larger than the
//!   control's difference for that figure, and "none (within the control's ±x%)" when it is not.
//! - The order of the runs in each round is shuffled by a fixed generator ([`Shuffle`]), so no
//!   run always comes first or always follows the same other; the same seed gives the same
//!   orders on every machine.

use std::collections::BTreeMap;

/// The seed of the runs' order in every round ([`Shuffle`]).
pub const ORDER_SEED: u64 = 0x5EED_0056;

/// The median of the child's samples (the batches of one test): the middle one, the upper of the
/// two middle ones for an even count; NaN when there are none.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// One figure of one run over the counted rounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub median: f64,
    /// The first quartile.
    pub q1: f64,
    /// The third quartile.
    pub q3: f64,
    pub min: f64,
    pub max: f64,
    /// The rounds it was measured in.
    pub rounds: usize,
}

impl Summary {
    /// The summary of `samples` (one a round); every value NaN when there are none.
    pub fn of(samples: &[f64]) -> Summary {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(|a, b| a.total_cmp(b));
        Summary {
            median: quantile(&s, 0.5),
            q1: quantile(&s, 0.25),
            q3: quantile(&s, 0.75),
            min: s.first().copied().unwrap_or(f64::NAN),
            max: s.last().copied().unwrap_or(f64::NAN),
            rounds: s.len(),
        }
    }

    /// `median [q1–q3]`, or the median alone when it is of one round.
    pub fn cell(&self) -> String {
        if self.rounds > 1 {
            format!(
                "{} [{}–{}]",
                number(self.median),
                number(self.q1),
                number(self.q3)
            )
        } else {
            number(self.median)
        }
    }
}

/// A figure with one decimal from 100 up, three below (the machine's steps are a few ns).
pub fn number(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

/// The `q` quantile of sorted values, linear between the two nearest (the usual definition:
/// the median of an even count is the mean of the middle two); NaN for none.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => {
            let at = q * (n - 1) as f64;
            let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
        }
    }
}

/// A fixed-seed generator (xorshift) for the runs' order in each round.
pub struct Shuffle(u64);

impl Shuffle {
    pub fn new(seed: u64) -> Shuffle {
        Shuffle(seed.max(1))
    }

    /// `0..n` in a new order (Fisher–Yates).
    pub fn order(&mut self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            order.swap(i, (self.0 % (i as u64 + 1)) as usize);
        }
        order
    }
}

/// What a comparison says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// The A/A control's own row.
    Control,
    /// A difference larger than the control's: B / A stands.
    Ratio,
    /// No larger than the control's: none told.
    None,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Control => "control",
            Verdict::Ratio => "ratio",
            Verdict::None => "none",
        }
    }
}

/// One figure, B against A, beside the control's difference for that figure.
pub struct Comparison {
    pub figure: String,
    pub a: String,
    pub b: String,
    pub a_summary: Summary,
    pub b_summary: Summary,
    /// The control's difference, as a fraction of its median.
    pub control: f64,
    pub verdict: Verdict,
}

impl Comparison {
    /// B / A of the medians.
    pub fn ratio(&self) -> f64 {
        self.b_summary.median / self.a_summary.median
    }

    /// |median B − median A| / median A.
    pub fn difference(&self) -> f64 {
        (self.ratio() - 1.0).abs()
    }

    /// The row's last cell: the ratio, or none within the control's difference.
    pub fn so(&self) -> String {
        match self.verdict {
            Verdict::Control => "the control".into(),
            Verdict::Ratio => format!("{:.3}×", self.ratio()),
            Verdict::None => format!("none (within the control's {})", percent(self.control)),
        }
    }
}

/// `±x.xx%` of a fraction.
fn percent(fraction: f64) -> String {
    format!("±{:.2}%", fraction * 100.0)
}

/// Each run's summary of each figure.
pub type Summaries = BTreeMap<String, BTreeMap<String, Summary>>;

/// The figures compared: a pair's time (`pair_4KiB_ns`, `async_pair_4KiB_ns`,
/// `live1000_pair_4KiB_ns`, `streampair_1MiB_ns`), not the machine's steps nor the in-process
/// overhead.
pub fn compared(figure: &str) -> bool {
    figure.ends_with("_ns") && figure.contains("pair") && !figure.starts_with("overhead")
}

/// The control's row and every (A, B) of `pairs` for every compared figure the control has,
/// figure by figure. A pair whose runs lack the figure is left out.
pub fn comparisons(
    summaries: &Summaries,
    control: (&str, &str),
    pairs: &[(String, String)],
) -> Vec<Comparison> {
    let mut out = Vec::new();
    let Some(figures) = summaries.get(control.0) else {
        return out;
    };
    let get = |run: &str, figure: &str| summaries.get(run).and_then(|m| m.get(figure)).copied();
    for figure in figures.keys().filter(|f| compared(f)) {
        let (Some(c0), Some(c1)) = (get(control.0, figure), get(control.1, figure)) else {
            continue;
        };
        let control_difference = (c1.median / c0.median - 1.0).abs();
        let rows = std::iter::once((control.0, control.1, Verdict::Control)).chain(
            pairs
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str(), Verdict::Ratio)),
        );
        for (a, b, kind) in rows {
            let (Some(a_summary), Some(b_summary)) = (get(a, figure), get(b, figure)) else {
                continue;
            };
            let mut c = Comparison {
                figure: figure.clone(),
                a: a.into(),
                b: b.into(),
                a_summary,
                b_summary,
                control: control_difference,
                verdict: kind,
            };
            // Not larger (a NaN included) is none.
            let larger = c.difference().partial_cmp(&control_difference)
                == Some(std::cmp::Ordering::Greater);
            if kind == Verdict::Ratio && !larger {
                c.verdict = Verdict::None;
            }
            out.push(c);
        }
    }
    out
}

/// The comparisons as a markdown table: every row names its figure and its runs, with both
/// medians and their interquartile ranges, B / A, the signed difference, the control's, and what
/// that says.
pub fn print_comparisons(rows: &[Comparison]) {
    println!(
        "| figure | comparison (B / A) | A: median [IQR] | B: median [IQR] | B / A | difference | the control's | so |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for c in rows {
        let what = match c.verdict {
            Verdict::Control => format!("control: {} / {}", c.b, c.a),
            _ => format!("{} / {}", c.b, c.a),
        };
        println!(
            "| {} | {what} | {} | {} | {:.3} | {:+.2}% | {} | {} |",
            c.figure,
            c.a_summary.cell(),
            c.b_summary.cell(),
            c.ratio(),
            (c.ratio() - 1.0) * 100.0,
            percent(c.control),
            c.so()
        );
    }
}

/// A JSON number; `null` for NaN and the infinities, which JSON has not.
pub fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

/// A JSON string.
pub fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A summary as a JSON object.
pub fn summary_json(s: &Summary) -> String {
    format!(
        "{{\"median\":{},\"q1\":{},\"q3\":{},\"min\":{},\"max\":{},\"rounds\":{}}}",
        json_number(s.median),
        json_number(s.q1),
        json_number(s.q3),
        json_number(s.min),
        json_number(s.max),
        s.rounds
    )
}

/// The comparisons as a JSON array.
pub fn comparisons_json(rows: &[Comparison]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|c| {
            format!(
                "{{\"figure\":{},\"a\":{},\"b\":{},\"a_median\":{},\"b_median\":{},\"ratio\":{},\"difference\":{},\"control_difference\":{},\"verdict\":{}}}",
                json_string(&c.figure),
                json_string(&c.a),
                json_string(&c.b),
                json_number(c.a_summary.median),
                json_number(c.b_summary.median),
                json_number(c.ratio()),
                json_number(c.difference()),
                json_number(c.control),
                json_string(c.verdict.word())
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_are_linear_between_rounds() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(
            (s.median, s.q1, s.q3, s.min, s.max),
            (3.0, 2.0, 4.0, 1.0, 5.0)
        );
        let s = Summary::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.median, s.q1, s.q3), (2.5, 1.75, 3.25));
        assert_eq!(Summary::of(&[f64::NAN, 7.0]).rounds, 1);
        assert!(Summary::of(&[]).median.is_nan());
    }

    #[test]
    fn the_order_is_a_permutation_that_moves_and_repeats_with_the_seed() {
        let mut a = Shuffle::new(ORDER_SEED);
        let orders: Vec<Vec<usize>> = (0..9).map(|_| a.order(6)).collect();
        for o in &orders {
            let mut s = o.clone();
            s.sort();
            assert_eq!(s, (0..6).collect::<Vec<_>>());
        }
        let firsts: std::collections::BTreeSet<usize> = orders.iter().map(|o| o[0]).collect();
        assert!(firsts.len() > 1, "{orders:?}");
        let mut b = Shuffle::new(ORDER_SEED);
        assert_eq!(orders[0], b.order(6));
    }

    fn summaries(rows: &[(&str, f64)]) -> Summaries {
        rows.iter()
            .map(|(run, x)| {
                let m = BTreeMap::from([("pair_4KiB_ns".to_string(), Summary::of(&[*x]))]);
                (run.to_string(), m)
            })
            .collect()
    }

    #[test]
    fn a_difference_no_larger_than_the_controls_is_none() {
        let s = summaries(&[
            ("pool", 200.0),
            ("pool@control", 204.0),
            ("pool-nohistory", 197.0),
            ("pool-untracked", 100.0),
        ]);
        let pairs = [
            ("pool-nohistory".to_string(), "pool".to_string()),
            ("pool-untracked".to_string(), "pool".to_string()),
            ("pool".to_string(), "pool+stacks".to_string()),
        ];
        let rows = comparisons(&s, ("pool", "pool@control"), &pairs);
        assert_eq!(rows.len(), 3, "the pair without pool+stacks is left out");
        assert_eq!(rows[0].verdict, Verdict::Control);
        assert_eq!(rows[0].so(), "the control");
        assert_eq!(rows[1].verdict, Verdict::None);
        assert_eq!(rows[1].so(), "none (within the control's ±2.00%)");
        assert_eq!(rows[2].verdict, Verdict::Ratio);
        assert_eq!(rows[2].so(), "2.000×");
        let json = comparisons_json(&rows);
        assert!(json.contains("\"verdict\":\"none\""), "{json}");
        assert!(json.contains("\"control_difference\":0.02"), "{json}");
    }
}
