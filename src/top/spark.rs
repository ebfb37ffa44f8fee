//! A sparkline as text: the newest samples of a history as block characters (`▁▂▃▄▅▆▇█`),
//! scaled to the largest of them, for a table cell.

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` values as bars, the largest one a full block; nothing when there are no
/// values; all lowest bars when all are 0.
pub fn sparkline(values: &[u64], width: usize) -> String {
    let shown = &values[values.len().saturating_sub(width)..];
    let max = shown.iter().copied().max().unwrap_or(0);
    shown
        .iter()
        .map(|&v| {
            if max == 0 {
                BARS[0]
            } else {
                // 0 is the lowest bar; max the highest; in between, proportionally.
                let level = (u128::from(v) * (BARS.len() as u128 - 1)).div_ceil(u128::from(max));
                BARS[level as usize]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::sparkline;

    #[test]
    fn bars() {
        assert_eq!(sparkline(&[], 10), "");
        assert_eq!(sparkline(&[0, 0, 0], 10), "▁▁▁");
        assert_eq!(sparkline(&[0, 1, 2, 3, 4, 5, 6, 7], 10), "▁▂▃▄▅▆▇█");
        assert_eq!(sparkline(&[7, 0, 7, u64::MAX], 2), "▂█");
        assert_eq!(sparkline(&[1, 1000], 2), "▂█", "any use shows above empty");
    }
}
