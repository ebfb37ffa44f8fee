//! The cuguard stats page: one small, fixed-layout file per process under the shim, kept up to
//! date while the process runs, that `cuguard top` and `cuguard exporter` read.
//!
//! The shim's reporter thread fills a [`Page`] at least once a second (never on the allocation
//! path), [`encode`]s it, and publishes the bytes into a shared mapping of its page file with the
//! sequence protocol below. Readers [`decode`] what they read and trust nothing: a page that is
//! short, zeroed, garbage, from another version, or caught mid-write is an error, never a panic.
//!
//! ```
//! use cuguard_page::{decode, encode, DevicePage, Page};
//! let mut page = Page { pid: 42, exe: "python3".into(), ..Page::default() };
//! page.devices.push(DevicePage { ordinal: 0, live_bytes: 3 << 20, ..DevicePage::default() });
//! let bytes = encode(&page, 2);
//! assert_eq!(decode(&bytes[..]).unwrap(), page);
//! ```
//!
//! # Layout (version 1)
//!
//! [`PAGE_SIZE`] bytes, little-endian, every field at a fixed offset. Strings have a fixed capacity
//! (in bytes, UTF-8, cut at a character boundary, NUL-padded). Arrays have a fixed number of slots,
//! of which the counts in the process block say how many are used.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `CUGUARDP` |
//! | 8 | 4 | version ([`VERSION`]) |
//! | 12 | 4 | size ([`PAGE_SIZE`]) |
//! | 16 | 8 | sequence: odd while the writer is writing, even when the page is whole |
//! | 24 | 8 | checksum: FNV-1a 64 of bytes 64 to the end |
//! | 64 | [`PROCESS_LEN`] | the process block |
//! | … | [`DEVICE_LEN`] × [`MAX_DEVICES`] | devices |
//! | … | [`SITE_LEN`] × [`MAX_SITES`] | sites |
//! | … | [`CONTEXT_LEN`] × [`MAX_CONTEXTS`] | contexts |
//! | … | [`TAG_LEN`] × [`MAX_TAGS`] | tags (their count in the process block's word at 104, 0 in a page written before tags) |
//!
//! # Publishing and reading
//!
//! The writer stores an odd sequence number, copies bytes 24 onward (checksum and body), then
//! stores the next even number. A reader copies the whole page and accepts it only if the
//! sequence is even and the checksum matches; otherwise it reads again (a torn copy fails the
//! checksum). The checksum also rejects pages someone else wrote, which the file's mode (0600)
//! and directory (0700, per user) should already prevent.

#![deny(unsafe_code)]

use std::fmt;

/// The layout version this crate writes and reads.
pub const VERSION: u32 = 1;
/// The page's size in bytes.
pub const PAGE_SIZE: usize = 16384;
/// The first bytes of every page.
pub const MAGIC: [u8; 8] = *b"CUGUARDP";
/// Where the sequence number lives.
pub const SEQ_OFFSET: usize = 16;
/// Where the checksum lives; the writer copies from here on.
pub const CHECKSUM_OFFSET: usize = 24;
/// Where the body (what the checksum covers) starts.
pub const BODY_OFFSET: usize = 64;

/// Devices a page has room for.
pub const MAX_DEVICES: usize = 16;
/// Sites a page has room for (the process's top sites by live bytes).
pub const MAX_SITES: usize = 16;
/// Contexts a page has room for.
pub const MAX_CONTEXTS: usize = 16;
/// Tags a page has room for (the process's top tags by live bytes).
pub const MAX_TAGS: usize = 16;
/// Samples of live bytes each device keeps (the sparkline), oldest first.
pub const HISTORY: usize = 60;

const EXE_CAP: usize = 256;
const WORKER_CAP: usize = 64;
const HOST_CAP: usize = 64;
const REPORT_CAP: usize = 256;
const UUID_CAP: usize = 48;
const NAME_CAP: usize = 64;
const OWNER_CAP: usize = 32;
const LABEL_CAP: usize = 160;
const TAG_CAP: usize = 48;

