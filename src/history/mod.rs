//! A process's history, command side: found from its report (`history.files`) or given as a
//! file, read with the history crate's [`Replay`], and its stacks named as `cuguard symbolize`
//! names a report's (the binaries the modules name, on this machine; sites and owners by the
//! built-in rules). [`moment`] answers what was live at a moment, or kept over a window.
//!
//! Every failure is one line and exit 2: a report without a history, a file that is not a
//! history, one of a newer layout, one cut short or damaged.

pub mod compare;
pub mod moment;
pub mod phases;
pub mod when;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cuguard_format::{Addr, Frame, Module, Process, PyFrame, Reason, Report, Stack};
use cuguard_history::bounded::{History, Source};
use cuguard_history::replay::{Replay, Word};
use cuguard_symbolize::Symbolizer;
use cuguard_symbolize::site::Plumbing;

use crate::input::InputError;
use cuguard_format::ReadError;

/// The largest history file read (a segment is at most half of `CUGUARD_HISTORY`).
pub const MAX_HISTORY_BYTES: u64 = 8 << 30;

/// A history opened: walked once, read a window at a time ([`Opened::read`]) in memory that
/// does not grow with its length.
pub struct Opened {
    pub history: History<Fixed>,
    /// Why the shim stopped recording before the end, as its report says.
    pub stopped: Option<String>,
    /// Why a framework cache's blocks (PyTorch's tensors) are not in it, as its report says.
    pub cache_blocks_unrecorded: Option<String>,
    /// The report's process, when read for a report.
    process: Option<Process>,
    /// The segment files, oldest first.
    pub files: Vec<PathBuf>,
    /// Notes already said.
    said: std::cell::Cell<usize>,
    /// The report's devices (`devices[]`), when read for a report.
    pub devices: Vec<cuguard_format::Device>,
}

/// A history file as it was when opened: read at offsets, never past the size it had then
/// (a running process's writer appends meanwhile).
pub struct Fixed {
    file: std::fs::File,
    size: u64,
}

impl Source for Fixed {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let end = self.size.saturating_sub(offset).min(buf.len() as u64) as usize;
        Source::read_at(&self.file, &mut buf[..end], offset)
    }
}

impl Opened {
    /// The process, the span, the losses (no blocks).
    pub fn meta(&self) -> &Replay {
        self.history.meta()
    }

    /// What was live at `from_ns` and made up to `to_ns`, named.
    pub fn read(&self, from_ns: u64, to_ns: u64) -> Result<Loaded, InputError> {
        let replay = self
            .history
            .window(from_ns, to_ns)
            .map_err(|e| self.invalid(e))?;
        self.say_notes();
        let used = replay
            .blocks
            .iter()
            .chain(&replay.cache_blocks)
            .map(|b| b.stack)
            .chain(replay.ooms.iter().map(|o| o.stack));
        let report = named(&replay, used, self.process.clone());
        Ok(Loaded {
            replay,
            stopped: self.stopped.clone(),
            cache_blocks_unrecorded: self.cache_blocks_unrecorded.clone(),
            report,
            files: self.files.clone(),
            allocations: self.history.allocations(),
        })
    }

    /// The process as a report holding every stack of the history, named (for what walks the
    /// whole history: the view's timeline).
    pub fn names(&self) -> Report {
        let meta = self.meta();
        named(meta, meta.stacks.keys().copied(), self.process.clone())
    }

    /// The process as a report holding only the stacks `ids`, named (for an answer that names a
    /// few stacks of a history walked whole: `cuguard replay`'s failures).
    pub fn names_of(&self, ids: impl Iterator<Item = u32>) -> Report {
        named(self.meta(), ids, self.process.clone())
    }

    /// A reading error of this history as the command says it.
    pub fn invalid(&self, e: cuguard_history::Error) -> InputError {
        invalid(&self.files[0], e.to_string())
    }

    /// The whole history, named (memory grows with it).
    pub fn whole(&self) -> Result<Loaded, InputError> {
        self.read(0, u64::MAX)
    }

