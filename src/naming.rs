//! Naming a report's frames after the fact, and what depends on the names: each stack's mixed
//! native and Python order, its site, site kind and owner, the leaks' owners and `owners[]`.
//! One typed step, [`name_stacks`], does it for reports and histories alike: the history's reader
//! names a report it holds in its types ([`name_report`]); `cuguard symbolize`
//! (`cli/symbolize.rs`, which reads and writes the files) names a report held as JSON in place
//! ([`symbolize_report`]), so that fields this version does not know are written back as they
//! were.

use std::collections::HashMap;
use std::path::Path;

use cuguard_format::edit::edit_stacks;
use cuguard_format::{MixedRef, OwnerInfo, site_list};
use cuguard_symbolize::Symbolizer;
use cuguard_symbolize::mixed::{Slot, mixed};
use cuguard_symbolize::rules::Rules;
use cuguard_symbolize::site::{Plumbing, SiteFrame};
use serde_json::Value;

use cuguard_format::{Frame, Module, PyFrame, Report, Stack, StackSite};

/// The owner the rules give each (stack id, memory kind) that the leaks name.
type OwnersByKind = HashMap<(u64, String), String>;

/// The memory kinds each stack's leaks are of, in the order first met.
fn kinds_by_stack<'l>(leaks: impl Iterator<Item = (u64, &'l str)>) -> HashMap<u64, Vec<String>> {
    let mut memories: HashMap<u64, Vec<String>> = HashMap::new();
    for (stack, memory) in leaks {
        let m = memories.entry(stack).or_default();
        if !m.iter().any(|x| x == memory) {
            m.push(memory.to_string());
        }
    }
    memories
}

/// Names the frames of a report's or a history's `stacks` (with `modules`' build ids) and
/// recomputes each stack's mixed order, site, site kind and owner (with `plumbing`'s rules);
/// returns the owner of each (stack, memory kind) in `memories`, for the leaks. The one naming
/// step: [`name_report`] and [`symbolize_report`] both go through it.
pub fn name_stacks(
    stacks: &mut [Stack],
    modules: &[Module],
    memories: &HashMap<u64, Vec<String>>,
    symbolizer: &mut Symbolizer,
    plumbing: &Plumbing,
) -> OwnersByKind {
    let rules = plumbing.rules();
    let build_ids: HashMap<&str, Option<&str>> = modules
        .iter()
        .map(|m| (m.path.as_str(), m.build_id.as_deref()))
        .collect();
    let mut owners = OwnersByKind::new();
    for stack in stacks {
        stack.frames = named_frames(std::mem::take(&mut stack.frames), &build_ids, symbolizer);
        let order = call_order(stack);
        stack.mixed = match &order {
            Order::Mixed(slots) => slots
                .iter()
                .map(|s| match *s {
                    Slot::Native(i) => MixedRef {
                        native: Some(i),
                        python: None,
                    },
                    Slot::Python(j) => MixedRef {
                        native: None,
                        python: Some(j),
                    },
                })
                .collect(),
            Order::Split(_) => Vec::new(),
        };
        let slots = order.slots();
        let frames = site_frames(stack, &slots);
        let site = rules.find_site_with_kind(&frames).map(|(site, kind)| {
            let (list, index) = match slots[site.index] {
                Slot::Native(i) => (site_list::FRAMES, i),
                Slot::Python(j) => (site_list::PYTHON, j),
            };
            StackSite {
                in_: list.into(),
                index,
                fingerprint: site.fingerprint,
                kind: Some(kind.as_str().into()),
            }
        });
        let kinds = memories.get(&stack.id).map(Vec::as_slice).unwrap_or(&[]);
        // The stack's own owner: for the memory kind its leaks share, else for none.
        let shared = match kinds {
            [one] => Some(one.as_str()),
            _ => None,
        };
        let owner = rules.owner(&frames, shared).id.clone();
        for memory in kinds {
            let owner = rules.owner(&frames, Some(memory)).id.clone();
            owners.insert((stack.id, memory.clone()), owner);
        }
        drop(frames);
        stack.site = site;
        stack.owner = Some(owner);
    }
    owners
}