/// Bytes of the process block.
pub const PROCESS_LEN: usize = 4 * 4 + 8 * 6 + 4 * 4 + EXE_CAP + WORKER_CAP + HOST_CAP + REPORT_CAP;
/// Bytes of one device slot.
pub const DEVICE_LEN: usize = 4 * 2 + 8 * 5 + 4 * 2 + 8 * HISTORY + UUID_CAP + NAME_CAP;
/// Bytes of one site slot.
pub const SITE_LEN: usize = 4 * 2 + 8 * 3 + OWNER_CAP + LABEL_CAP;
/// Bytes of one context slot.
pub const CONTEXT_LEN: usize = 4 * 4 + 8 * 2;
/// Bytes of one tag slot.
pub const TAG_LEN: usize = 8 * 2 + TAG_CAP;

const DEVICES_OFFSET: usize = BODY_OFFSET + PROCESS_LEN;
const SITES_OFFSET: usize = DEVICES_OFFSET + DEVICE_LEN * MAX_DEVICES;
const CONTEXTS_OFFSET: usize = SITES_OFFSET + SITE_LEN * MAX_SITES;
const TAGS_OFFSET: usize = CONTEXTS_OFFSET + CONTEXT_LEN * MAX_CONTEXTS;
const END: usize = TAGS_OFFSET + TAG_LEN * MAX_TAGS;
const _: () = assert!(END <= PAGE_SIZE);

/// What one process under the shim holds, as its page says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// The process.
    pub pid: u32,
    /// Its real user id.
    pub uid: u32,
    /// When it started (the shim's start), in milliseconds since the Unix epoch; with the pid,
    /// this names the page, so a reused pid never reads as the old process.
    pub start_unix_ms: u64,
    /// When the writer last published the page.
    pub updated_unix_ms: u64,
    /// Its rank in a distributed job (`RANK`, …), if it has one.
    pub rank: Option<u32>,
    /// The signal that asks it for a snapshot report (`cuguard snapshot`), if it answers one.
    pub snapshot_signal: Option<i32>,
    /// Allocations that returned out of memory to the program.
    pub oom_total: u64,
    /// Alerts fired (`CUGUARD_WARN_AT` crossings).
    pub alerts_total: u64,
    /// Live allocations: what would be reported as leaks if the process ended now.
    pub live_allocations: u64,
    /// Contexts alive.
    pub contexts_live: u32,
    /// The executable's path.
    pub exe: String,
    /// Its worker name in a distributed job (Dask's worker, …), if it has one.
    pub worker: Option<String>,
    /// The host's name.
    pub host: String,
    /// Where its report will go (the expanded `CUGUARD_REPORT`).
    pub report: String,
    /// Its devices, at most [`MAX_DEVICES`].
    pub devices: Vec<DevicePage>,
    /// Its top sites by live bytes, at most [`MAX_SITES`].
    pub sites: Vec<SitePage>,
    /// Its live contexts, at most [`MAX_CONTEXTS`].
    pub contexts: Vec<ContextPage>,
    /// Its tags with live memory (`cuguard.tag`), largest first, at most [`MAX_TAGS`].
    pub tags: Vec<TagPage>,
}

/// One device's memory, as a page holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DevicePage {
    /// The device's ordinal.
    pub ordinal: u32,
    /// The device's total memory.
    pub total_bytes: u64,
    /// Bytes the program holds now (what the shim tracks as live).
    pub live_bytes: u64,
    /// The highest `live_bytes` so far.
    pub peak_bytes: u64,
    /// Bytes the shim's pool holds from the driver (live and idle), 0 with the pool off.
    pub reserved_bytes: u64,
    /// How much `live_bytes` rose over the history below (last sample minus the first), negative
    /// when it fell.
    pub growth_bytes: i64,
    /// Milliseconds between history samples.
    pub history_interval_ms: u32,
    /// Live bytes sampled over time, oldest first, at most [`HISTORY`].
    pub history: Vec<u64>,
    /// The device's UUID as `nvidia-smi` prints it (`GPU-…`), when the driver gave one.
    pub uuid: Option<String>,
    /// The device's name.
    pub name: String,
}