    /// What the reader worked around (a damaged checkpoint), one line each on stderr, once.
    fn say_notes(&self) {
        let notes = self.history.notes();
        let which = self.files.last().expect("at least one file");
        for n in notes.iter().skip(self.said.get()) {
            eprintln!(
                "cuguard: {}: {n}",
                crate::wording::one_line(&which.display().to_string())
            );
        }
        self.said.set(notes.len());
    }
}

/// A history read (a window of it, or all of it) and named.
pub struct Loaded {
    pub replay: Replay,
    /// Allocations in the whole history (the window's blocks are fewer).
    pub allocations: u64,
    /// Why the shim stopped recording before the end (a full disk), as its report says; `None`
    /// when it did not, or when the history was read without its report.
    pub stopped: Option<String>,
    /// Why a framework cache's blocks (PyTorch's tensors) are not in it, as its report says.
    pub cache_blocks_unrecorded: Option<String>,
    /// The process as a report with only what naming needs: its process, modules and named
    /// stacks (and the owners they name), for the summary's site and owner indexes.
    pub report: Report,
    /// The segment files read, oldest first.
    pub files: Vec<PathBuf>,
}

/// What a reader does with a history cut short or damaged after its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Refuses it (one line, exit 2): an answer at a moment past the cut would be wrong.
    Refuse,
    /// Reads it up to the cut ([`Replay::cut`] says where and why): for a walk that says so.
    Read,
}

/// Reads the history at `path`: a report naming its history, or a history file (with its older
/// segment `PATH.1` when that is the same process's).
pub fn load(path: &Path) -> Result<Opened, InputError> {
    open(path, Cut::Refuse)
}

/// [`load`], with what to do with a history cut short.
pub fn open(path: &Path, cut: Cut) -> Result<Opened, InputError> {
    let head = read_first(path, cuguard_history::MAGIC.len())?;
    let (files, report) = if head.starts_with(cuguard_history::MAGIC) {
        (segments_beside(path)?, None)
    } else {
        let doc = cuguard_format::Document::read_with_limit(path, crate::input::max_report_bytes())
            .map_err(InputError::from)?;
        let reports: Vec<Report> = doc
            .into_reports()
            .collect::<Result<_, _>>()
            .map_err(InputError::from)?;
        let [r]: [Report; 1] = reports.try_into().map_err(|all: Vec<Report>| {
            invalid(
                path,
                format!(
                    "a merged report of {} processes: give one process's report or history",
                    all.len()
                ),
            )
        })?;
        (files_of(&r, path)?, Some(r))
    };
    let owner = match report {
        Some(r) => Some(Owner::of(r, path)?),
        None => None,
    };
    read_segments(files, owner, cut)
}

/// Whether the file at `path` is a history file (else it may be a report).
pub fn is_history_file(path: &Path) -> Result<bool, InputError> {
    Ok(read_first(path, cuguard_history::MAGIC.len())?.starts_with(cuguard_history::MAGIC))
}

/// The history of `report`, read from `path` (its history's files are named relative to the
/// report's directory).
pub fn of_report(report: &Report, path: &Path) -> Result<Opened, InputError> {
    read_segments(
        files_of(report, path)?,
        Some(Owner::of(report.clone(), path)?),
        Cut::Refuse,
    )
}

/// The files of the history the report at `path` names (oldest first; none when it names no
/// history), as [`files_of`] finds them.
pub fn files_named(report: &Report, path: &Path) -> Vec<PathBuf> {
    resolve(report, path)
}

/// The most files a history has: a segment and the one before it.
const MAX_SEGMENTS: usize = 2;

/// Where the files a report names are: an absolute name where it is, else (the report and its
/// history moved together, as CI artifacts are) the same file name beside the report; a
/// relative name (a report of an earlier cuguard) beside the report. A file named twice, by
/// any name, is read once.
fn resolve(report: &Report, path: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for name in report.history.iter().flat_map(|info| info.files.iter()) {
        let named = Path::new(name);
        let file = if named.is_absolute() {
            match (named.symlink_metadata(), named.file_name()) {
                (Err(_), Some(base)) => dir.join(base),
                _ => named.to_path_buf(),
            }
        } else {
            dir.join(named)
        };
        let key = match std::fs::metadata(&file) {
            Ok(m) => (m.dev(), m.ino()),
            Err(_) => (u64::MAX, out.len() as u64),
        };
        if seen.insert(key) {
            out.push(file);
        }
    }
    out
}