/// `frames` with each native frame not yet named replaced by what the symbolizer finds there
/// (inlined calls first, each marked `inlined`).
fn named_frames(
    frames: Vec<Frame>,
    build_ids: &HashMap<&str, Option<&str>>,
    symbolizer: &mut Symbolizer,
) -> Vec<Frame> {
    let mut named = Vec::with_capacity(frames.len());
    for frame in frames {
        if frame.function.is_some() || frame.module.is_empty() {
            named.push(frame);
            continue;
        }
        let build_id = build_ids.get(&*frame.module).copied().flatten();
        let found = symbolizer.symbolize(Path::new(&*frame.module), build_id, frame.offset.0);
        if found.is_empty() {
            named.push(frame);
            continue;
        }
        let last = found.len() - 1;
        for (i, f) in found.into_iter().enumerate() {
            named.push(Frame {
                function: f.function.map(Into::into),
                file: f.file.map(Into::into),
                line: f.line,
                inlined: (i < last).then_some(true),
                ..frame.clone()
            });
        }
    }
    named
}

/// Names a report held in its types ([`name_stacks`]), then its leaks' owners and `owners[]`
/// as [`symbolize_report`] does. The history's reader names its stacks through this.
pub fn name_report(report: &mut Report, symbolizer: &mut Symbolizer, plumbing: &Plumbing) {
    let memories = kinds_by_stack(
        report
            .leaks
            .iter()
            .filter_map(|l| Some((l.stack?, l.memory.as_str()))),
    );
    let owners = name_stacks(
        &mut report.stacks,
        &report.modules,
        &memories,
        symbolizer,
        plumbing,
    );
    let mut named: Vec<String> = Vec::new();
    for leak in &mut report.leaks {
        let Some(stack) = leak.stack else {
            continue;
        };
        let key = (stack, leak.memory.as_str().to_string());
        if let (Some(owner), Some(slot)) = (owners.get(&key), leak.owner.as_mut()) {
            slot.clone_from(owner);
            if !named.contains(owner) {
                named.push(owner.clone());
            }
        }
    }
    for owner in report.stacks.iter().filter_map(|s| s.owner.as_ref()) {
        if !named.contains(owner) {
            named.push(owner.clone());
        }
    }
    let known: Vec<String> = report.owners.iter().map(|o| o.id.clone()).collect();
    let described = named
        .iter()
        .filter(|id| !known.contains(id))
        .filter_map(|id| owner_info(plumbing.rules(), id));
    report.owners.extend(described);
}

/// `owners[]`'s description of the owner `id`, by the rules.
fn owner_info(rules: &Rules, id: &str) -> Option<OwnerInfo> {
    let owner = rules.owner_by_id(id)?;
    Some(OwnerInfo {
        id: owner.id.clone(),
        kind: owner.kind.as_str().into(),
        label: owner.label.clone(),
        hint: owner.hint.clone(),
    })
}

/// Names the frames of one process's report held as JSON, for `cuguard symbolize`, which
/// writes the file back: the stacks go through [`name_stacks`] in their types; the leaks'
/// owners and `owners[]` are set in place, and every other field is kept as it is.
pub fn symbolize_report(report: &mut Value, symbolizer: &mut Symbolizer, plumbing: &Plumbing) {
    let leaks = report.get("leaks").and_then(Value::as_array);
    let memories = kinds_by_stack(leaks.into_iter().flatten().filter_map(|leak| {
        Some((
            leak.get("stack").and_then(Value::as_u64)?,
            leak.get("memory").and_then(Value::as_str)?,
        ))
    }));
    let mut owners = OwnersByKind::new();
    // The report was read as a report first, so its stacks are well-formed.
    let _ = edit_stacks(report, |stacks, modules| {
        owners = name_stacks(stacks, modules, &memories, symbolizer, plumbing);
    });
    set_leak_owners(report, &owners, plumbing.rules());
}