/// One site (a distinct allocating stack's chosen frame) and what it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SitePage {
    /// The device its memory is on.
    pub device: u32,
    /// Bytes live from this site.
    pub live_bytes: u64,
    /// Allocations live from this site.
    pub allocations: u64,
    /// How much its live bytes rose over the sampled window (negative when they fell).
    pub growth_bytes: i64,
    /// Who holds its memory (an owner id: `program`, `torch-caching-allocator`, …).
    pub owner: String,
    /// The site, as `summary` prints it (`step (train.py:42)`).
    pub label: String,
}

/// Device memory live under one tag (`cuguard.tag`, `cuguard_tag_push`), counted by the tag
/// it was made with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagPage {
    /// The tag (cut at 48 bytes).
    pub name: String,
    /// Bytes live under it.
    pub live_bytes: u64,
    /// Allocations live under it.
    pub allocations: u64,
}

/// One live context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContextPage {
    /// The context's id in the report.
    pub id: u32,
    /// Its device.
    pub device: u32,
    /// Whether it is the device's primary context.
    pub primary: bool,
    /// When it was created, in milliseconds since the process started.
    pub created_ms: u64,
    /// Bytes live in it.
    pub live_bytes: u64,
}

/// Why bytes are not a page this reader can trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageError {
    /// Fewer bytes than a page (a truncated file).
    Short(usize),
    /// The magic is wrong: not a page, or zeroed.
    NotAPage,
    /// A layout version this reader does not know (a newer cuguard wrote it).
    Version(u32),
    /// The size field disagrees with the version's page size.
    Size(u32),
    /// The writer was writing (the sequence is odd); read again.
    Writing,
    /// The checksum does not match: torn (read again) or not written by the shim.
    Checksum,
    /// A field holds what the writer never writes.
    Garbage(&'static str),
}

impl PageError {
    /// Whether reading again may succeed (the writer was caught mid-write).
    pub fn is_transient(&self) -> bool {
        matches!(self, PageError::Writing | PageError::Checksum)
    }
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::Short(n) => write!(f, "truncated ({n} of {PAGE_SIZE} bytes)"),
            PageError::NotAPage => f.write_str("not a cuguard page (bad magic)"),
            PageError::Version(v) => write!(f, "layout version {v}, this cuguard reads {VERSION}"),
            PageError::Size(s) => write!(f, "size field {s}, expected {PAGE_SIZE}"),
            PageError::Writing => f.write_str("being written"),
            PageError::Checksum => f.write_str("checksum mismatch"),
            PageError::Garbage(what) => write!(f, "garbage in {what}"),
        }
    }
}

impl std::error::Error for PageError {}

