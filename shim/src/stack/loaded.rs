//! The process's modules as the report names them ([`Module`]): the ones loaded now, and those
//! the unwinder saw ([`note_module`], at each snapshot) that have since been unloaded, so their
//! ips can still be located ([`modules`], [`locate`]).

use super::dedup::SpinLock;
use super::phdr;

/// A loaded module (executable or shared object), for turning an ip into module + offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// The path the loader has for it; the main program's comes from `/proc/self/exe`.
    /// Pseudo-modules keep the loader's name (`linux-vdso.so.1`).
    pub path: String,
    /// The GNU build-id, lowercase hex, if the module has one.
    pub build_id: Option<String>,
    /// Load bias: `ip - base` is the address in the file's own vaddr space (what symbol tables
    /// and DWARF use). 0 for a non-PIE executable.
    pub base: u64,
    /// Absolute `[start, end)` covered by its loadable segments.
    pub start: u64,
    pub end: u64,
}

/// Modules seen by the unwinder but since unloaded, kept so their ips can still be located.
struct History {
    lock: SpinLock,
    mods: std::cell::UnsafeCell<Vec<phdr::Mapped>>,
}
// SAFETY: `mods` is only touched with `lock` held.
unsafe impl Sync for History {}

static HISTORY: History = History {
    lock: SpinLock::new(),
    mods: std::cell::UnsafeCell::new(Vec::new()),
};

impl History {
    fn with<R>(&self, f: impl FnOnce(&mut Vec<phdr::Mapped>) -> R) -> Option<R> {
        if !self.lock.lock_bounded() {
            return None;
        }
        // SAFETY: the lock is held.
        let r = f(unsafe { &mut *self.mods.get() });
        self.lock.unlock();
        Some(r)
    }
}

fn same(a: &phdr::Mapped, b: &phdr::Mapped) -> bool {
    a.start == b.start && a.end == b.end && a.name == b.name
}

/// Called for each module when a snapshot is built.
pub(super) fn note_module(m: &phdr::Mapped) {
    HISTORY.with(|h| {
        if !h.iter().any(|x| same(x, m)) {
            h.push(m.clone());
        }
    });
}

fn to_module(m: &phdr::Mapped) -> Module {
    let path = if m.name.is_empty() {
        std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        absolute(String::from_utf8_lossy(&m.name).into_owned(), m.start)
    };
    Module {
        path,
        build_id: m.build_id.as_ref().map(|b| hex(b)),
        base: m.bias,
        start: m.start,
        end: m.end,
    }
}

/// The loader's name for a module, made absolute. `dlopen("./libdeep.so")` (Python's
/// `ctypes.CDLL("./libdeep.so")`) leaves the loader with the relative name, which neither the
/// report's symbolizer nor a reader in another directory can open. The kernel's map of the
/// process (`/proc/self/maps`) names the file mapped at `start` absolutely; a module no longer
/// mapped is taken from the current directory. Names without a `/` (`linux-vdso.so.1`) and
/// absolute ones are kept.
pub(super) fn absolute(name: String, start: u64) -> String {
    if name.starts_with('/') || !name.contains('/') {
        return name;
    }
    let file = name.rsplit('/').next().unwrap_or(&name);
    if let Some(path) = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| mapped_at(&maps, start, file))
    {
        return path;
    }
    std::env::current_dir()
        .map(|dir| {
            let joined = dir.join(&name);
            std::fs::canonicalize(&joined)
                .unwrap_or(joined)
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or(name)
}

/// The absolute path of the file `/proc/self/maps` (its text, `maps`) has mapped at `addr`, when
/// its file name is `file`.
pub(super) fn mapped_at(maps: &str, addr: u64, file: &str) -> Option<String> {
    maps.lines().find_map(|line| {
        let mut fields = line.splitn(6, ' ');
        let (lo, hi) = fields.next()?.split_once('-')?;
        let (lo, hi) = (
            u64::from_str_radix(lo, 16).ok()?,
            u64::from_str_radix(hi, 16).ok()?,
        );
        let path = fields.nth(4)?.trim_start();
        (lo <= addr && addr < hi && path.starts_with('/') && path.rsplit('/').next() == Some(file))
            .then(|| path.to_string())
    })
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The loaded modules now (in the loader's order, main program first), followed by modules
/// the unwinder saw earlier that have since been unloaded. Not for the hot path: it walks the
/// loader's list and allocates.
pub fn modules() -> Vec<Module> {
    let now = phdr::all();
    let mut out: Vec<Module> = now.iter().map(to_module).collect();
    HISTORY.with(|h| {
        for m in h.iter().filter(|m| !now.iter().any(|x| same(x, m))) {
            out.push(to_module(m));
        }
    });
    out
}

/// The module holding `ip` (the first match in `modules`' order, so loaded modules win over
/// unloaded ones that used the same addresses) and the ip's offset from that module's load
/// bias, which is its address in the file (`ip - base`). Linear in `modules.len()`.
pub fn locate(ip: u64, modules: &[Module]) -> Option<(usize, u64)> {
    modules
        .iter()
        .position(|m| m.start <= ip && ip < m.end)
        .map(|i| (i, ip.wrapping_sub(modules[i].base)))
}

/// Clears the lock of the unloaded modules' list, which a fork may have caught held
/// ([`super::after_fork_child`]).
pub(super) fn reset_after_fork() {
    HISTORY.lock.unlock();
}
