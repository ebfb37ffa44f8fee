//! Qualified names for functions that DWARF names only by their last path segment.
//!
//! A subprogram or inlined-subroutine DIE often carries only `DW_AT_name` (`malloc_async`,
//! `alloc<f32>`), and the rest of the name lives elsewhere: in a `DW_AT_linkage_name` on the DIE
//! or on the DIE its `DW_AT_abstract_origin` or `DW_AT_specification` points to (possibly in
//! another unit), or in the namespace and type DIEs that enclose the declaring DIE.
//! [`DwarfNames::qualified`] follows that chain: the first linkage name found wins (demangled);
//! else the path of the scopes around the last DIE of the chain (the declaration, or the
//! abstract instance) is put before the name.
//!
//! A Rust unit built with line tables only has no namespace DIEs; [`DwarfNames::closure_path`]
//! still names its closures from the closure environments the unit's other names mention, and
//! [`DwarfNames::rust_crate`] tells `symbol_names` which crate a frame is from.
//!
//! DWARF has no parent links, so each unit's scopes (namespace, class, structure, union,
//! enumeration and interface DIEs, as ranges of `.debug_info` offsets) are read in one pass over
//! the unit the first time a scope in it is asked, and kept, as are the parsed units and the list
//! of unit offsets. The pass is of the same order as the one `addr2line` makes to find the
//! unit's functions.

use std::collections::HashMap;
use std::sync::Arc;

use crate::demangle::demangle;

pub(crate) type Reader = gimli::EndianSlice<'static, gimli::RunTimeEndian>;

/// How many `DW_AT_abstract_origin`/`DW_AT_specification` links are followed.
const MAX_CHAIN: usize = 16;
/// How many functions deep a name is looked for (a lambda in a function in a function…).
const MAX_NESTING: usize = 4;

/// A namespace, type or function DIE: the `.debug_info` offsets of it and its descendants.
struct Scope {
    start: usize,
    /// One past the last offset of its descendants.
    end: usize,
    /// `DW_AT_name` of a namespace or type; `None` for a function (named by
    /// [`DwarfNames::qualified`]) and for an unnamed type.
    name: Option<Reader>,
    function: bool,
    /// Index of the enclosing scope, if any.
    parent: Option<u32>,
}

struct UnitInfo {
    unit: gimli::Unit<Reader>,
    /// Sorted by `start` (DFS order); built when first needed.
    scopes: Option<Vec<Scope>>,
    /// Closure number → the paths of the functions whose closure environment of that number
    /// the unit's DIE names mention (`a::f::{closure_env#3}` → 3 → `a::f`); built when first
    /// needed.
    closure_envs: Option<HashMap<u32, Vec<String>>>,
}

/// What one DIE says about its name.
#[derive(Default)]
struct DieNames {
    linkage: Option<Reader>,
    name: Option<Reader>,
    /// The `.debug_info` offset `DW_AT_abstract_origin` or `DW_AT_specification` points to.
    next: Option<usize>,
}

/// Qualified function names of one module's DWARF, with the per-unit tables they need.
pub(crate) struct DwarfNames {
    dwarf: Arc<gimli::Dwarf<Reader>>,
    /// `.debug_info` offsets of the unit headers, sorted; read when first needed.
    unit_starts: Option<Vec<usize>>,
    /// By unit start; `None`: the unit could not be parsed.
    units: HashMap<usize, Option<UnitInfo>>,
}

impl DwarfNames {
    pub(crate) fn new(dwarf: Arc<gimli::Dwarf<Reader>>) -> DwarfNames {
        DwarfNames {
            dwarf,
            unit_starts: None,
            units: HashMap::new(),
        }
    }

    /// The qualified name of the function whose (subprogram or inlined-subroutine) DIE is at
    /// `die`, a `.debug_info` offset: a demangled linkage name, or `scope::…::name`. `None` when
    /// DWARF knows neither (a C function, or a unit built with line tables only).
    pub(crate) fn qualified(&mut self, die: usize) -> Option<String> {
        self.qualified_at_depth(die, 0)
    }