/// FNV-1a, 64 bits.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The page's bytes, whole, with sequence number `seq` (even) and the checksum filled in.
///
/// Lists longer than their slots are cut; strings longer than their capacity are cut at a
/// character boundary.
pub fn encode(page: &Page, seq: u64) -> Box<[u8; PAGE_SIZE]> {
    let mut buf = Box::new([0u8; PAGE_SIZE]);
    let b = &mut buf[..];
    b[0..8].copy_from_slice(&MAGIC);
    put_u32(b, 8, VERSION);
    put_u32(b, 12, PAGE_SIZE as u32);
    put_u64(b, SEQ_OFFSET, seq & !1);

    let devices = &page.devices[..page.devices.len().min(MAX_DEVICES)];
    let sites = &page.sites[..page.sites.len().min(MAX_SITES)];
    let contexts = &page.contexts[..page.contexts.len().min(MAX_CONTEXTS)];
    let tags = &page.tags[..page.tags.len().min(MAX_TAGS)];
    let mut w = Cursor::new(BODY_OFFSET);
    w.u32(b, page.pid);
    w.u32(b, page.uid);
    w.u32(b, page.rank.unwrap_or(u32::MAX));
    w.u32(b, page.snapshot_signal.map_or(0, |s| s as u32));
    w.u64(b, page.start_unix_ms);
    w.u64(b, page.updated_unix_ms);
    w.u64(b, page.oom_total);
    w.u64(b, page.alerts_total);
    w.u64(b, page.live_allocations);
    w.u64(b, tags.len() as u64);
    w.u32(b, page.contexts_live);
    w.u32(b, devices.len() as u32);
    w.u32(b, sites.len() as u32);
    w.u32(b, contexts.len() as u32);
    w.str(b, &page.exe, EXE_CAP);
    w.str(b, page.worker.as_deref().unwrap_or(""), WORKER_CAP);
    w.str(b, &page.host, HOST_CAP);
    w.str(b, &page.report, REPORT_CAP);
    debug_assert_eq!(w.at, DEVICES_OFFSET);

    for (i, d) in devices.iter().enumerate() {
        let mut w = Cursor::new(DEVICES_OFFSET + i * DEVICE_LEN);
        let history = &d.history[d.history.len().saturating_sub(HISTORY)..];
        w.u32(b, d.ordinal);
        w.u32(b, history.len() as u32);
        w.u64(b, d.total_bytes);
        w.u64(b, d.live_bytes);
        w.u64(b, d.peak_bytes);
        w.u64(b, d.reserved_bytes);
        w.u64(b, d.growth_bytes as u64);
        w.u32(b, d.history_interval_ms);
        w.u32(b, 0);
        for (k, &v) in history.iter().enumerate() {
            put_u64(b, w.at + 8 * k, v);
        }
        w.at += 8 * HISTORY;
        w.str(b, d.uuid.as_deref().unwrap_or(""), UUID_CAP);
        w.str(b, &d.name, NAME_CAP);
    }
    for (i, s) in sites.iter().enumerate() {
        let mut w = Cursor::new(SITES_OFFSET + i * SITE_LEN);
        w.u32(b, s.device);
        w.u32(b, 0);
        w.u64(b, s.live_bytes);
        w.u64(b, s.allocations);
        w.u64(b, s.growth_bytes as u64);
        w.str(b, &s.owner, OWNER_CAP);
        w.str(b, &s.label, LABEL_CAP);
    }
    for (i, c) in contexts.iter().enumerate() {
        let mut w = Cursor::new(CONTEXTS_OFFSET + i * CONTEXT_LEN);
        w.u32(b, c.id);
        w.u32(b, c.device);
        w.u32(b, u32::from(c.primary));
        w.u32(b, 0);
        w.u64(b, c.created_ms);
        w.u64(b, c.live_bytes);
    }
    for (i, t) in tags.iter().enumerate() {
        let mut w = Cursor::new(TAGS_OFFSET + i * TAG_LEN);
        w.u64(b, t.live_bytes);
        w.u64(b, t.allocations);
        w.str(b, &t.name, TAG_CAP);
    }
    let sum = checksum(&b[BODY_OFFSET..]);
    put_u64(b, CHECKSUM_OFFSET, sum);
    buf
}

