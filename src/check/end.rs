//! What a Python program's end view counts in a check ([`end_items`]): the leaks it is checked
//! on when its end was recorded.

use super::places::Place;
use crate::sites::Site;
use cuguard_format::{HeldClass, Leak, LeakState, PyView};

/// A leak to condense: the leak, its bytes, its count, and its site and place when it is not
/// the site of its stack (a live cache block's, found from its Python frames).
pub(crate) type Item = (Leak, u64, u64, Option<(Site, Place)>);

/// What a Python program's end view counts, as leaks with their bytes, count and, for a live
/// cache block, the line that allocated it: lost and unclassified allocations, library ones
/// (their owner decides), and with `held` the held allocations and the live cache blocks
/// Python objects hold. What is held but not counted adds up in `not_counted`.
pub(crate) fn end_items(
    view: &PyView,
    held: bool,
    not_counted: &mut Option<(u64, u64)>,
) -> Vec<Item> {
    let mut out = Vec::new();
    let mut skipped = (0u64, 0u64);
    // The held live cache blocks' sites, charged past the program's allocation helper as every
    // site is (`crate::call_path`).
    let held_blocks: Vec<&cuguard_format::PyBlock> = view
        .allocations
        .iter()
        .filter(|a| held && a.class == HeldClass::Cache)
        .flat_map(|a| &a.blocks)
        .filter(|b| b.state == "live" && !b.holders.is_empty())
        .collect();
    let frames: Vec<&[cuguard_format::PyFrame]> =
        held_blocks.iter().map(|b| b.frames.as_slice()).collect();
    let mut sites: std::collections::HashMap<u64, Site> = held_blocks
        .iter()
        .zip(crate::block_sites::frames_sites(
            &frames,
            crate::call_path::helpers(),
        ))
        .filter_map(|(b, s)| Some((b.address.0, s?.0)))
        .collect();
    for a in &view.allocations {
        let leak = Leak {
            allocation: a.allocation.clone(),
            state: LeakState::LiveAtExit,
            handle: None,
            owner: a.owner.clone(),
        };
        match a.class {
            HeldClass::Held if !held => {
                skipped = (skipped.0.saturating_add(a.size), skipped.1 + 1);
            }
            // The framework frees it (numba's queue of deferred frees): never the program's leak.
            HeldClass::PendingFree => {}
            HeldClass::Cache => {
                for b in a
                    .blocks
                    .iter()
                    .filter(|b| b.state == "live" && !b.holders.is_empty())
                {
                    if !held {
                        skipped = (skipped.0.saturating_add(b.size), skipped.1 + 1);
                        continue;
                    }
                    let mut block = leak.clone();
                    block.address = b.address;
                    block.size = b.size;
                    block.requested = b.size;
                    // The program's: a tensor or array it keeps.
                    block.owner = Some("program".into());
                    let site = sites
                        .remove(&b.address.0)
                        .map(|s| (Place::of_python(&b.frames, &s), s))
                        .map(|(p, s)| (s, p));
                    out.push((block, b.size, 1, site));
                }
                // The segment itself is the cache's: counted only where `--owners` names it.
                out.push((leak, a.size, 1, None));
            }
            _ => out.push((leak, a.size, 1, None)),
        }
    }
    if !held {
        *not_counted = Some(skipped);
    }
    out
}