    fn qualified_at_depth(&mut self, die: usize, nesting: usize) -> Option<String> {
        let mut chain: Vec<usize> = Vec::new();
        let mut name: Option<Reader> = None;
        let mut at = die;
        while chain.len() < MAX_CHAIN && !chain.contains(&at) {
            let d = self.die_names(at)?;
            if let Some(linkage) = d.linkage {
                return Some(demangle(&linkage.to_string_lossy()).into_owned());
            }
            name = name.or(d.name);
            chain.push(at);
            match d.next {
                Some(next) => at = next,
                None => break,
            }
        }
        let name = name?.to_string_lossy().into_owned();
        // The last DIE of the chain is where the function is declared (an inlined
        // subroutine's own DIE sits inside its caller).
        let path = self.scope_path(*chain.last()?, nesting)?;
        Some(format!("{path}::{name}"))
    }

    /// The crate of a Rust frame whose DIE is at `die` and whose source file is `file`: the
    /// crate of the unit where the function is declared (the last DIE of the chain
    /// [`DwarfNames::qualified`] follows), from the unit's name (rustc names a unit
    /// `<crate root file>/@/<crate>.<hash>-cgu.<n>`). `None` unless `file` is in that crate
    /// (see [`in_crate`]): a unit also declares the generic functions and closures of other
    /// crates that were inlined into it.
    pub(crate) fn rust_crate(&mut self, die: usize, file: Option<&str>) -> Option<String> {
        let at = self.chain_end(die)?;
        let start = self.unit_start(at)?;
        let unit = &self.unit(start)?.unit;
        if !in_crate(unit, file?) {
            return None;
        }
        let name = unit.name?.to_string_lossy().into_owned();
        let (_, cgu) = name.rsplit_once("/@/")?;
        let krate = cgu.split('.').next()?;
        (!krate.is_empty()).then(|| krate.to_owned())
    }

    /// A Rust closure's path, for a unit without namespace DIEs (built with line tables only):
    /// `{closure#3}` → `cudarc_leaks::main::{closure#3}`. The closure is the function whose
    /// closure environment of the same number the unit's other DIE names mention
    /// (`…<cudarc_leaks::main::{closure_env#3}>`), when exactly one function of the unit's crate
    /// has one, and the frame's source file `file` is in that crate (see
    /// [`DwarfNames::rust_crate`]).
    pub(crate) fn closure_path(
        &mut self,
        die: usize,
        name: &str,
        file: Option<&str>,
    ) -> Option<String> {
        let number: u32 = name
            .strip_prefix("{closure#")?
            .split('}')
            .next()?
            .parse()
            .ok()?;
        let krate = self.rust_crate(die, file)?;
        let at = self.chain_end(die)?;
        let start = self.unit_start(at)?;
        let dwarf = self.dwarf.clone();
        let info = self.unit(start)?;
        let envs = info
            .closure_envs
            .get_or_insert_with(|| read_closure_envs(&dwarf, &info.unit));
        let prefix = format!("{krate}::");
        let mut paths = envs.get(&number)?.iter().filter(|p| p.starts_with(&prefix));
        let path = paths.next()?;
        if paths.next().is_some() {
            return None;
        }
        Some(format!("{path}::{name}"))
    }

    /// The last DIE of the `DW_AT_abstract_origin`/`DW_AT_specification` chain from `die`.
    fn chain_end(&mut self, die: usize) -> Option<usize> {
        let mut at = die;
        for _ in 0..MAX_CHAIN {
            match self.die_names(at)?.next {
                Some(next) if next != at => at = next,
                _ => break,
            }
        }
        Some(at)
    }

    /// The start of the unit holding `offset`.
    fn unit_start(&mut self, offset: usize) -> Option<usize> {
        let dwarf = &self.dwarf;
        let starts = self.unit_starts.get_or_insert_with(|| {
            let mut v = Vec::new();
            let mut headers = dwarf.units();
            while let Ok(Some(h)) = headers.next() {
                v.push(h.offset().0);
            }
            v.sort_unstable();
            v
        });
        let i = starts.partition_point(|&s| s <= offset).checked_sub(1)?;
        Some(starts[i])
    }

    fn unit(&mut self, start: usize) -> Option<&mut UnitInfo> {
        let dwarf = &self.dwarf;
        self.units
            .entry(start)
            .or_insert_with(|| {
                let header = dwarf
                    .debug_info
                    .header_from_offset(gimli::DebugInfoOffset(start))
                    .ok()?;
                let unit = dwarf.unit(header).ok()?;
                Some(UnitInfo {
                    unit,
                    scopes: None,
                    closure_envs: None,
                })
            })
            .as_mut()
    }