/// The page these bytes hold, if they are a whole page of this version that the shim wrote.
pub fn decode(b: &[u8]) -> Result<Page, PageError> {
    check_head(b)?;

    let mut r = Cursor::new(BODY_OFFSET);
    let pid = r.get_u32(b);
    let uid = r.get_u32(b);
    let rank = r.get_u32(b);
    let signal = r.get_u32(b);
    let start_unix_ms = r.get_u64(b);
    let updated_unix_ms = r.get_u64(b);
    let oom_total = r.get_u64(b);
    let alerts_total = r.get_u64(b);
    let live_allocations = r.get_u64(b);
    let n_tags = count(
        u32::try_from(r.get_u64(b)).unwrap_or(u32::MAX),
        MAX_TAGS,
        "the tag count",
    )?;
    let contexts_live = r.get_u32(b);
    let n_devices = count(r.get_u32(b), MAX_DEVICES, "the device count")?;
    let n_sites = count(r.get_u32(b), MAX_SITES, "the site count")?;
    let n_contexts = count(r.get_u32(b), MAX_CONTEXTS, "the context count")?;
    let exe = r.get_str(b, EXE_CAP, "exe")?;
    let worker = r.get_str(b, WORKER_CAP, "worker")?;
    let host = r.get_str(b, HOST_CAP, "host")?;
    let report = r.get_str(b, REPORT_CAP, "report")?;

    let mut devices = Vec::with_capacity(n_devices);
    for i in 0..n_devices {
        devices.push(decode_device(b, i)?);
    }
    let mut sites = Vec::with_capacity(n_sites);
    for i in 0..n_sites {
        sites.push(decode_site(b, i)?);
    }
    let mut contexts = Vec::with_capacity(n_contexts);
    for i in 0..n_contexts {
        contexts.push(decode_context(b, i)?);
    }
    let mut tags = Vec::with_capacity(n_tags);
    for i in 0..n_tags {
        let mut r = Cursor::new(TAGS_OFFSET + i * TAG_LEN);
        let live_bytes = r.get_u64(b);
        let allocations = r.get_u64(b);
        let name = r.get_str(b, TAG_CAP, "a tag")?;
        tags.push(TagPage {
            name,
            live_bytes,
            allocations,
        });
    }
    Ok(Page {
        pid,
        uid,
        start_unix_ms,
        updated_unix_ms,
        rank: (rank != u32::MAX).then_some(rank),
        snapshot_signal: (signal != 0).then_some(signal as i32),
        oom_total,
        alerts_total,
        live_allocations,
        contexts_live,
        exe,
        worker: (!worker.is_empty()).then_some(worker),
        host,
        report,
        devices,
        sites,
        contexts,
        tags,
    })
}

/// Checks that `b` is a whole page of this version, not being written, its checksum right.
fn check_head(b: &[u8]) -> Result<(), PageError> {
    if b.len() < PAGE_SIZE {
        // A page of another version may have another size: say which version it is first.
        if b.len() >= 16 && b[0..8] == MAGIC && get_u32(b, 8) != VERSION {
            return Err(PageError::Version(get_u32(b, 8)));
        }
        return Err(PageError::Short(b.len()));
    }
    if b[0..8] != MAGIC {
        return Err(PageError::NotAPage);
    }
    let version = get_u32(b, 8);
    if version != VERSION {
        return Err(PageError::Version(version));
    }
    let size = get_u32(b, 12);
    if size as usize != PAGE_SIZE {
        return Err(PageError::Size(size));
    }
    if get_u64(b, SEQ_OFFSET) & 1 == 1 {
        return Err(PageError::Writing);
    }
    if get_u64(b, CHECKSUM_OFFSET) != checksum(&b[BODY_OFFSET..PAGE_SIZE]) {
        return Err(PageError::Checksum);
    }
    Ok(())
}

/// The page's device `i`.
fn decode_device(b: &[u8], i: usize) -> Result<DevicePage, PageError> {
    let mut r = Cursor::new(DEVICES_OFFSET + i * DEVICE_LEN);
    let ordinal = r.get_u32(b);
    let n_history = count(r.get_u32(b), HISTORY, "a device's history length")?;
    let total_bytes = r.get_u64(b);
    let live_bytes = r.get_u64(b);
    let peak_bytes = r.get_u64(b);
    let reserved_bytes = r.get_u64(b);
    let growth_bytes = r.get_u64(b) as i64;
    let history_interval_ms = r.get_u32(b);
    let _pad = r.get_u32(b);
    let history = (0..n_history).map(|k| get_u64(b, r.at + 8 * k)).collect();
    r.at += 8 * HISTORY;
    let uuid = r.get_str(b, UUID_CAP, "a device's uuid")?;
    let name = r.get_str(b, NAME_CAP, "a device's name")?;
    Ok(DevicePage {
        ordinal,
        total_bytes,
        live_bytes,
        peak_bytes,
        reserved_bytes,
        growth_bytes,
        history_interval_ms,
        history,
        uuid: (!uuid.is_empty()).then_some(uuid),
        name,
    })
}