/// Rewrites the owner of each leak that has one (and a stack), and describes every owner the
/// stacks and leaks name in `owners[]` (keeping the descriptions already there).
fn set_leak_owners(report: &mut Value, owners: &OwnersByKind, rules: &Rules) {
    let mut named: Vec<String> = Vec::new();
    if let Some(leaks) = report.get_mut("leaks").and_then(Value::as_array_mut) {
        for leak in leaks {
            let key = match (
                leak.get("stack").and_then(Value::as_u64),
                leak.get("memory").and_then(Value::as_str),
            ) {
                (Some(stack), Some(memory)) => (stack, memory.to_string()),
                _ => continue,
            };
            // Only where the report has leaks' owners: without them, readers take the stack's.
            if let (Some(owner), Some(slot)) = (owners.get(&key), leak.get_mut("owner")) {
                *slot = Value::String(owner.clone());
                if !named.contains(owner) {
                    named.push(owner.clone());
                }
            }
        }
    }
    for stack in report
        .get("stacks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(owner) = stack.get("owner").and_then(Value::as_str)
            && !named.iter().any(|n| n == owner)
        {
            named.push(owner.to_string());
        }
    }
    if named.is_empty() {
        return;
    }
    let Some(obj) = report.as_object_mut() else {
        return;
    };
    let list = obj
        .entry("owners")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(list) = list.as_array_mut() else {
        return;
    };
    let known: Vec<String> = list
        .iter()
        .filter_map(|o| o.get("id").and_then(Value::as_str).map(str::to_string))
        .collect();
    for id in named {
        if known.contains(&id) {
            continue;
        }
        if let Some(v) = owner_info(rules, &id).and_then(|i| serde_json::to_value(i).ok()) {
            list.push(v);
        }
    }
}

/// The order the site and owner rules read a stack in.
enum Order {
    /// The mixed native and Python order (`cuguard_symbolize::mixed`), when the Python frames
    /// carry entry marks.
    Mixed(Vec<Slot>),
    /// Otherwise, as the shim picks it: native frames above the Python interpreter, then the
    /// Python frames, then the rest of the native frames.
    Split(Vec<Slot>),
}

impl Order {
    fn slots(self) -> Vec<Slot> {
        match self {
            Order::Mixed(s) | Order::Split(s) => s,
        }
    }
}

fn call_order(stack: &Stack) -> Order {
    let native: Vec<SiteFrame<'_>> = stack.frames.iter().map(crate::sites::site_frame).collect();
    let entries: Vec<Option<bool>> = stack.python.iter().map(|p| p.entry).collect();
    if let Some(slots) = mixed(&native, &entries) {
        return Order::Mixed(slots);
    }
    Order::Split(split_order(&stack.frames, &stack.python))
}

/// The frames of `stack` in the order of `slots`, for the rules.
fn site_frames<'s>(stack: &'s Stack, slots: &[Slot]) -> Vec<SiteFrame<'s>> {
    slots
        .iter()
        .map(|s| match *s {
            Slot::Native(i) => crate::sites::site_frame(&stack.frames[i]),
            Slot::Python(j) => crate::sites::python_site_frame(&stack.python[j]),
        })
        .collect()
}

fn is_interpreter(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    name.starts_with("libpython") || name.starts_with("python")
}

