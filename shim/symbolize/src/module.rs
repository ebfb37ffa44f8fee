//! One module's symbol tables and DWARF, loaded once and kept for lookups.
//!
//! The file (and a separate debug file, if any) is memory-mapped; the symbol table and the
//! `addr2line` context borrow from the maps, which live in the same struct and are declared
//! last, so they are dropped after everything that borrows them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cuguard_format::read::open_regular;
use memmap2::{Mmap, MmapOptions};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::demangle::demangle;
use crate::dwarf_names::{DwarfNames, Reader};
use crate::symbol_names::{SegmentIndex, with_symbol_path};

/// One frame of a symbolized address. For an address inside inlined code there are several:
/// the innermost (inlined) one first, the real function last.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Demangled function name, from DWARF, else from the symbol tables.
    pub function: Option<String>,
    /// Source file, as DWARF names it (usually absolute).
    pub file: Option<String>,
    pub line: Option<u32>,
    /// True for frames that were inlined into the next one.
    pub inlined: bool,
}

struct Sym {
    addr: u64,
    /// One past the last byte (for a symbol without a size: the end of its section).
    end: u64,
    name: &'static [u8],
}

pub(crate) struct Module {
    ctx: Option<addr2line::Context<Reader>>,
    /// Qualified names for DWARF's short ones (with `ctx`).
    dwarf_names: Option<DwarfNames>,
    /// Sorted by `addr`.
    symbols: Vec<Sym>,
    names: HashMap<usize, String>,
    /// Built the first time an inlined Rust frame needs it.
    segment_index: Option<SegmentIndex>,
    frames: HashMap<u64, Vec<Frame>>,
    /// The parsed file and its debug file, for the segment index.
    objects: Vec<object::File<'static>>,
    // Storage borrowed by the fields above: keep last.
    _owned: Vec<Box<[u8]>>,
    _maps: Vec<Mmap>,
}

/// The file at `path`, mapped: `None` when it cannot be opened or is not a regular file. A
/// module's name comes from a report or a history, which may name anything: the file is opened
/// without blocking (a FIFO there would wait for a writer forever) and judged by `fstat` on
/// what was opened (`cuguard_format::read::open_regular`); a FIFO or a device (`/dev/zero`)
/// is then a module that cannot be read, as a missing one is. The map covers the size the file
/// had when opened, never more.
fn map(path: &Path) -> Option<Mmap> {
    let (file, size) = open_regular(path).ok()?;
    let len = usize::try_from(size).ok()?;
    // SAFETY: the map is read-only, of the file's length when it was opened. If the file is
    // truncated or rewritten while mapped, reads may fault or see new bytes: the same risk
    // every debugger and profiler takes.
    unsafe { MmapOptions::new().len(len).map(&file) }.ok()
}

/// Extends a borrow of mapped (or boxed) bytes to `'static`.
///
/// SAFETY (for callers): the bytes must be owned by the `Module` being built (in `_maps` or
/// `_owned`), whose heap/mapped storage does not move when the `Module` moves and is dropped
/// after every field that borrows it.
unsafe fn extend(bytes: &[u8]) -> &'static [u8] {
    // SAFETY: see the function's contract.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse(data: &'static [u8]) -> Option<object::File<'static>> {
    object::File::parse(data).ok()
}

fn build_id_of(obj: &object::File<'_>) -> Option<String> {
    obj.build_id().ok().flatten().map(hex)
}

fn has_dwarf(obj: &object::File<'_>) -> bool {
    obj.section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0)
}

/// Finds a separate debug file for a module: by build-id under each debug dir, then by
/// `.gnu_debuglink`. A candidate must have the same build-id (when the module has one), or
/// else the CRC the debuglink names.
fn find_debug_file(
    path: &Path,
    obj: &object::File<'_>,
    build_id: Option<&str>,
    debug_dirs: &[PathBuf],
) -> Option<Mmap> {
    let matches = |m: &Mmap, crc: Option<u32>| -> bool {
        // SAFETY: only used within this call, while `m` is alive.
        let Some(o) = parse(unsafe { extend(m) }) else {
            return false;
        };
        match (build_id, build_id_of(&o)) {
            (Some(want), Some(got)) => want == got,
            _ => crc.is_some_and(|c| crc32fast::hash(m) == c),
        }
    };
    if let Some(id) = build_id.filter(|id| id.len() > 2) {
        for dir in debug_dirs {
            let p = dir
                .join(".build-id")
                .join(&id[..2])
                .join(format!("{}.debug", &id[2..]));
            if let Some(m) = map(&p).filter(|m| matches(m, None)) {
                return Some(m);
            }
        }
    }
    let (name, crc) = obj.gnu_debuglink().ok().flatten()?;
    let name = Path::new(std::str::from_utf8(name).ok()?);
    let dir = path.parent()?;
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    if let Ok(abs) = std::fs::canonicalize(dir) {
        for d in debug_dirs {
            candidates.push(d.join(abs.strip_prefix("/").unwrap_or(&abs)).join(name));
        }
    }
    candidates
        .into_iter()
        .filter(|c| c != path)
        .find_map(|c| map(&c).filter(|m| matches(m, Some(crc))))
}