/// Whose a history must be when it is read for a report: that report's process (its pid, start
/// and run), in files owned by whoever owns the report.
struct Owner {
    report: Report,
    /// The report file's owner.
    uid: u32,
}

impl Owner {
    fn of(report: Report, path: &Path) -> Result<Owner, InputError> {
        use std::os::unix::fs::MetadataExt as _;
        let uid = std::fs::metadata(path)
            .map_err(|e| invalid(path, e.to_string()))?
            .uid();
        Ok(Owner { report, uid })
    }

    /// Why `replay` (read from `file`) is not this report's process's history, if it is not.
    fn refuses(&self, replay: &Replay) -> Option<String> {
        let p = &self.report.process;
        let start_ms = replay.start_unix_ns / 1_000_000;
        let run = self
            .report
            .run_id
            .as_deref()
            .map_or(0, cuguard_history::run_tag);
        if replay.pid != p.pid || start_ms != p.start_unix_ms {
            return Some(format!(
                "not this report's history: it is of process {} started at {} ms (Unix), the report of process {} started at {} ms",
                replay.pid, start_ms, p.pid, p.start_unix_ms
            ));
        }
        if replay.run != 0 && run != 0 && replay.run != run {
            return Some(format!(
                "not this report's history: it is of another run than {}",
                self.report.run_id.as_deref().unwrap_or_default()
            ));
        }
        None
    }
}

/// The files of the history `report` names, beside `path`.
fn files_of(report: &Report, path: &Path) -> Result<Vec<PathBuf>, InputError> {
    if report.history.is_none() {
        return Err(invalid(
            path,
            "the report names no history (it was written with CUGUARD_HISTORY=0, or by a cuguard without one)".into(),
        ));
    }
    let files = resolve(report, path);
    if files.is_empty() {
        return Err(invalid(path, "the report's history has no file".into()));
    }
    if files.len() > MAX_SEGMENTS {
        return Err(invalid(
            path,
            format!(
                "the report names {} history files; a history has at most {MAX_SEGMENTS} (a segment and the one before it)",
                files.len()
            ),
        ));
    }
    Ok(files)
}

/// Reads a history's segment files (oldest first) and names its stacks; with `owner`, only when
/// every file is owned by the report's owner and the history is of the report's process; one
/// cut short as `cut` says.
fn read_segments(
    files: Vec<PathBuf>,
    owner: Option<Owner>,
    cut: Cut,
) -> Result<Opened, InputError> {
    let mut sources = Vec::with_capacity(files.len());
    for f in &files {
        sources.push(open_file(f, owner.as_ref().map(|o| o.uid))?);
    }
    let history = History::open(sources).map_err(|e| invalid(&files[0], e.to_string()))?;
    let replay = history.meta();
    if let Some(why) = owner.as_ref().and_then(|o| o.refuses(replay)) {
        return Err(invalid(files.last().expect("at least one file"), why));
    }
    if let Some(why) = &replay.cut
        && cut == Cut::Refuse
    {
        let which = files.last().expect("at least one file");
        return Err(invalid(which, why.to_string()));
    }
    let (process, history_info, devices) = match owner {
        Some(o) => (Some(o.report.process), o.report.history, o.report.devices),
        None => (None, None, Vec::new()),
    };
    let (stopped, cache_blocks_unrecorded) = history_info
        .map(|h| (h.stopped, h.cache_blocks_unrecorded))
        .unwrap_or_default();
    let opened = Opened {
        history,
        stopped,
        cache_blocks_unrecorded,
        process,
        files,
        said: std::cell::Cell::new(0),
        devices,
    };
    opened.say_notes();
    // Said once, as it is opened: every answer from it lacks the cache's tensors.
    if let Some(why) = &opened.cache_blocks_unrecorded {
        eprintln!(
            "cuguard: {}: {}",
            crate::wording::one_line(&opened.files[0].display().to_string()),
            crate::wording::one_line(why)
        );
    }
    Ok(opened)
}