/// The order the shim reads a stack in without entry marks: native frames above the Python
/// interpreter, then the Python frames, then the rest of the native frames.
fn split_order(frames: &[Frame], python: &[PyFrame]) -> Vec<Slot> {
    let split = if python.is_empty() {
        frames.len()
    } else {
        frames
            .iter()
            .position(|f| is_interpreter(&f.module))
            .unwrap_or(frames.len())
    };
    let mut order: Vec<Slot> = (0..split).map(Slot::Native).collect();
    order.extend((0..python.len()).map(Slot::Python));
    order.extend((split..frames.len()).map(Slot::Native));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report named in its types and the same report named as JSON come out the same: one
    /// naming step behind both.
    #[test]
    fn a_typed_report_is_named_as_its_json_is() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/attribution.json");
        let mut value: Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for stack in value["stacks"].as_array_mut().unwrap() {
            let s = stack.as_object_mut().unwrap();
            s.insert("site".into(), Value::Null);
            s.remove("owner");
            s.remove("mixed");
        }
        for leak in value["leaks"].as_array_mut().unwrap() {
            leak["owner"] = Value::from("stale");
        }
        value.as_object_mut().unwrap().remove("owners");
        let mut typed: Report = serde_json::from_value(value.clone()).unwrap();
        symbolize_report(&mut value, &mut Symbolizer::new(None), &Plumbing::builtin());
        name_report(&mut typed, &mut Symbolizer::new(None), &Plumbing::builtin());
        let from_json: Report = serde_json::from_value(value).unwrap();
        assert!(from_json.stacks.iter().all(|s| s.owner.is_some()));
        assert_eq!(typed.stacks, from_json.stacks);
        assert_eq!(typed.leaks, from_json.leaks);
        assert_eq!(typed.owners, from_json.owners);
    }

    /// The attribution fixture's stacks are named already: stripped of what depends on the
    /// names (leaks' owners made stale), symbolizing gives back the site kinds, owners and mixed
    /// orders it holds.
    #[test]
    fn recomputes_site_kinds_owners_and_mixed_orders() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/attribution.json");
        let want: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut got = want.clone();
        for stack in got["stacks"].as_array_mut().unwrap() {
            let s = stack.as_object_mut().unwrap();
            s.insert("site".into(), Value::Null);
            s.remove("owner");
            s.remove("mixed");
        }
        for leak in got["leaks"].as_array_mut().unwrap() {
            leak["owner"] = Value::from("stale");
        }
        got.as_object_mut().unwrap().remove("owners");
        let mut symbolizer = Symbolizer::new(None);
        symbolize_report(&mut got, &mut symbolizer, &Plumbing::builtin());
        for (g, w) in got["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .zip(want["stacks"].as_array().unwrap())
        {
            let id = &w["id"];
            for key in ["in", "index", "kind"] {
                assert_eq!(g["site"][key], w["site"][key], "stack {id} site {key}");
            }
            assert_eq!(g["owner"], w["owner"], "stack {id} owner");
            assert_eq!(g.get("mixed"), w.get("mixed"), "stack {id} mixed");
        }
        assert_eq!(got["leaks"], want["leaks"], "leaks' owners");
        let ids = |v: &Value| {
            let mut ids: Vec<String> = v["owners"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o["id"].as_str().unwrap().to_string())
                .collect();
            ids.sort();
            ids
        };
        assert_eq!(ids(&got), ids(&want));
        let torch = got["owners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["id"] == "pytorch_caching_allocator")
            .unwrap();
        assert_eq!(torch["kind"], "framework_cache");
        assert!(
            torch["hint"]
                .as_str()
                .unwrap()
                .contains("PYTORCH_NO_CUDA_MEMORY_CACHING")
        );
    }

    #[test]
    fn owner_rules_given_on_the_command_line_apply() {
        let mut rules = Plumbing::builtin().into_rules();
        rules
            .add_owner_spec("my_arena:framework_cache=function:forward")
            .unwrap();
        let plumbing = Plumbing::from(rules);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/attribution.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // Stack 3 allocates for forward (model.py:40) through PyTorch's allocator, whose frame
        // comes first from the allocation outward: still PyTorch's; stack 2 has no such frame.
        v["stacks"][1]["python"][0]["function"] = Value::from("forward");
        symbolize_report(&mut v, &mut Symbolizer::new(None), &plumbing);
        assert_eq!(v["stacks"][1]["owner"], "my_arena");
        assert_eq!(v["stacks"][2]["owner"], "pytorch_caching_allocator");
        let arena = v["owners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["id"] == "my_arena")
            .expect("described");
        assert_eq!(arena["kind"], "framework_cache");
    }
}