    /// The names and the next link of the DIE at `offset`.
    fn die_names(&mut self, offset: usize) -> Option<DieNames> {
        let start = self.unit_start(offset)?;
        let dwarf = self.dwarf.clone();
        let unit = &self.unit(start)?.unit;
        let mut entries = unit
            .entries_raw(Some(gimli::UnitOffset(offset - start)))
            .ok()?;
        let abbrev = entries.read_abbreviation().ok()??;
        let mut out = DieNames::default();
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec).ok()?;
            match attr.name() {
                gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                    out.linkage = dwarf.attr_string(unit, attr.value()).ok();
                }
                gimli::DW_AT_name => out.name = dwarf.attr_string(unit, attr.value()).ok(),
                gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => {
                    out.next = match attr.value() {
                        gimli::AttributeValue::UnitRef(o) => Some(start + o.0),
                        gimli::AttributeValue::DebugInfoRef(o) => Some(o.0),
                        _ => None,
                    };
                }
                _ => {}
            }
        }
        Some(out)
    }

    /// `a::b::C`: the names of the scopes enclosing the DIE at `offset`, outermost first; an
    /// enclosing function gives its qualified name (`ns::run(int)::{unnamed type}` for a C++
    /// lambda's class). `None` when it has none.
    fn scope_path(&mut self, offset: usize, nesting: usize) -> Option<String> {
        let start = self.unit_start(offset)?;
        let dwarf = self.dwarf.clone();
        let info = self.unit(start)?;
        let scopes = info
            .scopes
            .get_or_insert_with(|| read_scopes(&dwarf, &info.unit));
        // The last scope starting at or before `offset`, then its parents, until one contains it.
        let mut i = scopes
            .partition_point(|s| s.start <= offset)
            .checked_sub(1)?;
        while scopes[i].end <= offset || scopes[i].start == offset {
            i = scopes[i].parent? as usize;
        }
        // Innermost first: a name, or the offset of a function to name.
        let mut parts: Vec<Result<String, usize>> = Vec::new();
        let mut at = Some(i as u32);
        while let Some(j) = at {
            let s = &scopes[j as usize];
            if s.function {
                parts.push(Err(s.start));
                // The function's name is qualified already.
                break;
            }
            parts.push(Ok(match s.name {
                Some(n) => n.to_string_lossy().into_owned(),
                None => "{unnamed type}".to_owned(),
            }));
            at = s.parent;
        }
        let mut names: Vec<String> = Vec::with_capacity(parts.len());
        for part in parts.into_iter().rev() {
            match part {
                Ok(n) => names.push(n),
                Err(f) if nesting < MAX_NESTING => {
                    names.push(self.qualified_at_depth(f, nesting + 1)?);
                }
                Err(_) => return None,
            }
        }
        (!names.is_empty()).then(|| names.join("::"))
    }
}

fn is_scope(tag: gimli::DwTag) -> bool {
    matches!(
        tag,
        gimli::DW_TAG_namespace
            | gimli::DW_TAG_subprogram
            | gimli::DW_TAG_class_type
            | gimli::DW_TAG_structure_type
            | gimli::DW_TAG_union_type
            | gimli::DW_TAG_enumeration_type
            | gimli::DW_TAG_interface_type
    )
}