fn invalid(path: &Path, reason: String) -> InputError {
    InputError::from(ReadError::Invalid {
        path: path.to_path_buf(),
        process: None,
        reason,
    })
}

/// The first `n` bytes of `path` (fewer when it is shorter), refusing anything but a regular
/// file (a FIFO would block).
fn read_first(path: &Path, n: usize) -> Result<Vec<u8>, InputError> {
    use std::io::Read as _;
    let (f, size) = open_regular(path)?;
    let mut head = Vec::with_capacity(n);
    f.take(size.min(n as u64))
        .read_to_end(&mut head)
        .map_err(|e| invalid(path, e.to_string()))?;
    Ok(head)
}

/// A history file opened as every input is ([`cuguard_format::read::open_regular`]: without
/// blocking, refused unless a regular file), with its size then, at most [`MAX_HISTORY_BYTES`].
fn open_regular(path: &Path) -> Result<(std::fs::File, u64), InputError> {
    let (f, size) =
        cuguard_format::read::open_regular(path).map_err(|e| invalid(path, e.to_string()))?;
    if size > MAX_HISTORY_BYTES {
        return Err(invalid(
            path,
            format!(
                "{} is larger than a history is ({} at most)",
                crate::wording::bytes(size),
                crate::wording::bytes(MAX_HISTORY_BYTES)
            ),
        ));
    }
    Ok((f, size))
}

/// A history file opened for reading at offsets, up to its size now. With `uid`, a file
/// another user owns is refused.
fn open_file(path: &Path, uid: Option<u32>) -> Result<Fixed, InputError> {
    use std::os::unix::fs::MetadataExt as _;
    let (file, size) = open_regular(path)?;
    if let Some(uid) = uid {
        let owner = file
            .metadata()
            .map_err(|e| invalid(path, e.to_string()))?
            .uid();
        if owner != uid {
            return Err(invalid(
                path,
                format!(
                    "owned by uid {owner}, not by the report's owner (uid {uid}): not read as its history"
                ),
            ));
        }
    }
    Ok(Fixed { file, size })
}

/// `path` and, before it, its older segment `PATH.1` when that is the same process's previous
/// segment.
fn segments_beside(path: &Path) -> Result<Vec<PathBuf>, InputError> {
    let mut older = path.as_os_str().to_owned();
    older.push(".1");
    let older = PathBuf::from(older);
    let newer = cuguard_history::Header::decode(&read_first(path, cuguard_history::HEADER_LEN)?);
    let owner = |p: &Path| {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::symlink_metadata(p).ok().map(|m| m.uid())
    };
    if let (Ok(newer), Ok(bytes)) = (newer, read_first(&older, cuguard_history::HEADER_LEN))
        && let Ok(h) = cuguard_history::Header::decode(&bytes)
        && owner(&older) == owner(path)
        && h.pid == newer.pid
        && h.start_unix_ns == newer.start_unix_ns
        && h.segment + 1 == newer.segment
    {
        return Ok(vec![older, path.to_path_buf()]);
    }
    Ok(vec![path.to_path_buf()])
}