fn collect_symbols(obj: &object::File<'static>, out: &mut Vec<Sym>) {
    for s in obj.symbols().chain(obj.dynamic_symbols()) {
        if s.kind() != SymbolKind::Text || !s.is_definition() || s.address() == 0 {
            continue;
        }
        let Ok(name) = s.name_bytes() else { continue };
        if name.is_empty() {
            continue;
        }
        // Without a size, the symbol runs to the end of its section (or the next symbol).
        let end = if s.size() > 0 {
            s.address().saturating_add(s.size())
        } else {
            match s.section_index().and_then(|i| obj.section_by_index(i).ok()) {
                Some(sec) => sec.address().saturating_add(sec.size()),
                None => continue,
            }
        };
        out.push(Sym {
            addr: s.address(),
            end,
            name,
        });
    }
}

impl Module {
    /// Loads the module at `path`; `None` if it cannot be read or parsed, or if `build_id` is
    /// given and differs from the file's.
    pub(crate) fn load(
        path: &Path,
        build_id: Option<&str>,
        debug_dirs: &[PathBuf],
    ) -> Option<Module> {
        let mut maps = Vec::new();
        let mut owned: Vec<Box<[u8]>> = Vec::new();
        let main_map = map(path)?;
        // SAFETY: main_map goes into `maps`, owned by the Module built below.
        let main = parse(unsafe { extend(&main_map) })?;
        maps.push(main_map);
        let file_id = build_id_of(&main);
        if let Some(want) = build_id
            && file_id.as_deref() != Some(want)
        {
            return None;
        }

        let mut symbols = Vec::new();
        collect_symbols(&main, &mut symbols);

        let debug = if has_dwarf(&main) {
            None
        } else {
            find_debug_file(path, &main, file_id.as_deref(), debug_dirs).and_then(|m| {
                // SAFETY: m goes into `maps`, owned by the Module built below.
                let obj = parse(unsafe { extend(&m) })?;
                maps.push(m);
                Some(obj)
            })
        };
        if let Some(d) = &debug {
            // A debug file keeps the full .symtab the stripped file lost.
            collect_symbols(d, &mut symbols);
        }
        symbols.sort_by_key(|s| (s.addr, std::cmp::Reverse(s.end)));
        symbols.dedup_by_key(|s| s.addr);

        let dwarf_obj = debug.as_ref().unwrap_or(&main);
        let dwarf = if has_dwarf(dwarf_obj) {
            let endian = if dwarf_obj.is_little_endian() {
                gimli::RunTimeEndian::Little
            } else {
                gimli::RunTimeEndian::Big
            };
            let dwarf = gimli::Dwarf::load(|id| -> Result<Reader, gimli::Error> {
                let data: &'static [u8] = match dwarf_obj
                    .section_by_name(id.name())
                    .and_then(|s| s.uncompressed_data().ok())
                {
                    Some(Cow::Borrowed(b)) => b,
                    Some(Cow::Owned(v)) => {
                        let b = v.into_boxed_slice();
                        // SAFETY: the box goes into `owned`, owned by the Module built below;
                        // its heap storage does not move.
                        let s = unsafe { extend(&b) };
                        owned.push(b);
                        s
                    }
                    None => &[],
                };
                Ok(gimli::EndianSlice::new(data, endian))
            });
            dwarf.ok().map(Arc::new)
        } else {
            None
        };
        let ctx = dwarf
            .clone()
            .and_then(|d| addr2line::Context::from_arc_dwarf(d).ok());
        let dwarf_names = ctx.as_ref().and(dwarf).map(DwarfNames::new);
        let objects = std::iter::once(main).chain(debug).collect();

        Some(Module {
            ctx,
            dwarf_names,
            symbols,
            names: HashMap::new(),
            segment_index: None,
            frames: HashMap::new(),
            objects,
            _owned: owned,
            _maps: maps,
        })
    }

    /// The index of the symbol-table function containing `offset`.
    fn symbol_index(&self, offset: u64) -> Option<usize> {
        let i = self
            .symbols
            .partition_point(|s| s.addr <= offset)
            .checked_sub(1)?;
        (offset < self.symbols[i].end).then_some(i)
    }

    /// The symbol-table function containing `offset`, demangled.
    fn symbol(&mut self, offset: u64) -> Option<String> {
        let i = self.symbol_index(offset)?;
        let name = self.symbols[i].name;
        Some(
            self.names
                .entry(i)
                .or_insert_with(|| demangle(&String::from_utf8_lossy(name)).into_owned())
                .clone(),
        )
    }

