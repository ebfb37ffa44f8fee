//! The sites across processes, as the summary adds them up ([`Overall`]): in compact tables
//! (see [`crate::compact`]), so that a site costs its key's bytes and a few words whatever the
//! number of sites and processes.
//!
//! Each site is numbered by its key in a [`SiteTable`], which keeps how the first process that
//! leaked there shows it (location, label, kind), and one row per number holds its totals
//! (bytes, leaks, processes, the bytes of its owner) and its owner; the mixed stacks of the few
//! sites that have one are kept apart. [`Overall::site`] gives a site back in full
//! ([`OverallSite`]), for the few that are printed.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;

use serde::Serialize;

use super::report::SiteSummary;
use crate::compact::{Column, SiteTable};
use crate::owners::OwnerKind;
use crate::sites::SiteKind;

/// One site across all processes.
#[derive(Clone, Debug, Serialize)]
pub struct OverallSite {
    /// The site's key (see [`crate::sites`]).
    pub site: String,
    /// `file:line` of the site, when known.
    pub location: Option<String>,
    /// Bytes leaked there.
    pub leaked_bytes: u64,
    /// Leaks there.
    pub leaks: u64,
    /// How many processes leaked there.
    pub processes: u64,
    /// The site for people, its location once (see [`crate::sites::Site::label`]).
    pub label: String,
    /// What kind of frame it is, when the report says.
    pub kind: Option<SiteKind>,
    /// Who holds most of its bytes: owner id (as the first process that leaked there says).
    pub owner: String,
    /// The owner for people.
    pub owner_label: String,
    /// The owner's kind.
    pub owner_kind: OwnerKind,
    /// Of its bytes, how many that owner holds, summed over the processes that name the same
    /// owner for it (fewer than `leaked_bytes` when other owners hold the rest).
    pub owner_bytes: u64,
    /// Its largest stack's frames in the mixed native and Python order, when it has Python
    /// frames.
    pub stack: Vec<String>,
}

/// One site's totals.
#[derive(Clone, Copy, Debug)]
struct Row {
    leaked_bytes: u64,
    leaks: u64,
    owner_bytes: u64,
    processes: u32,
    /// Its owner: number in `owners`.
    owner: u32,
}

/// An owner as a site names it: id, label (numbers among the texts) and kind.
type OwnerOf = (u32, u32, OwnerKind);

/// The sites across processes (see the module doc).
#[derive(Debug, Default)]
pub struct Overall {
    table: SiteTable,
    rows: Column<Row>,
    owners: Vec<OwnerOf>,
    owner_numbers: HashMap<OwnerOf, u32>,
    /// Sites whose first process gave a mixed stack: (start, length) in `chains`.
    stacks: HashMap<u32, (u32, u32)>,
    chains: Column<u32>,
}

impl Overall {
    /// No sites yet.
    pub fn new() -> Overall {
        Overall::default()
    }

    /// How many distinct sites.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds one process's site; returns the site's number.
    pub fn add(&mut self, s: &SiteSummary) -> u32 {
        let (id, new) = self
            .table
            .site(&s.site, s.location.as_deref(), &s.label, s.kind);
        let owner_id = self.table.texts().id(&s.owner);
        if new {
            let owner: OwnerOf = (
                owner_id,
                self.table.texts().id(&s.owner_label),
                s.owner_kind,
            );
            let n = self.owners.len() as u32;
            let owner = *self.owner_numbers.entry(owner).or_insert_with(|| {
                self.owners.push(owner);
                n
            });
            if !s.stack.is_empty() {
                let start = self.chains.len() as u32;
                for entry in &s.stack {
                    let t = self.table.texts().id(entry);
                    self.chains.push(t);
                }
                self.stacks.insert(id, (start, s.stack.len() as u32));
            }
            self.rows.push(Row {
                leaked_bytes: 0,
                leaks: 0,
                owner_bytes: 0,
                processes: 0,
                owner,
            });
        }
        let owners = &self.owners;
        let row = self.rows.get_mut(id as usize);
        if owners[row.owner as usize].0 == owner_id {
            row.owner_bytes = row.owner_bytes.saturating_add(s.owner_bytes);
        }
        row.leaked_bytes = row.leaked_bytes.saturating_add(s.leaked_bytes);
        row.leaks += s.leaks;
        row.processes = row.processes.saturating_add(1);
        id
    }

    /// Site `id`'s key.
    pub fn key(&self, id: u32) -> &str {
        self.table.key(id)
    }