/// A report holding the history's stacks, named, with `process` (or one made from the
/// history's header).
fn named(replay: &Replay, used: impl Iterator<Item = u32>, process: Option<Process>) -> Report {
    let process = process.unwrap_or_else(|| Process {
        pid: replay.pid,
        ppid: 0,
        // The loader lists the main program first.
        exe: replay
            .modules
            .first()
            .map(|m| m.path.clone())
            .unwrap_or_default(),
        argv: Vec::new(),
        hostname: String::new(),
        rank: None,
        start_unix_ms: replay.start_unix_ns / 1_000_000,
        end_unix_ms: (replay.start_unix_ns + replay.ends_ns) / 1_000_000,
        labels: None,
    });
    let mut report = Report::new(true, Reason::Exit, process);
    let modules: Vec<Module> = replay
        .modules
        .iter()
        .map(|m| Module {
            path: m.path.clone(),
            build_id: m.build_id.clone(),
            base: Addr(m.bias),
            start: Some(Addr(m.start)),
            size: m.end.saturating_sub(m.start),
        })
        .collect();
    let used: std::collections::HashSet<u32> = used.collect();
    let mut ids: Vec<u32> = used
        .into_iter()
        .filter(|id| replay.stacks.contains_key(id))
        .collect();
    ids.sort_unstable();
    let module_names: Vec<Arc<str>> = modules.iter().map(|m| Arc::from(&*m.path)).collect();
    let index = ModuleIndex::new(&replay.modules);
    report.stacks = ids
        .iter()
        .map(|&id| stack(id, &replay.stacks[&id], replay, &module_names, &index))
        .collect();
    report.modules = modules;
    let mut symbolizer = Symbolizer::new(None);
    crate::naming::name_report(&mut report, &mut symbolizer, &Plumbing::builtin());
    report
}

/// One stack as a report's: native frames located in the modules, Python frames named by the
/// code table.
fn stack(
    id: u32,
    words: &[u64],
    replay: &Replay,
    names: &[Arc<str>],
    by_start: &ModuleIndex,
) -> Stack {
    let mut frames = Vec::new();
    let mut python = Vec::new();
    let mut origin = None;
    for &w in words {
        match Word::of(w) {
            Word::Native(ip) => {
                let m = by_start.find(ip);
                frames.push(Frame {
                    ip: Addr(ip),
                    module: m.map_or_else(|| Arc::from(""), |i| names[i].clone()),
                    offset: Addr(m.map_or(ip, |i| ip.wrapping_sub(replay.modules[i].bias))),
                    function: None,
                    file: None,
                    line: None,
                    inlined: None,
                });
            }
            Word::Python { code, line, entry } => {
                let (file, function) = replay
                    .codes
                    .get(&code)
                    .cloned()
                    .unwrap_or_else(|| ("<unknown>".into(), "<unknown>".into()));
                python.push(PyFrame {
                    file,
                    line,
                    function,
                    entry: Some(entry),
                    display: None,
                });
            }
            Word::Origin(o) => origin = Some(u64::from(o)),
        }
    }
    Stack {
        id: u64::from(id),
        frames,
        python,
        site: None,
        owner: None,
        mixed: Vec::new(),
        origin,
    }
}

/// The modules by start address, to find the one an address falls in without walking them all.
/// Modules do not overlap in a real process; where a file says they do, the one that starts
/// nearest below the address wins, among the few nearest (a bounded look back).
struct ModuleIndex {
    /// (start, end, index in the list), by start.
    ranges: Vec<(u64, u64, usize)>,
}

impl ModuleIndex {
    /// How many ranges below an address are looked at.
    const LOOK_BACK: usize = 16;

    fn new(modules: &[cuguard_history::replay::Module]) -> ModuleIndex {
        let mut ranges: Vec<(u64, u64, usize)> = modules
            .iter()
            .enumerate()
            .map(|(i, m)| (m.start, m.end, i))
            .collect();
        ranges.sort_unstable();
        ModuleIndex { ranges }
    }

    /// The module holding `ip`, if any.
    fn find(&self, ip: u64) -> Option<usize> {
        let below = self.ranges.partition_point(|r| r.0 <= ip);
        self.ranges[..below]
            .iter()
            .rev()
            .take(Self::LOOK_BACK)
            .find(|r| ip < r.1)
            .map(|r| r.2)
    }
}

/// A moment for people: `1.25 s`, `840 ms`.
pub fn span_text(ns: u64) -> String {
    crate::wording::moment(ns / 1_000_000)
}

/// Stacks are the report's ids: a history's id as the report's.
pub fn stack_key(id: u32) -> Option<u64> {
    (id != cuguard_history::NONE).then_some(u64::from(id))
}

/// The stacks the history names, by id, for callers that want them at hand.
pub fn stacks_by_id(report: &Report) -> HashMap<u64, &Stack> {
    report.stacks.iter().map(|s| (s.id, s)).collect()
}
