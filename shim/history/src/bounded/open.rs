//! Opening a history ([`History::open`]): one walk over the files' chunks that keeps what names
//! the stacks, the clocks, the losses and where each checkpoint is; the spans the checkpoints sum
//! up; then a read of each file's last span, which no checkpoint sums up.

use std::collections::{HashMap, HashSet};

use super::{Chunks, History, MAX_CLOCKS, Source, Span, Start, Stop, Tail, thin};
use crate::phases::{MAX_EVENTS as MAX_PHASE_EVENTS, Phases};
use crate::replay::{Clock, Lost, Module, Replay};
use crate::{Action, CHECKPOINT_HEAD, Checkpoint, Chunk, Error, HEADER_LEN, Header, Raw};

impl<S: Source> History<S> {
    /// Walks the segment files (oldest first): an error when the first is not a history this
    /// version reads, or the files are of different processes; a file cut short or damaged is
    /// read up to there ([`Replay::cut`]).
    pub fn open(files: Vec<S>) -> Result<History<S>, Error> {
        let mut scan = Scan::default();
        for (i, src) in files.iter().enumerate() {
            scan.file(i, src)?;
            if scan.meta.cut.is_some() {
                break;
            }
        }
        let mut files = files;
        files.truncate(scan.versions.len());
        let (mut h, last_tsc) = scan.into_history(files);
        h.read_last_spans(last_tsc)?;
        Ok(h)
    }

    /// Reads each file's last span, from its last start to its end (it holds at most a
    /// checkpoint's worth of events; all of a history without checkpoints): the allocations,
    /// the span's peak and refusals, where the history ends.
    fn read_last_spans(&mut self, last_tsc: u64) -> Result<(), Error> {
        let mut allocations = 0u64;
        for file in 0..self.files.len() {
            let Some(k) = self.starts.iter().rposition(|s| s.file == file) else {
                continue;
            };
            let begin = self.begin_at(k)?;
            let k = begin.start;
            let from_file_begin = self.starts[k].checkpoint.is_none();
            if let Some(f) = self.starts[k].checkpoint {
                allocations += self.checkpoint_head(file, f).map_or(0, |c| c.allocations);
            }
            let mut tail = Tail::default();
            let left = self.stream(begin, Stop::FileEnd(file), &mut |step| tail.note(step))?;
            allocations += tail.made;
            if file == 0 {
                // Blocks the oldest file restates (made before it began) are the history's.
                allocations += if from_file_begin {
                    tail.restated
                } else {
                    self.live_chunks(0)?
                        .iter()
                        .filter(|(_, r)| Action::of(r.kind) == Some(Action::Alloc))
                        .count() as u64
                };
            }
            self.meta.ends_ns = self.meta.ends_ns.max(left.last_ns);
            let starts = &self.starts;
            self.spans
                .retain(|s| !(s.start >= k && starts[s.start].file == file));
            let (peak_ns, peak_bytes) = std::mem::take(&mut tail.peak).done();
            self.spans.push(Span {
                start: k,
                end: None,
                peak_bytes,
                peak_ns: Some(peak_ns),
                ooms: tail.ooms,
            });
        }
        self.allocations = allocations;
        self.spans.sort_by_key(|s| s.start);
        self.meta.ends_ns = self
            .meta
            .ends_ns
            .max(self.clock.ns(last_tsc))
            .max(self.clock.last_ns());
        Ok(())
    }
}

/// What the walk over the files' chunks gathers, file after file.
#[derive(Default)]
struct Scan {
    meta: Replay,
    versions: Vec<u32>,
    /// Each file's sound part (see [`History::sound`]).
    sound: Vec<u64>,
    clocks: Vec<(u64, u64)>,
    /// Each `Dropped` chunk's count, first and last tsc.
    drops: Vec<(u64, u64, u64)>,
    modules_seen: HashSet<(u64, u64, String)>,
    end_tsc: Option<u64>,
    /// The first file's header.
    first: Option<Header>,
    /// Where reads can begin, each checkpoint's with its head.
    starts: Vec<(Start, Option<Checkpoint>)>,
    /// Phase events (with their threads) and names, paired once the clock is known.
    phase_events: Vec<(u32, Raw)>,
    phase_names: HashMap<u32, String>,
    phases_unread: u64,
}

impl Scan {
    /// Walks file `i`: its header, then its chunks up to its end or the first that cannot be
    /// read (noted as the history's cut).
    fn file<S: Source>(&mut self, i: usize, src: &S) -> Result<(), Error> {
        let mut head = [0u8; HEADER_LEN];
        let got = src.read_at(&mut head, 0).map_err(|_| Error::NotHistory)?;
        let h = Header::decode(&head[..got])?;
        match self.first {
            None => {
                self.meta.pid = h.pid;
                self.meta.run = h.run;
                self.meta.start_unix_ns = h.start_unix_ns;
                self.meta.first_segment = h.segment;
                self.first = Some(h);
            }
            Some(f) if f.pid != h.pid || f.start_unix_ns != h.start_unix_ns => {
                return Err(Error::Corrupt {
                    at: 0,
                    why: "the segments are of different processes",
                });
            }
            Some(_) => {}
        }
        self.versions.push(h.version);
        let begin = self.starts.len();
        self.starts.push((
            Start {
                file: i,
                checkpoint: None,
                ready_ns: 0,
            },
            None,
        ));
        let (began, good) = self.chunks(i, src, h.version);
        self.sound.push(if self.meta.cut.is_some() {
            good
        } else {
            src.size()
        });
        self.starts[begin].0.ready_ns = began;
        if i == 0 && self.meta.first_segment != 0 {
            self.meta.begins_ns = began;
        }
        Ok(())
    }