/// The page's site `i`.
fn decode_site(b: &[u8], i: usize) -> Result<SitePage, PageError> {
    let mut r = Cursor::new(SITES_OFFSET + i * SITE_LEN);
    let device = r.get_u32(b);
    let _pad = r.get_u32(b);
    let live_bytes = r.get_u64(b);
    let allocations = r.get_u64(b);
    let growth_bytes = r.get_u64(b) as i64;
    let owner = r.get_str(b, OWNER_CAP, "a site's owner")?;
    let label = r.get_str(b, LABEL_CAP, "a site's label")?;
    Ok(SitePage {
        device,
        live_bytes,
        allocations,
        growth_bytes,
        owner,
        label,
    })
}

/// The page's context `i`.
fn decode_context(b: &[u8], i: usize) -> Result<ContextPage, PageError> {
    let mut r = Cursor::new(CONTEXTS_OFFSET + i * CONTEXT_LEN);
    let id = r.get_u32(b);
    let device = r.get_u32(b);
    let primary = match r.get_u32(b) {
        0 => false,
        1 => true,
        _ => return Err(PageError::Garbage("a context's primary flag")),
    };
    let _pad = r.get_u32(b);
    let created_ms = r.get_u64(b);
    let live_bytes = r.get_u64(b);
    Ok(ContextPage {
        id,
        device,
        primary,
        created_ms,
        live_bytes,
    })
}

/// The page file's name for a process: `PID-STARTMS.page`.
pub fn file_name(pid: u32, start_unix_ms: u64) -> String {
    format!("{pid}-{start_unix_ms}.page")
}

/// The pid and start time a page file's name says, if it is one.
pub fn parse_file_name(name: &str) -> Option<(u32, u64)> {
    let stem = name.strip_suffix(".page")?;
    let (pid, start) = stem.split_once('-')?;
    if pid.is_empty()
        || start.is_empty()
        || !pid.bytes().chain(start.bytes()).all(|c| c.is_ascii_digit())
    {
        return None;
    }
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Where a user's pages live, from the settings alone (nothing on disk is looked at): the shim
/// writes its page there, and `cuguard top` and `cuguard exporter` read them there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeDir {
    /// `CUGUARD_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/cuguard`: a directory the user chose, or
    /// one in the user's own runtime directory, which no one else can write to. Used as it is:
    /// made 0700 if missing, and the shim writes no page in it (and says so in one line) unless
    /// it is this user's and closed to others.
    Given(std::path::PathBuf),
    /// `/tmp/cuguard-UID`, in a directory every user can write to, where another user may have
    /// made it first (or put a link there). Then the shim uses a fresh private directory beside
    /// it, `/tmp/cuguard-UID.XXXXXXXX`, the same one for every process while it is there
    /// (`cuguard_files::private_dir`), and says so in one line; readers look in the asked
    /// directory, when it is this user's and closed to others, and in every such fresh one of
    /// this user's (`cuguard_files::fresh_dirs`). Readers and writers so agree without a word
    /// passed between them.
    Shared(std::path::PathBuf),
}

impl RuntimeDir {
    /// The directory asked for.
    pub fn path(&self) -> &std::path::Path {
        match self {
            RuntimeDir::Given(p) | RuntimeDir::Shared(p) => p,
        }
    }
}

/// The per-user directory the pages live in: `CUGUARD_RUNTIME_DIR` if set, else
/// `$XDG_RUNTIME_DIR/cuguard`, else `/tmp/cuguard-UID` ([`RuntimeDir`] says how each is used).
/// `env` looks a variable up.
pub fn runtime_dir(uid: u32, env: impl Fn(&str) -> Option<String>) -> RuntimeDir {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(dir) = set("CUGUARD_RUNTIME_DIR") {
        return RuntimeDir::Given(dir.into());
    }
    if let Some(xdg) = set("XDG_RUNTIME_DIR") {
        return RuntimeDir::Given(std::path::Path::new(&xdg).join("cuguard"));
    }
    RuntimeDir::Shared(format!("/tmp/cuguard-{uid}").into())
}

