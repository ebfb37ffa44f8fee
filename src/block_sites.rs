//! The sites of a framework cache's blocks by their Python frames (PyTorch's tensors, as its own
//! history or cuguard's record gives them), charged past the program's allocation helper as
//! [`crate::call_path`] charges the report's stacks: for the summary's cache view and `check
//! --held`.

use std::collections::HashMap;

use crate::call_path::{self, Helpers, MAX_PATH};
use crate::sites::Site;

/// The sites of a set of Python frame lists (a cache's live blocks, innermost frame first, as
/// the frameworks record them), each charged as [`resolve`] charges stacks: its frame by the
/// site rules, or, where the lists of one such frame go on through different callers (the
/// program's allocation helper), the first frame past the frames they all share, `caller
/// (file:line) via helper (file:line)`; a named helper is passed over. `None` for an empty list.
/// Each site comes with its path from the helper on (the site's frame first where none).
pub fn frames_sites(
    all: &[&[cuguard_format::PyFrame]],
    helpers: &Helpers,
) -> Vec<Option<(Site, Vec<Site>)>> {
    let paths: Vec<Vec<Site>> = all.iter().map(|frames| python_path(frames)).collect();
    let mut by_site: HashMap<String, Vec<(u64, Vec<Site>)>> = HashMap::new();
    if helpers.found {
        for path in &paths {
            if let Some(first) = path.first() {
                let group = by_site.entry(first.key.clone()).or_default();
                if !group.iter().any(|(_, p)| same_path(p, path)) {
                    group.push((0, path.clone()));
                }
            }
        }
    }
    let shared: HashMap<String, usize> = by_site
        .into_iter()
        .filter_map(|(key, group)| Some((key, call_path::shared_prefix(&group)?)))
        .collect();
    paths
        .into_iter()
        .map(|path| {
            let first = path.first()?;
            let named = path
                .iter()
                .rposition(|f| helpers.names(f))
                .map_or(0, |k| k + 1);
            let at = shared
                .get(first.key.as_str())
                .copied()
                .unwrap_or(0)
                .max(named)
                .min(path.len() - 1);
            if at == 0 {
                return Some((first.clone(), path));
            }
            let helper = path[at - 1].clone();
            let mut place = path[at].clone();
            place.key = format!("{} via {}", place.key, helper.key);
            place.via = Some(Box::new(helper));
            Some((place, path[at - 1..].to_vec()))
        })
        .collect()
}

/// A Python frame list's user frames from its site outward, innermost first, at most
/// [`MAX_PATH`], each as a site.
fn python_path(frames: &[cuguard_format::PyFrame]) -> Vec<Site> {
    if frames.is_empty() {
        return Vec::new();
    }
    let rules = crate::sites::builtin_rules();
    let site_frames: Vec<_> = frames.iter().map(crate::sites::python_site_frame).collect();
    let at = rules
        .find_site_with_kind(&site_frames)
        .map_or(0, |(s, _)| s.index);
    let mut out = Vec::new();
    for (k, (f, sf)) in frames.iter().zip(&site_frames).enumerate().skip(at) {
        if k > at && rules.tier(sf).is_some() {
            continue;
        }
        if let Some(site) = crate::sites::frames_site(std::slice::from_ref(f)) {
            out.push(site);
        }
        if out.len() == MAX_PATH {
            break;
        }
    }
    out
}

fn same_path(a: &[Site], b: &[Site]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.key == y.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(file: &str, line: u32, function: &str) -> cuguard_format::PyFrame {
        cuguard_format::PyFrame {
            file: format!("/src/{file}"),
            line: Some(line),
            function: function.to_string(),
            entry: None,
            display: None,
        }
    }

    #[test]
    fn python_frames_through_a_helper_called_from_two_lines_are_charged_to_each_caller() {
        let a = [frame("m.py", 5, "make"), frame("m.py", 20, "<module>")];
        let b = [frame("m.py", 5, "make"), frame("m.py", 22, "<module>")];
        let c = [frame("m.py", 9, "other"), frame("m.py", 30, "<module>")];
        let all: [&[cuguard_format::PyFrame]; 5] = [&a, &a, &b, &c, &[]];
        let got: Vec<Option<String>> = frames_sites(&all, &Helpers::default())
            .into_iter()
            .map(|s| s.map(|(site, _)| site.label()))
            .collect();
        assert_eq!(
            got,
            [
                Some("<module> (m.py:20) via make (m.py:5)".to_string()),
                Some("<module> (m.py:20) via make (m.py:5)".to_string()),
                Some("<module> (m.py:22) via make (m.py:5)".to_string()),
                Some("other (m.py:9)".to_string()),
                None,
            ]
        );
        // One caller only: the line stays; `none` turns the rule off; a named helper is passed.
        let one: [&[cuguard_format::PyFrame]; 2] = [&a, &a];
        let label = |h: &Helpers, all: &[&[cuguard_format::PyFrame]]| {
            frames_sites(all, h)[0].as_ref().map(|(s, _)| s.label())
        };
        assert_eq!(
            label(&Helpers::default(), &one).as_deref(),
            Some("make (m.py:5)")
        );
        let two: [&[cuguard_format::PyFrame]; 2] = [&a, &b];
        assert_eq!(
            label(&Helpers::from_names(["none"]), &two).as_deref(),
            Some("make (m.py:5)")
        );
        assert_eq!(
            label(&Helpers::from_names(["none", "make"]), &one).as_deref(),
            Some("<module> (m.py:20) via make (m.py:5)")
        );
    }
}