    /// Site `id`'s label, as its first process gave it.
    pub fn label(&self, id: u32) -> Cow<'_, str> {
        self.table.label(id)
    }

    /// Whether `label` is site `id`'s label.
    pub fn label_is(&self, id: u32, label: &str) -> bool {
        self.table.label_is(id, label)
    }

    /// Most bytes first, then most leaks, then by key.
    pub fn order(&self, a: u32, b: u32) -> Ordering {
        let (x, y) = (self.rows.get(a as usize), self.rows.get(b as usize));
        y.leaked_bytes
            .cmp(&x.leaked_bytes)
            .then(y.leaks.cmp(&x.leaks))
            .then_with(|| self.key(a).cmp(self.key(b)))
    }

    /// The numbers of the `n` first sites in [`Overall::order`], in that order.
    pub fn top(&self, n: usize) -> Vec<u32> {
        top_by(0..self.len() as u32, n, |&a, &b| self.order(a, b))
    }

    /// Site `id` in full.
    pub fn site(&self, id: u32) -> OverallSite {
        let row = self.rows.get(id as usize);
        let (owner, owner_label, owner_kind) = self.owners[row.owner as usize];
        let stack = match self.stacks.get(&id) {
            Some(&(start, len)) => (start..start + len)
                .map(|i| self.table.text(*self.chains.get(i as usize)).to_string())
                .collect(),
            None => Vec::new(),
        };
        OverallSite {
            site: self.key(id).to_string(),
            location: self.table.location(id).map(str::to_string),
            leaked_bytes: row.leaked_bytes,
            leaks: row.leaks,
            processes: u64::from(row.processes),
            label: self.label(id).into_owned(),
            kind: self.table.kind(id),
            owner: self.table.text(owner).to_string(),
            owner_label: self.table.text(owner_label).to_string(),
            owner_kind,
            owner_bytes: row.owner_bytes,
            stack,
        }
    }
}

/// The `n` first of `items` in `order`, in that order (all of them, sorted, when `n` is at
/// least their number): a partial selection, so that many items cost no full sort.
pub fn top_by<T>(
    items: impl Iterator<Item = T>,
    n: usize,
    order: impl Fn(&T, &T) -> Ordering,
) -> Vec<T> {
    let mut v: Vec<T> = items.collect();
    if n == 0 {
        return Vec::new();
    }
    if n < v.len() {
        v.select_nth_unstable_by(n - 1, &order);
        v.truncate(n);
    }
    v.sort_by(&order);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(
        key: &str,
        label: &str,
        location: Option<&str>,
        bytes: u64,
        owner: &str,
    ) -> SiteSummary {
        SiteSummary {
            site: key.into(),
            location: location.map(Into::into),
            leaked_bytes: bytes,
            leaks: 1,
            apis: Vec::new(),
            label: label.into(),
            kind: None,
            owner: owner.into(),
            owner_label: format!("{owner}'s"),
            owner_kind: OwnerKind::Program,
            owner_bytes: bytes,
            stack: if bytes == 7 {
                vec!["a".into(), "b (x.py:1)".into()]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn sites_come_back_as_their_first_process_gave_them() {
        let mut o = Overall::new();
        let a = o.add(&site("f", "f (x.c:1)", Some("x.c:1"), 10, "program"));
        let b = o.add(&site(
            "g (y.py:2)",
            "g (y.py:2)",
            Some("y.py:2"),
            7,
            "program",
        ));
        let c = o.add(&site("h", "framework: h", None, 10, "cublas"));
        // Another process: the same key, another owner and label (the first stay).
        assert_eq!(o.add(&site("f", "f", Some("x.c:1"), 5, "cublas")), a);
        assert_eq!(o.len(), 3);
        let f = o.site(a);
        assert_eq!(
            (
                f.label.as_str(),
                f.location.as_deref(),
                f.leaked_bytes,
                f.owner_bytes
            ),
            ("f (x.c:1)", Some("x.c:1"), 15, 10)
        );
        assert_eq!(
            (f.processes, f.owner.as_str(), f.owner_label.as_str()),
            (2, "program", "program's")
        );
        assert_eq!(o.site(b).label, "g (y.py:2)");
        assert_eq!(o.site(b).stack, ["a", "b (x.py:1)"]);
        assert_eq!(o.site(c).label, "framework: h");
        assert!(o.label_is(a, "f (x.c:1)") && !o.label_is(a, "f"));
        assert!(o.label_is(c, "framework: h"));
        // 15 bytes, then 10 (h), then 7.
        assert_eq!(o.top(10), [a, c, b]);
        assert_eq!(o.top(2), [a, c]);
        assert!(o.top(0).is_empty());
    }

    #[test]
    fn top_by_is_a_sorted_prefix() {
        let items: Vec<u32> = (0..1000).map(|i| (i * 7919) % 1000).collect();
        for n in [0, 1, 5, 999, 1000, 5000] {
            let got = top_by(items.iter().copied(), n, |a, b| b.cmp(a));
            let want: Vec<u32> = (0..1000).rev().take(n).collect();
            assert_eq!(got, want);
        }
    }
}