fn count(n: u32, max: usize, what: &'static str) -> Result<usize, PageError> {
    if n as usize > max {
        Err(PageError::Garbage(what))
    } else {
        Ok(n as usize)
    }
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A position in the page that fields are written at or read from, in order.
struct Cursor {
    at: usize,
}

impl Cursor {
    fn new(at: usize) -> Cursor {
        Cursor { at }
    }

    fn u32(&mut self, b: &mut [u8], v: u32) {
        put_u32(b, self.at, v);
        self.at += 4;
    }

    fn u64(&mut self, b: &mut [u8], v: u64) {
        put_u64(b, self.at, v);
        self.at += 8;
    }

    fn str(&mut self, b: &mut [u8], s: &str, cap: usize) {
        let mut n = s.len().min(cap);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        // A NUL inside the string would end it early on reading: cut there.
        let n = s.as_bytes()[..n].iter().position(|&c| c == 0).unwrap_or(n);
        b[self.at..self.at + n].copy_from_slice(&s.as_bytes()[..n]);
        self.at += cap;
    }

    fn get_u32(&mut self, b: &[u8]) -> u32 {
        let v = get_u32(b, self.at);
        self.at += 4;
        v
    }

    fn get_u64(&mut self, b: &[u8]) -> u64 {
        let v = get_u64(b, self.at);
        self.at += 8;
        v
    }

    fn get_str(&mut self, b: &[u8], cap: usize, what: &'static str) -> Result<String, PageError> {
        let field = &b[self.at..self.at + cap];
        self.at += cap;
        let n = field.iter().position(|&c| c == 0).unwrap_or(cap);
        if field[n..].iter().any(|&c| c != 0) {
            return Err(PageError::Garbage(what));
        }
        String::from_utf8(field[..n].to_vec()).map_err(|_| PageError::Garbage(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Page {
        Page {
            pid: 4242,
            uid: 1000,
            start_unix_ms: 1_764_580_000_123,
            updated_unix_ms: 1_764_580_009_000,
            rank: Some(3),
            snapshot_signal: Some(41),
            oom_total: 2,
            alerts_total: 1,
            live_allocations: 17,
            contexts_live: 1,
            exe: "/usr/bin/python3.12".into(),
            worker: Some("tcp://127.0.0.1:40001".into()),
            host: "gpu-node-7".into(),
            report: "/tmp/cuguard.python3.4242.json".into(),
            devices: vec![DevicePage {
                ordinal: 0,
                total_bytes: 150 << 30,
                live_bytes: 3 << 20,
                peak_bytes: 5 << 20,
                reserved_bytes: 64 << 20,
                growth_bytes: -(1 << 20),
                history_interval_ms: 1000,
                history: vec![1, 2, 3],
                uuid: Some("GPU-5c3a3f0e-1f2b-4c5d-8e9f-0a1b2c3d4e5f".into()),
                name: "NVIDIA H200".into(),
            }],
            sites: vec![SitePage {
                device: 0,
                live_bytes: 2 << 20,
                allocations: 2,
                growth_bytes: 1 << 20,
                owner: "program".into(),
                label: "step (train.py:42)".into(),
            }],
            contexts: vec![ContextPage {
                id: 1,
                device: 0,
                primary: true,
                created_ms: 12,
                live_bytes: 3 << 20,
            }],
            tags: vec![TagPage {
                name: "kv_cache".into(),
                live_bytes: 2 << 20,
                allocations: 2,
            }],
        }
    }

    #[test]
    fn a_page_reads_back_as_written() {
        let page = sample();
        assert_eq!(decode(&encode(&page, 8)[..]), Ok(page));
        assert_eq!(
            decode(&encode(&Page::default(), 0)[..]),
            Ok(Page::default())
        );
    }

    #[test]
    fn what_does_not_fit_is_cut() {
        let mut page = sample();
        page.exe = "é".repeat(200); // 400 bytes: cut at 256, a character boundary
        page.devices = (0..20)
            .map(|i| DevicePage {
                ordinal: i,
                ..DevicePage::default()
            })
            .collect();
        page.devices[15].history = (0..100).collect();
        let got = decode(&encode(&page, 2)[..]).unwrap();
        assert_eq!(got.exe, "é".repeat(128));
        assert_eq!(got.devices.len(), MAX_DEVICES);
        assert_eq!(
            got.devices[15].history,
            (40..100).collect::<Vec<u64>>(),
            "the newest samples kept"
        );
    }

    #[test]
    fn untrusted_pages_are_refused_with_the_reason() {
        let good = encode(&sample(), 2);
        assert_eq!(decode(&good[..100]), Err(PageError::Short(100)));
        assert_eq!(decode(&[0u8; PAGE_SIZE]), Err(PageError::NotAPage));
        let mut newer = good.clone();
        put_u32(&mut newer[..], 8, 2);
        assert_eq!(decode(&newer[..]), Err(PageError::Version(2)));
        assert_eq!(
            decode(&newer[..64]),
            Err(PageError::Version(2)),
            "a newer page of another size"
        );
        let mut writing = good.clone();
        put_u64(&mut writing[..], SEQ_OFFSET, 3);
        assert_eq!(decode(&writing[..]), Err(PageError::Writing));
        let mut torn = good.clone();
        torn[BODY_OFFSET + 200] ^= 1;
        assert_eq!(decode(&torn[..]), Err(PageError::Checksum));
        assert!(PageError::Checksum.is_transient() && !PageError::NotAPage.is_transient());
        // Counts beyond the slots, with a matching checksum (a hostile writer).
        let mut hostile = good.clone();
        put_u32(&mut hostile[..], BODY_OFFSET + 4 * 4 + 8 * 6 + 4, 1000);
        let sum = checksum(&hostile[BODY_OFFSET..]);
        put_u64(&mut hostile[..], CHECKSUM_OFFSET, sum);
        assert_eq!(
            decode(&hostile[..]),
            Err(PageError::Garbage("the device count"))
        );
    }

    #[test]
    fn file_names_and_directory() {
        assert_eq!(file_name(12, 34), "12-34.page");
        assert_eq!(parse_file_name("12-34.page"), Some((12, 34)));
        for bad in [
            "12-34.pag",
            "-34.page",
            "12-.page",
            "a-34.page",
            "12-3-4.page",
            "99999999999-1.page",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            runtime_dir(7, env(&[])),
            RuntimeDir::Shared("/tmp/cuguard-7".into())
        );
        assert_eq!(
            runtime_dir(7, env(&[("XDG_RUNTIME_DIR", "/run/user/7")])),
            RuntimeDir::Given("/run/user/7/cuguard".into())
        );
        assert_eq!(
            runtime_dir(7, env(&[("XDG_RUNTIME_DIR", "")])).path(),
            std::path::Path::new("/tmp/cuguard-7")
        );
        assert_eq!(
            runtime_dir(
                7,
                env(&[
                    ("XDG_RUNTIME_DIR", "/run/user/7"),
                    ("CUGUARD_RUNTIME_DIR", "/x")
                ])
            ),
            RuntimeDir::Given("/x".into())
        );
    }

    proptest! {
        #[test]
        fn any_bytes_decode_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..PAGE_SIZE + 8)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn any_corruption_of_a_good_page_is_caught_or_harmless(at in BODY_OFFSET..PAGE_SIZE, bit in 0u8..8) {
            let mut b = encode(&sample(), 2);
            b[at] ^= 1 << bit;
            prop_assert_eq!(decode(&b[..]), Err(PageError::Checksum));
        }
    }
}