    fn dwarf_frames(&mut self, offset: u64) -> Vec<Frame> {
        let mut out = Vec::new();
        let Some(ctx) = &self.ctx else { return out };
        let Ok(mut iter) = ctx.find_frames(offset).skip_all_loads() else {
            return out;
        };
        // Names as DWARF gives them, with their DIE (unit-relative) and language.
        let mut raw: Vec<(Option<String>, Option<usize>, Option<gimli::DwLang>)> = Vec::new();
        while let Ok(Some(f)) = iter.next() {
            let function = f
                .function
                .as_ref()
                .and_then(|n| n.raw_name().ok())
                .map(Cow::into_owned);
            let language = f.function.as_ref().and_then(|n| n.language);
            let (file, line) = match &f.location {
                Some(l) => (l.file.map(str::to_owned), l.line),
                None => (None, None),
            };
            if function.is_none() && file.is_none() {
                continue;
            }
            raw.push((function, f.dw_die_offset.map(|o| o.0), language));
            out.push(Frame {
                function: None,
                file,
                line,
                inlined: true,
            });
            if out.len() >= 64 {
                break;
            }
        }
        let unit_start = if raw.iter().any(|(f, ..)| f.is_some()) {
            ctx.find_dwarf_and_unit(offset)
                .skip_all_loads()
                .map(|u| u.header.offset().0)
        } else {
            None
        };
        let last = out.len().saturating_sub(1);
        for (i, (function, die, language)) in raw.into_iter().enumerate() {
            let die = die.zip(unit_start).map(|(d, start)| start + d);
            let file = out[i].file.take();
            out[i].function = function
                .map(|f| self.qualify(&f, die, language, i < last, offset, file.as_deref()));
            out[i].file = file;
        }
        if let Some(last) = out.last_mut() {
            last.inlined = false;
        }
        out
    }

    /// The qualified name of a function DWARF names `raw` (see `dwarf_names` and
    /// `symbol_names`): demangled if it is a linkage name; else from the DIE at `die` (a
    /// `.debug_info` offset); else, for the outermost frame, from the symbol at `offset`; else,
    /// for a Rust closure, from the closure environments its unit names; else, for an inlined
    /// Rust frame, from the segment index; else `raw`. `file` is the frame's source file.
    fn qualify(
        &mut self,
        raw: &str,
        die: Option<usize>,
        language: Option<gimli::DwLang>,
        inlined: bool,
        offset: u64,
        file: Option<&str>,
    ) -> String {
        let demangled = demangle(raw);
        if demangled != raw {
            return demangled.into_owned();
        }
        let rust = language == Some(gimli::DW_LANG_Rust);
        let cpp = matches!(
            language,
            Some(
                gimli::DW_LANG_C_plus_plus
                    | gimli::DW_LANG_C_plus_plus_03
                    | gimli::DW_LANG_C_plus_plus_11
                    | gimli::DW_LANG_C_plus_plus_14
                    | gimli::DW_LANG_C_plus_plus_17
                    | gimli::DW_LANG_C_plus_plus_20
            )
        );
        // C and the other languages without namespaces: the name is whole.
        if language.is_some() && !rust && !cpp {
            return raw.to_owned();
        }
        if let (Some(die), Some(names)) = (die, self.dwarf_names.as_mut())
            && let Some(q) = names.qualified(die)
        {
            return q;
        }
        if !inlined {
            let symbol = self.symbol_index(offset).map(|i| self.symbols[i].name);
            if let Some(q) = symbol
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(|s| with_symbol_path(s, raw))
            {
                return q;
            }
        }
        if rust
            && let (Some(die), Some(names)) = (die, self.dwarf_names.as_mut())
            && let Some(q) = names.closure_path(die, raw, file)
        {
            return q;
        }
        if inlined
            && rust
            && let (Some(die), Some(names)) = (die, self.dwarf_names.as_mut())
            && let Some(krate) = names.rust_crate(die, file)
        {
            let objects = &self.objects;
            let index = self.segment_index.get_or_insert_with(|| {
                SegmentIndex::new(objects.iter().flat_map(|o| {
                    o.symbols()
                        .chain(o.dynamic_symbols())
                        .filter_map(|s| s.name_bytes().ok())
                }))
            });
            if let Some(q) = index.qualify(raw, &krate) {
                return q;
            }
        }
        raw.to_owned()
    }

    /// Frames at `offset`, innermost inlined first; cached.
    pub(crate) fn frames(&mut self, offset: u64) -> Vec<Frame> {
        if let Some(f) = self.frames.get(&offset) {
            return f.clone();
        }
        let mut frames = self.dwarf_frames(offset);
        match frames.last_mut() {
            Some(last) if last.function.is_none() => last.function = self.symbol(offset),
            Some(_) => {}
            None => {
                if let Some(function) = self.symbol(offset) {
                    frames.push(Frame {
                        function: Some(function),
                        ..Frame::default()
                    });
                }
            }
        }
        self.frames.insert(offset, frames.clone());
        frames
    }
}
