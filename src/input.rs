//! Turning command-line PATHs into reports: files, directories (every `*.json` below them) and
//! globs; then reading them in parallel, one report at a time per worker.
//!
//! Every file is opened as [`cuguard_format::read::open_regular`] opens it: without blocking, and
//! refused in one line unless it is a regular file (`PATH: not a regular file (a FIFO)`), then
//! read up to the size it had when opened. A directory's or a glob's files that are not regular
//! files are left out of the expansion.
//!
//! Memory stays proportional to the input in flight (at most [`IN_FLIGHT_BYTES`] of files, or
//! of a lone merged report's processes, started and not yet handed on; two always), never to
//! the sum of all inputs: each worker reads a file, hands each process's [`Report`] to the
//! caller's function, and keeps only what that function returns.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use crate::wording::one_line;
use cuguard_format::{DEFAULT_MAX_REPORT_BYTES, Document, LeakFold, ReadError, Report};
use cuguard_symbolize::glob;

/// Where a report came from: a file, and for a merged report the process's index in it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Source {
    /// The file.
    pub path: PathBuf,
    /// The process's index in a merged report; `None` for a single report.
    pub index: Option<usize>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}[{i}]", self.path.display()),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

/// Why the inputs could not be read.
#[derive(Debug)]
pub enum InputError {
    /// A PATH that does not exist and is not a pattern.
    NotFound(PathBuf),
    /// A pattern that matched nothing.
    NoMatch(String),
    /// A directory that could not be listed.
    Dir {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file that is not a readable version-1 report.
    Read(ReadError),
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::NotFound(p) => {
                write!(
                    f,
                    "{}: no such file or directory",
                    one_line(&p.display().to_string())
                )
            }
            InputError::NoMatch(p) => write!(f, "{}: no file matches", one_line(p)),
            InputError::Dir { path, source } => write!(
                f,
                "{}: {}",
                one_line(&path.display().to_string()),
                one_line(&source.to_string())
            ),
            InputError::Read(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for InputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InputError::Dir { source, .. } => Some(source),
            InputError::Read(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ReadError> for InputError {
    fn from(e: ReadError) -> Self {
        // A history file where a report is read: say what it is, and what reads it.
        if let ReadError::NotAReport { path, .. } = &e
            && is_history(path)
        {
            let shown = one_line(&path.display().to_string());
            return InputError::Read(ReadError::NotAReport {
                path: path.clone(),
                reason: format!(
                    "it is a process's history: read it with `cuguard summary {shown} --at end` \
                     or `cuguard view {shown} -o page.html`"
                ),
            });
        }
        InputError::Read(e)
    }
}

/// Whether `path` is a regular file that begins as a history file. Opened as every input is
/// ([`cuguard_format::read::open_regular`]): a FIFO put at the name between a look and the
/// `open` never blocks.
pub fn is_history(path: &Path) -> bool {
    use std::io::Read as _;
    let Ok((file, size)) = cuguard_format::read::open_regular(path) else {
        return false;
    };
    let mut head = [0u8; 8];
    file.take(size).read_exact(&mut head).is_ok() && &head == cuguard_history::MAGIC
}

/// Expands PATHs into report files, in order, without duplicates: a file stands for itself, a
/// directory for every `*.json` file below it (sorted), and a PATH that does not exist but holds
/// `*`, `?` or `[` for the files it matches (sorted). A pattern that matches nothing is
/// [`InputError::NoMatch`].
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    expand_paths(paths, false)
}

/// [`expand`] for an input that may hold no file at all, for the caller to refuse or accept (an
/// empty list): a pattern that matches nothing then stands for no file, as an empty directory
/// does. Beside PATHs that do yield files it is still [`InputError::NoMatch`].
pub fn expand_maybe_empty(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    expand_paths(paths, true)
}

fn expand_paths(paths: &[PathBuf], maybe_empty: bool) -> Result<Vec<PathBuf>, InputError> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut unmatched = None;
    for path in paths {
        let mut found = Vec::new();
        if path.is_dir() {
            walk(path, &mut found)?;
            found.sort();
        } else if path.exists() {
            found.push(path.clone());
        } else {
            let text = path.to_string_lossy();
            if !glob::is_pattern(&text) {
                return Err(InputError::NotFound(path.clone()));
            }
            found = expand_glob(path)?;
            if found.is_empty() {
                if !maybe_empty {
                    return Err(InputError::NoMatch(text.into_owned()));
                }
                unmatched.get_or_insert_with(|| text.into_owned());
            }
        }
        for f in found {
            if seen.insert(f.clone()) {
                out.push(f);
            }
        }
    }
    match unmatched {
        Some(pattern) if !out.is_empty() => Err(InputError::NoMatch(pattern)),
        _ => Ok(out),
    }
}

/// Collects the `*.json` files below `dir`.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), InputError> {
    let err = |source| InputError::Dir {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        let path = entry.path();
        let kind = entry.file_type().map_err(err)?;
        if kind.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "json") && path.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// Expands a glob one component at a time, so `*` never crosses a `/`.
fn expand_glob(pattern: &Path) -> Result<Vec<PathBuf>, InputError> {
    use std::path::Component;
    let mut bases = vec![PathBuf::new()];
    for comp in pattern.components() {
        let name = match comp {
            Component::Normal(n) => n.to_string_lossy().into_owned(),
            other => {
                for b in &mut bases {
                    b.push(other.as_os_str());
                }
                continue;
            }
        };
        let mut next = Vec::new();
        for base in &bases {
            if !glob::is_pattern(&name) {
                let p = base.join(&name);
                if p.exists() {
                    next.push(p);
                }
                continue;
            }
            let dir = if base.as_os_str().is_empty() {
                Path::new(".")
            } else {
                base
            };
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.') || name.starts_with('.'))
                .filter(|n| glob::matches(&name, n))
                .collect();
            names.sort();
            next.extend(names.into_iter().map(|n| base.join(n)));
        }
        bases = next;
    }
    Ok(bases.into_iter().filter(|p| p.is_file()).collect())
}

/// Runs `f(0)`, …, `f(n - 1)` on up to as many threads as the machine has cores and returns
/// the results in index order, at most [`IN_FLIGHT_BYTES`] of `weight` at a time (see
/// [`parallel_in_order`]). The first error (in index order) is returned instead; after any
/// error, items not yet started are skipped.
fn parallel<T, E, F>(n: usize, weight: impl Fn(usize) -> u64 + Sync, f: F) -> Result<Vec<T>, E>
where
    T: Send,
    E: Send,
    F: Fn(usize) -> Result<T, E> + Sync,
{
    let mut out = Vec::with_capacity(n);
    parallel_in_order(n, weight, f, |value| out.push(value))?;
    Ok(out)
}

/// How many bytes of input (files' sizes) the workers read at once, the results waiting for
/// an earlier one's included, past the first [`MIN_IN_FLIGHT`] items: what a worker holds grows
/// with its file, so memory is bounded by this and not by the machine's cores.
pub(crate) const IN_FLIGHT_BYTES: u64 = 4 << 20;

/// How many items may always be in flight, whatever their weight.
pub(crate) const MIN_IN_FLIGHT: usize = 2;

/// The file's size, as [`parallel`] weighs a file to read (0 when it cannot be told: the
/// read then says why).
fn file_weight(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Which items may start: in index order, while what is in flight (started and not yet
/// handed on) weighs at most [`IN_FLIGHT_BYTES`] with the next, or fewer than
/// [`MIN_IN_FLIGHT`] are.
struct Gate {
    state: Mutex<GateState>,
    freed: Condvar,
}

struct GateState {
    /// The next index to start.
    next: usize,
    /// The weight in flight.
    bytes: u64,
    /// How many items are in flight.
    items: usize,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            state: Mutex::new(GateState {
                next: 0,
                bytes: 0,
                items: 0,
            }),
            freed: Condvar::new(),
        }
    }

    /// The next index to work on and its weight, once it fits; `None` when all are started or
    /// `stop` says so. Items start in index order, so every one in flight is before the one
    /// waiting, and is handed on without it: the wait ends.
    fn start(
        &self,
        n: usize,
        weight: &impl Fn(usize) -> u64,
        stop: &AtomicBool,
    ) -> Option<(usize, u64)> {
        let mut s = self.state.lock().ok()?;
        let mut w = None;
        loop {
            if stop.load(Ordering::Relaxed) || s.next >= n {
                return None;
            }
            let next = s.next;
            let w = *w.get_or_insert_with(|| weight(next));
            if s.items < MIN_IN_FLIGHT || s.bytes.saturating_add(w) <= IN_FLIGHT_BYTES {
                s.next += 1;
                s.bytes += w;
                s.items += 1;
                return Some((next, w));
            }
            s = self.freed.wait(s).ok()?;
        }
    }

    /// An item of weight `w` was handed on.
    fn done(&self, w: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.bytes -= w;
            s.items -= 1;
        }
        self.freed.notify_all();
    }

    /// Stops every worker waiting to start (`stop` is set first, under the lock, so that none
    /// misses it).
    fn stop(&self, stop: &AtomicBool) {
        let s = self.state.lock();
        stop.store(true, Ordering::Relaxed);
        drop(s);
        self.freed.notify_all();
    }
}

/// Stops the other workers when its worker panics: the item it held is never handed on, so
/// the workers waiting for its weight would otherwise wait for ever, where the panic is to end
/// the call.
struct StopOnPanic<'a>(&'a Gate, &'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop(self.1);
        }
    }
}