/// One pass over a unit's DIEs, keeping the scopes. Stops (keeping what it found) at the first
/// DIE it cannot read.
fn read_scopes(dwarf: &gimli::Dwarf<Reader>, unit: &gimli::Unit<Reader>) -> Vec<Scope> {
    let start = unit.header.offset().0;
    let mut out: Vec<Scope> = Vec::new();
    // The scopes whose descendants are being read: (depth of the scope's DIE, index).
    let mut open: Vec<(isize, u32)> = Vec::new();
    let Ok(mut entries) = unit.entries_raw(None) else {
        return out;
    };
    while !entries.is_empty() {
        let depth = entries.next_depth();
        let offset = start + entries.next_offset().0;
        let abbrev = match entries.read_abbreviation() {
            Ok(Some(a)) => a,
            Ok(None) => continue,
            Err(_) => break,
        };
        while let Some(&(d, i)) = open.last()
            && d >= depth
        {
            out[i as usize].end = offset;
            open.pop();
        }
        let function = abbrev.tag() == gimli::DW_TAG_subprogram;
        if !is_scope(abbrev.tag()) || (function && !abbrev.has_children()) {
            if entries.skip_attributes(abbrev.attributes()).is_err() {
                break;
            }
            continue;
        }
        let mut name = None;
        for spec in abbrev.attributes() {
            let Ok(attr) = entries.read_attribute(*spec) else {
                return close(out, open);
            };
            if attr.name() == gimli::DW_AT_name && !function {
                name = dwarf.attr_string(unit, attr.value()).ok();
            }
        }
        if name.is_none() && abbrev.tag() == gimli::DW_TAG_namespace {
            name = Some(gimli::EndianSlice::new(
                b"(anonymous namespace)",
                gimli::RunTimeEndian::default(),
            ));
        }
        let index = out.len() as u32;
        out.push(Scope {
            start: offset,
            end: offset + 1,
            name,
            function,
            parent: open.last().map(|&(_, i)| i),
        });
        if abbrev.has_children() {
            open.push((depth, index));
        }
    }
    close(out, open)
}

/// Whether `file` is in the crate a Rust unit was compiled from: under the unit's compilation
/// directory (cargo's package directory) or the directory of the crate's root file (from the
/// unit's name, `<root file>/@/<cgu>`).
fn in_crate(unit: &gimli::Unit<Reader>, file: &str) -> bool {
    let comp_dir = unit.comp_dir.map(|d| d.to_string_lossy().into_owned());
    let root_dir = unit.name.and_then(|n| {
        let n = n.to_string_lossy();
        let (root, _) = n.rsplit_once("/@/")?;
        let (dir, _) = root.rsplit_once('/')?;
        Some(match &comp_dir {
            Some(c) if !dir.starts_with('/') => format!("{c}/{dir}"),
            _ => dir.to_owned(),
        })
    });
    [comp_dir, root_dir]
        .into_iter()
        .flatten()
        .any(|d| file.starts_with(&format!("{}/", d.trim_end_matches('/'))))
}

/// One pass over a unit's DIE names, keeping what precedes each `::{closure_env#N}` (see
/// [`DwarfNames::closure_path`]). Stops at the first DIE it cannot read.
fn read_closure_envs(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &gimli::Unit<Reader>,
) -> HashMap<u32, Vec<String>> {
    const MARK: &str = "::{closure_env#";
    let mut out: HashMap<u32, Vec<String>> = HashMap::new();
    let Ok(mut entries) = unit.entries_raw(None) else {
        return out;
    };
    while !entries.is_empty() {
        let abbrev = match entries.read_abbreviation() {
            Ok(Some(a)) => a,
            Ok(None) => continue,
            Err(_) => break,
        };
        for spec in abbrev.attributes() {
            let Ok(attr) = entries.read_attribute(*spec) else {
                return out;
            };
            if attr.name() != gimli::DW_AT_name {
                continue;
            }
            let Ok(name) = dwarf.attr_string(unit, attr.value()) else {
                continue;
            };
            let Ok(name) = std::str::from_utf8(name.slice()) else {
                continue;
            };
            let mut from = 0;
            while let Some(i) = name[from..].find(MARK) {
                let at = from + i;
                from = at + MARK.len();
                let digits: String = name[from..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                let Ok(number) = digits.parse::<u32>() else {
                    continue;
                };
                // The path: back to the first character no path segment has.
                let begin = name[..at]
                    .rfind(|c: char| {
                        matches!(c, '<' | '>' | ',' | ' ' | '(' | ')' | '&' | '*' | '[')
                    })
                    .map_or(0, |j| j + 1);
                let path = &name[begin..at];
                let paths = out.entry(number).or_default();
                if !path.is_empty() && !paths.iter().any(|p| p == path) {
                    paths.push(path.to_owned());
                }
            }
        }
    }
    out
}

/// Ends the scopes still open at the end of the unit.
fn close(mut out: Vec<Scope>, open: Vec<(isize, u32)>) -> Vec<Scope> {
    for (_, i) in open {
        out[i as usize].end = usize::MAX;
    }
    out
}