    /// Walks file `i`'s chunks, keeping what [`Scan::note`] keeps and where each checkpoint is;
    /// events and live blocks are skipped (a window reads them where it needs them). Returns
    /// the moment the file began (its last clock before any content, ns since the start) and
    /// where its last chunk read began.
    fn chunks<S: Source>(&mut self, i: usize, src: &S, version: u32) -> (u64, u64) {
        let mut before_content = true;
        let mut began = 0u64;
        let mut chunks = Chunks::new(src, HEADER_LEN as u64, src.size());
        let mut good;
        loop {
            good = chunks.next;
            let f = match chunks.frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    self.meta.cut = Some(e);
                    break;
                }
            };
            let chunk = match f.kind {
                // Read where a window needs them.
                crate::EVENTS | crate::LIVE => {
                    before_content = false;
                    continue;
                }
                crate::CHECKPOINT => {
                    before_content = false;
                    match chunks
                        .bytes(f.at + 9, CHECKPOINT_HEAD.min(f.len as usize))
                        .ok()
                        .and_then(crate::decode_checkpoint_head)
                    {
                        Some(c) => self.starts.push((
                            Start {
                                file: i,
                                checkpoint: Some(f),
                                ready_ns: 0,
                            },
                            Some(c),
                        )),
                        None => {
                            self.meta.cut = Some(Error::Corrupt {
                                at: f.at,
                                why: "a checkpoint is cut short",
                            });
                            break;
                        }
                    }
                    continue;
                }
                _ => match chunks.chunk(f, version) {
                    Ok(Some(c)) => c,
                    Ok(None) => continue,
                    Err(e) => {
                        self.meta.cut = Some(e);
                        break;
                    }
                },
            };
            self.note(chunk, before_content, &mut began);
        }
        (began, good)
    }

    /// Keeps what a chunk other than events, live blocks and checkpoints says: clocks (and,
    /// before the file's content, the moment it began), stacks, losses, modules, Python code,
    /// phases and their names, and the end.
    fn note(&mut self, chunk: Chunk, before_content: bool, began: &mut u64) {
        match chunk {
            Chunk::Clock {
                tsc,
                since_start_ns,
                ..
            } => {
                if before_content {
                    *began = (*began).max(since_start_ns);
                }
                self.clocks.push((tsc, since_start_ns));
                if self.clocks.len() > 2 * MAX_CLOCKS {
                    thin(&mut self.clocks);
                }
            }
            Chunk::Stack { id, frames } => {
                self.meta.stacks.insert(id, frames);
            }
            Chunk::Dropped {
                count,
                first_tsc,
                last_tsc,
            } => self.drops.push((count, first_tsc, last_tsc)),
            Chunk::Module {
                start,
                end,
                bias,
                path,
                build_id,
            } if self.modules_seen.insert((start, end, path.clone())) => {
                self.meta.modules.push(Module {
                    start,
                    end,
                    bias,
                    path,
                    build_id: (!build_id.is_empty()).then_some(build_id),
                });
            }
            Chunk::Code { id, file, function } => {
                self.meta.codes.insert(id, (file, function));
            }
            Chunk::End { tsc } => self.end_tsc = Some(tsc),
            Chunk::Name { id, text } => {
                self.phase_names.insert(id, text);
            }
            Chunk::Phases { thread, events } => {
                let room = MAX_PHASE_EVENTS.saturating_sub(self.phase_events.len());
                self.phases_unread += events.len().saturating_sub(room) as u64;
                self.phase_events
                    .extend(events.into_iter().take(room).map(|e| (thread, e)));
            }
            _ => {}
        }
    }

    /// The history over `files` (those walked): the clock, the losses, the starts and the spans
    /// their checkpoints sum up; with the latest tsc a checkpoint or the end names.
    fn into_history<S: Source>(self, files: Vec<S>) -> (History<S>, u64) {
        let Scan {
            mut meta,
            versions,
            sound,
            clocks,
            drops,
            end_tsc,
            starts,
            phase_events,
            phase_names,
            phases_unread,
            ..
        } = self;
        meta.whole = end_tsc.is_some() && meta.cut.is_none();
        let clock = Clock::new(clocks);
        meta.phases = Phases::pair(phase_events, phase_names, |tsc| clock.ns(tsc));
        meta.phases.odd.unread = phases_unread;
        meta.lost = drops
            .into_iter()
            .map(|(count, a, b)| Lost {
                count,
                from_ns: clock.ns(a),
                to_ns: clock.ns(b),
            })
            .collect();
        let mut spans = Vec::new();
        let mut kept: Vec<Start> = Vec::with_capacity(starts.len());
        let mut last_tsc = end_tsc.unwrap_or(0);
        for (k, (mut s, c)) in starts.into_iter().enumerate() {
            if let Some(c) = &c {
                s.ready_ns = clock.ns(c.tsc);
                last_tsc = last_tsc.max(c.tsc);
                // It sums up the span since the start before it, in its file.
                if kept.last().is_some_and(|p| p.file == s.file) {
                    spans.push(Span {
                        start: k - 1,
                        end: Some(k),
                        peak_bytes: c.peak_bytes,
                        peak_ns: None,
                        ooms: c.ooms,
                    });
                }
            }
            kept.push(s);
        }
        let h = History {
            files,
            versions,
            sound,
            meta,
            clock,
            starts: kept,
            spans,
            allocations: 0,
            notes: Default::default(),
        };
        (h, last_tsc)
    }
}