/// Runs `f(0)`, …, `f(n - 1)` on up to as many threads as the machine has cores and hands each
/// result to `take` in index order as soon as those before it are taken, so that only results
/// finished ahead of a slower one wait. Items start in index order while the `weight` of those
/// started and not yet taken stays within [`IN_FLIGHT_BYTES`] (or fewer than
/// [`MIN_IN_FLIGHT`] are), on no more threads than that keeps busy with items of the mean
/// weight, so that memory does not grow with the cores. The first error (in
/// index order) is returned; after any error, items not yet started are skipped and no later
/// result is taken.
fn parallel_in_order<T, E, F, G>(
    n: usize,
    weight: impl Fn(usize) -> u64 + Sync,
    f: F,
    take: G,
) -> Result<(), E>
where
    T: Send,
    E: Send,
    F: Fn(usize) -> Result<T, E> + Sync,
    G: FnMut(T) + Send,
{
    struct Order<T, E, G> {
        /// The index `take` waits for.
        next: usize,
        /// Results finished ahead of `next`, with their weights.
        ahead: BTreeMap<usize, (u64, Result<T, E>)>,
        take: G,
        error: Option<E>,
    }
    let weights: Vec<u64> = (0..n).map(&weight).collect();
    let weight = |i: usize| weights[i];
    // No more workers than the budget keeps busy with items of the mean weight: each worker's
    // memory outlives its item (the allocator keeps what a thread freed for the thread).
    let mean = weights.iter().sum::<u64>() / n.max(1) as u64;
    let busy = match IN_FLIGHT_BYTES.checked_div(mean) {
        Some(k) => usize::try_from(k).unwrap_or(usize::MAX).max(MIN_IN_FLIGHT),
        None => usize::MAX,
    };
    let threads = std::thread::available_parallelism()
        .map(|t| t.get())
        .unwrap_or(1)
        .min(busy)
        .min(n)
        .max(1);
    let gate = Gate::new();
    let failed = AtomicBool::new(false);
    let order = Mutex::new(Order {
        next: 0,
        ahead: BTreeMap::new(),
        take,
        error: None,
    });
    let work = || {
        let _stop = StopOnPanic(&gate, &failed);
        while let Some((i, w)) = gate.start(n, &weight, &failed) {
            let result = f(i);
            if result.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            let Ok(mut o) = order.lock() else {
                break;
            };
            o.ahead.insert(i, (w, result));
            loop {
                let next = o.next;
                let Some((w, result)) = o.ahead.remove(&next) else {
                    break;
                };
                o.next += 1;
                match result {
                    Ok(value) if o.error.is_none() => (o.take)(value),
                    Ok(_) => {}
                    Err(e) => {
                        if o.error.is_none() {
                            o.error = Some(e);
                        }
                    }
                }
                gate.done(w);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
    let o = order.into_inner().unwrap_or_else(|p| p.into_inner());
    match o.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Reads every file (in parallel, up to the machine's cores; a lone merged report's processes
/// in parallel too) and calls `f` on each process's report. Returns `f`'s results in input order
/// (files in order, processes in file order).
///
/// The first file that cannot be read ends the whole call with its error; the remaining work is
/// abandoned.
pub fn map_reports<T, F>(files: &[PathBuf], f: F) -> Result<Vec<(Source, T)>, InputError>
where
    T: Send,
    F: Fn(&Source, Report) -> T + Sync,
{
    let per_file = parallel(
        files.len(),
        |i| file_weight(&files[i]),
        |i| read_file(&files[i], None, files.len() == 1, &|s, r, _| f(s, r), None),
    )?;
    Ok(per_file.into_iter().flatten().collect())
}

/// As [`map_reports`], but each report's leaks are folded while it is parsed (keeping the `keep`
/// largest) and handed to `f` beside the report, whose own `leaks` are then empty: memory holds
/// the fold, never the leaks.
pub fn map_folded<T, F>(
    files: &[PathBuf],
    keep: usize,
    f: F,
) -> Result<Vec<(Source, T)>, InputError>
where
    T: Send,
    F: Fn(&Source, Report, LeakFold) -> T + Sync,
{
    let per_file = parallel(
        files.len(),
        |i| file_weight(&files[i]),
        |i| read_file(&files[i], Some(keep), files.len() == 1, &f, None),
    )?;
    Ok(per_file.into_iter().flatten().collect())
}

/// As [`map_folded`], but hands each process's result to `take` as soon as every process
/// before it (in input order) is taken, instead of keeping them all: memory holds only the
/// results finished ahead of a slower one.
pub fn for_each_folded<T, F, G>(
    files: &[PathBuf],
    keep: usize,
    f: F,
    mut take: G,
) -> Result<(), InputError>
where
    T: Send,
    F: Fn(&Source, Report, LeakFold) -> T + Sync,
    G: FnMut(Source, T) + Send,
{
    if let [file] = files {
        // One file: a merged report's processes go to `take` as they are done, not all kept.
        let mut deliver = |source, value| take(source, value);
        for (source, value) in read_file(file, Some(keep), true, &f, Some(&mut deliver))? {
            take(source, value);
        }
        return Ok(());
    }
    parallel_in_order(
        files.len(),
        |i| file_weight(&files[i]),
        |i| read_file(&files[i], Some(keep), false, &f, None),
        |processes| {
            for (source, value) in processes {
                take(source, value);
            }
        },
    )?;
    Ok(())
}

/// Reads one file: folding leaks when `fold` says how many to keep; a merged report's processes
/// in parallel when `alone` (no other file is being read beside it, so the threads stay within
/// the cores), then handed to `take`, when given, as they are done (in order), instead of
/// returned.
fn read_file<T, F>(
    path: &Path,
    fold: Option<usize>,
    alone: bool,
    f: &F,
    take: Option<&mut (dyn FnMut(Source, T) + Send)>,
) -> Result<Vec<(Source, T)>, ReadError>
where
    T: Send,
    F: Fn(&Source, Report, LeakFold) -> T + Sync,
{
    let source = |index| Source {
        path: path.to_path_buf(),
        index,
    };
    // A single report is parsed as the file is checked (its leaks folded then, when asked); a
    // merged one's processes later.
    let (doc, single) = match fold {
        Some(keep) => Document::read_folding(path, max_report_bytes(), keep)?,
        None => (
            Document::read_with_limit(path, max_report_bytes())?,
            LeakFold::default(),
        ),
    };
    if !doc.is_merged() {
        let source = source(None);
        let mut reports = doc.into_reports();
        return match reports.next() {
            Some(r) => {
                let value = f(&source, r?, single);
                Ok(vec![(source, value)])
            }
            None => Ok(Vec::new()),
        };
    }
    let one = |i: usize| {
        let source = source(Some(i));
        let parsed = match fold {
            Some(keep) => doc.merged_process_folding(i, keep),
            None => doc
                .merged_process(i)
                .map(|r| r.map(|r| (r, LeakFold::default()))),
        };
        let (report, leaks) = parsed.unwrap_or_else(|| {
            Err(ReadError::Invalid {
                path: path.to_path_buf(),
                process: Some(i),
                reason: "no such process".into(),
            })
        })?;
        let value = f(&source, report, leaks);
        Ok((source, value))
    };
    // A lone merged report's processes are weighed as files are, by their text's size: what
    // a worker holds grows with the process it parses, as with a file.
    let weights: Vec<u64> = match alone {
        true => doc.raw_processes().map(|p| p.len() as u64).collect(),
        false => Vec::new(),
    };
    let weight = |i: usize| weights[i];
    match (alone, take) {
        // A lone merged report: its processes are parsed in parallel, the file's bytes shared,
        // within the bound on input in flight, and handed to `take` in order as they are done.
        (true, Some(take)) => {
            parallel_in_order(doc.len(), weight, one, |(source, value)| {
                take(source, value)
            })?;
            Ok(Vec::new())
        }
        (true, None) => parallel(doc.len(), weight, one),
        (false, _) => (0..doc.len()).map(one).collect(),
    }
}

/// The largest report file read: `$CUGUARD_MAX_REPORT_BYTES` when set to a number, else
/// [`DEFAULT_MAX_REPORT_BYTES`].
pub fn max_report_bytes() -> u64 {
    std::env::var("CUGUARD_MAX_REPORT_BYTES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_REPORT_BYTES)
}

/// Expands PATHs and maps every report, as [`expand`] then [`map_reports`].
pub fn map_paths<T, F>(paths: &[PathBuf], f: F) -> Result<Vec<(Source, T)>, InputError>
where
    T: Send,
    F: Fn(&Source, Report) -> T + Sync,
{
    map_reports(&expand(paths)?, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
    }

    #[test]
    fn globs_and_dirs_expand_sorted_without_duplicates() {
        let dir = fixtures();
        let one = dir.join("events.json");
        let pattern = dir.join("*.json");
        let got = expand(&[one.clone(), pattern]).unwrap();
        assert_eq!(got[0], one);
        assert!(got.len() >= 3);
        let mut rest = got[1..].to_vec();
        rest.sort();
        assert_eq!(rest, got[1..].to_vec());
        assert_eq!(got.iter().filter(|p| **p == one).count(), 1);
    }

    #[test]
    fn missing_paths_and_empty_globs_are_errors() {
        let dir = fixtures();
        let e = expand(&[dir.join("nope.json")]).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("nope.json: no such file or directory"),
            "{e}"
        );
        let e = expand(&[dir.join("nope-*.json")]).unwrap_err();
        assert!(
            e.to_string().ends_with("nope-*.json: no file matches"),
            "{e}"
        );
    }

    #[test]
    fn an_input_that_may_be_empty_lets_a_glob_match_nothing_only_alone() {
        let dir = fixtures();
        let none = dir.join("nope-*.json");
        assert_eq!(
            expand_maybe_empty(std::slice::from_ref(&none)).unwrap(),
            Vec::<PathBuf>::new()
        );
        let e = expand_maybe_empty(&[dir.join("events.json"), none]).unwrap_err();
        assert!(matches!(e, InputError::NoMatch(_)), "{e}");
        let e = expand_maybe_empty(&[dir.join("nope.json")]).unwrap_err();
        assert!(matches!(e, InputError::NotFound(_)), "{e}");
    }

    /// Items start in order and are taken in order, each once, and whenever one starts, what
    /// is in flight (started, not yet taken) is within the budget or fewer than the minimum
    /// items; an item heavier than the budget still runs.
    #[test]
    fn work_in_flight_stays_within_its_weight() {
        use std::sync::atomic::{AtomicU64, AtomicUsize};
        let weights: Vec<u64> = (0..400u64)
            .map(|i| match i % 7 {
                0 => IN_FLIGHT_BYTES + 1,
                1 | 2 => IN_FLIGHT_BYTES / 3,
                _ => (i * 7919) % (1 << 20),
            })
            .collect();
        let (bytes, items) = (AtomicU64::new(0), AtomicUsize::new(0));
        let mut taken = Vec::new();
        parallel_in_order(
            weights.len(),
            |i| weights[i],
            |i| {
                let b = bytes.fetch_add(weights[i], Ordering::SeqCst) + weights[i];
                let k = items.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(
                    k <= MIN_IN_FLIGHT || b <= IN_FLIGHT_BYTES,
                    "{k} items, {b} bytes in flight at {i}"
                );
                std::thread::sleep(std::time::Duration::from_micros((i * 37 % 11) as u64 * 50));
                Ok::<usize, ()>(i)
            },
            |i| {
                bytes.fetch_sub(weights[i], Ordering::SeqCst);
                items.fetch_sub(1, Ordering::SeqCst);
                taken.push(i);
            },
        )
        .unwrap();
        assert_eq!(taken, (0..weights.len()).collect::<Vec<_>>());
    }

    /// A panic in one item ends the call with it, however much weight the item held: the
    /// workers waiting to start are stopped.
    #[test]
    fn a_panicking_item_stops_the_workers_waiting_for_its_weight() {
        let got = std::panic::catch_unwind(|| {
            parallel_in_order(
                64,
                |_| IN_FLIGHT_BYTES,
                |i| {
                    if i == 1 {
                        panic!("item 1");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    Ok::<usize, ()>(i)
                },
                |_| {},
            )
        });
        assert!(got.is_err());
    }

    /// A lone merged report's processes are read within the bound on input in flight, as
    /// files are: with its first process held up, the processes after it do not pile up
    /// behind it, and every one is handed on, in order.
    #[test]
    fn a_merged_reports_processes_stay_within_the_weight_in_flight() {
        use std::sync::atomic::{AtomicU64, AtomicUsize};
        let report = std::fs::read_to_string(fixtures().join("events.json")).unwrap();
        let body = report.trim().strip_prefix('{').unwrap();
        // Each process a third of the budget: two may be in flight, never three.
        let pad = "x".repeat((IN_FLIGHT_BYTES / 3) as usize);
        let processes: Vec<String> = (0..8)
            .map(|_| format!("{{\"pad\":\"{pad}\",{body}"))
            .collect();
        let weight = processes[0].len() as u64;
        let text = format!(
            "{{\"schema\":\"cuguard-report\",\"schema_version\":1,\"merged\":\
             {{\"created_unix_ms\":0,\"inputs\":[]}},\"processes\":[{}]}}",
            processes.join(",")
        );
        let path =
            std::env::temp_dir().join(format!("cuguard-input-merged-{}.json", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let (bytes, items, most) = (AtomicU64::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        let mut taken = Vec::new();
        let got = for_each_folded(
            std::slice::from_ref(&path),
            0,
            |source, report, _| {
                if source.index == Some(0) {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                let b = bytes.fetch_add(weight, Ordering::SeqCst) + weight;
                let k = items.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(k, Ordering::SeqCst);
                assert!(
                    k <= MIN_IN_FLIGHT || b <= IN_FLIGHT_BYTES,
                    "{k} processes, {b} bytes in flight at {source}"
                );
                report.process.pid
            },
            |source, pid| {
                bytes.fetch_sub(weight, Ordering::SeqCst);
                items.fetch_sub(1, Ordering::SeqCst);
                taken.push((source.index, pid));
            },
        );
        std::fs::remove_file(&path).unwrap();
        got.unwrap();
        let expected: Vec<(Option<usize>, u32)> = (0..8).map(|i| (Some(i), 777)).collect();
        assert_eq!(taken, expected);
        assert!(most.into_inner() <= MIN_IN_FLIGHT);
    }

    #[test]
    fn map_keeps_input_order() {
        let dir = fixtures();
        let files: Vec<PathBuf> = ["leaks-two-contexts.json", "events.json", "incomplete.json"]
            .iter()
            .map(|n| dir.join(n))
            .collect();
        let got = map_reports(&files, |_, r| r.process.pid).unwrap();
        let pids: Vec<u32> = got.iter().map(|(_, p)| *p).collect();
        assert_eq!(pids, [4242, 777, 9001]);
    }
}
