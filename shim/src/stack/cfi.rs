//! Unwind rules from DWARF CFI (`.eh_frame_hdr` + `.eh_frame`, read in place from the mapped
//! module), reduced to what is needed to step one frame on x86_64, and a per-thread cache of
//! them.
//!
//! A rule says where the caller's frame is: `CFA = sp + k` or `CFA = bp + k`; the return
//! address is at `CFA - 8`; the caller's rbp is either unchanged or saved at `CFA + j`. That
//! covers what compilers emit for function bodies (prologues and epilogues included: `.eh_frame`
//! describes every instruction). What it does not cover (CFA given by a DWARF expression, as in
//! PLT stubs and stack-realigning functions, or a return address not at `CFA - 8`) ends the
//! stack there. Code outside every known module (JIT code) gets the frame-pointer rule, with
//! every stack read checked, so a wrong guess truncates the stack but cannot fault.

use std::sync::atomic::{AtomicU64, Ordering};

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};

type Slice = gimli::EndianSlice<'static, LittleEndian>;

/// A module's unwind data, as mapped in this process.
pub(crate) struct ModUnwind {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    /// `.eh_frame_hdr` and `.eh_frame` bytes (mapped) and their file vaddrs.
    pub hdr: Option<(&'static [u8], u64)>,
    pub eh: Option<(&'static [u8], u64)>,
    pub text_svma: u64,
}

/// One frame step, packed in a u64 (0 = empty cache slot):
/// bits 0..8 kind, 8..24 bp save offset from the CFA (i16), 32..64 CFA offset (i32).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Rule(u64);

const KIND_END: u64 = 1;
const KIND_SP: u64 = 2;
const KIND_BP: u64 = 3;
const BP_SAVED: u64 = 0x80;

impl Rule {
    /// The stack ends here (the return address is undefined, or the step is not expressible).
    pub(crate) const END: Rule = Rule(KIND_END);
    /// The frame-pointer guess for code with no unwind info: CFA = rbp + 16, rbp saved at CFA - 16.
    pub(crate) const FRAME_POINTER: Rule = Rule::new(KIND_BP, 16, Some(-16));

    const fn new(kind: u64, cfa_off: i32, bp_off: Option<i16>) -> Rule {
        let bp = match bp_off {
            Some(o) => BP_SAVED | ((o as u16 as u64) << 8),
            None => 0,
        };
        Rule(kind | bp | ((cfa_off as u32 as u64) << 32))
    }

    /// Steps one frame: from (sp, bp) of a frame to the caller's (return address, sp, bp).
    /// `None` at the end of the stack or when a read fails or the stack does not grow.
    #[inline(always)]
    pub(crate) fn step(
        self,
        sp: u64,
        bp: u64,
        read: &impl Fn(u64) -> Option<u64>,
    ) -> Option<(u64, u64, u64)> {
        let cfa_off = (self.0 >> 32) as u32 as i32 as i64;
        let cfa = match self.0 & 0x7f {
            KIND_SP => sp.wrapping_add_signed(cfa_off),
            KIND_BP => bp.wrapping_add_signed(cfa_off),
            _ => return None,
        };
        if cfa <= sp {
            return None;
        }
        let ra = read(cfa - 8)?;
        let new_bp = if self.0 & BP_SAVED != 0 {
            read(cfa.wrapping_add_signed(((self.0 >> 8) as u16 as i16).into()))?
        } else {
            bp
        };
        Some((ra, cfa, new_bp))
    }
}

/// The rule at `svma` (file vaddr) in module `m`, from its CFI.
pub(crate) fn rule_for(m: &ModUnwind, svma: u64, ctx: &mut UnwindContext<usize>) -> Rule {
    let (Some((hdr, hdr_svma)), Some((eh, eh_svma))) = (m.hdr, m.eh) else {
        return Rule::FRAME_POINTER;
    };
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr_svma)
        .set_eh_frame(eh_svma)
        .set_text(m.text_svma);
    let mut eh_frame = EhFrame::new(eh, LittleEndian);
    eh_frame.set_address_size(8);
    let row = EhFrameHdr::new(hdr, LittleEndian)
        .parse(&bases, 8)
        .ok()
        .and_then(|parsed| {
            let table = parsed.table()?;
            let fde = table
                .fde_for_address(&eh_frame, &bases, svma, EhFrame::<Slice>::cie_from_offset)
                .ok()?;
            let row = fde
                .unwind_info_for_address(&eh_frame, &bases, ctx, svma)
                .ok()?;
            Some((
                row.cfa().clone(),
                row.register(X86_64::RA),
                row.register(X86_64::RBP),
            ))
        });
    let Some((cfa, ra, bp)) = row else {
        // No FDE covers it: a function without CFI (hand-written assembly); guess.
        return Rule::FRAME_POINTER;
    };
    match ra {
        Some(RegisterRule::Offset(-8)) => {}
        None | Some(RegisterRule::Undefined) => return Rule::END,
        _ => return Rule::END,
    }
    let bp_off = match bp {
        None | Some(RegisterRule::SameValue) | Some(RegisterRule::Undefined) => None,
        Some(RegisterRule::Offset(o)) => match i16::try_from(o) {
            Ok(o) => Some(o),
            Err(_) => return Rule::END,
        },
        _ => return Rule::END,
    };
    match cfa {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(off) = i32::try_from(offset) else {
                return Rule::END;
            };
            match register {
                X86_64::RSP => Rule::new(KIND_SP, off, bp_off),
                X86_64::RBP => Rule::new(KIND_BP, off, bp_off),
                _ => Rule::END,
            }
        }
        CfaRule::Expression(_) => Rule::END,
    }
}

/// Buckets of the process-wide rule table ([`shared_get`]), two entries each (256 KiB of
/// zero-initialised static memory: only the pages touched are ever mapped).
const SHARED_BUCKETS: usize = 8192;

/// The process-wide rule table, behind every thread's own cache: a rule one thread evaluated
/// serves every other (PyTorch's autograd threads, Dask's workers, a new thread) without a CFI
/// evaluation, which costs microseconds when a module's tables are read for the first time.
/// Each entry is two words, `(key, rule)`, with `key = ip ^ mix(rule ^ epoch)`: lock-free
/// (Hyatt's check, as chess engines share their tables), so a reader that races a writer and
/// reads one word of each entry finds a key that does not match (`mix` is a bijection: a false
/// match needs a 64-bit collision) and treats it as a miss. The epoch (the snapshot's
/// generation) is in the key: entries of an older module list never match.
static SHARED: [[AtomicU64; 4]; SHARED_BUCKETS] =
    [const { [const { AtomicU64::new(0) }; 4] }; SHARED_BUCKETS];

/// A bijective 64-bit mixer (splitmix64's finaliser).
#[inline(always)]
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[inline(always)]
fn bucket(ip: u64) -> &'static [AtomicU64; 4] {
    &SHARED[(mix(ip) as usize) % SHARED_BUCKETS]
}

/// The rule at `ip` another thread (or this one) evaluated under module list `epoch`, if the
/// process-wide table still holds it.
#[inline]
pub(crate) fn shared_get(ip: u64, epoch: u64) -> Option<Rule> {
    let b = bucket(ip);
    for e in [0, 2] {
        let key = b[e].load(Ordering::Relaxed);
        let rule = b[e + 1].load(Ordering::Relaxed);
        if rule != 0 && key == ip ^ mix(rule ^ epoch) {
            return Some(Rule(rule));
        }
    }
    None
}

/// Shares the rule at `ip` evaluated under module list `epoch` with every thread.
pub(crate) fn shared_put(ip: u64, epoch: u64, rule: Rule) {
    let b = bucket(ip);
    // An empty entry if there is one, else the one this ip picks (an older rule is replaced).
    let e = if b[1].load(Ordering::Relaxed) == 0 {
        0
    } else if b[3].load(Ordering::Relaxed) == 0 {
        2
    } else {
        ((ip >> 4) & 1) as usize * 2
    };
    b[e + 1].store(rule.0, Ordering::Relaxed);
    b[e].store(ip ^ mix(rule.0 ^ epoch), Ordering::Relaxed);
}

const SETS: usize = 2048;
const WAYS: usize = 4;

/// A per-thread cache of rules by address: 4-way set associative, 2048 sets (128 KiB), so the
/// thousands of return addresses a framework allocates from (PyTorch's dispatch paths) stay
/// resident together (framehop's direct-mapped 509-slot cache, tried first, lost several
/// entries of every 40-frame stack to collisions). A miss looks in the process-wide table
/// ([`shared_get`]), and only then costs a CFI evaluation (about half a microsecond warm, tens
/// of microseconds when the module's tables are first read from disk).
#[repr(C, align(64))]
pub(crate) struct RuleCache {
    sets: [[(u64, Rule); WAYS]; SETS],
    /// Snapshot generation the entries belong to.
    generation: u64,
    /// Round-robin victim per set is approximated by one rotating counter.
    victim: usize,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
}

impl RuleCache {
    pub(crate) fn new_boxed() -> Box<RuleCache> {
        // Built on the heap directly: the array is too big to build on small thread stacks.
        let layout = std::alloc::Layout::new::<RuleCache>();
        // SAFETY: RuleCache is valid when all-zero (empty slots, counters 0); the layout is
        // non-zero-sized; a null result is handled.
        unsafe {
            let p = std::alloc::alloc_zeroed(layout) as *mut RuleCache;
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(p)
        }
    }

    #[inline(always)]
    fn set_of(addr: u64) -> usize {
        ((addr ^ (addr >> 9) ^ (addr >> 18)) as usize) % SETS
    }

    /// Empties the cache if it holds rules of another module list. Once per capture.
    #[inline(always)]
    pub(crate) fn check_generation(&mut self, generation: u64) {
        if self.generation != generation {
            self.sets = [[(0, Rule(0)); WAYS]; SETS];
            self.generation = generation;
        }
    }

    /// The cached rule for `addr` (call [`Self::check_generation`] first).
    #[inline(always)]
    pub(crate) fn get(&mut self, addr: u64) -> Option<Rule> {
        let set = &self.sets[Self::set_of(addr)];
        // Empty slots have address 0, which no frame has.
        for &(a, r) in set {
            if a == addr {
                #[cfg(test)]
                {
                    self.hits += 1;
                }
                return Some(r);
            }
        }
        self.misses += 1;
        None
    }

    pub(crate) fn put(&mut self, addr: u64, rule: Rule) {
        let set = &mut self.sets[Self::set_of(addr)];
        if let Some(slot) = set.iter_mut().find(|(_, r)| r.0 == 0) {
            *slot = (addr, rule);
        } else {
            self.victim = self.victim.wrapping_add(1);
            set[self.victim % WAYS] = (addr, rule);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_packing_and_step() {
        let stack = [0u64, 0x1111, 0x2222, 0x3333, 0x4444];
        let base = 0x1000u64;
        let read = |a: u64| -> Option<u64> {
            (a >= base && (a - base).is_multiple_of(8))
                .then(|| stack.get(((a - base) / 8) as usize).copied())
                .flatten()
        };
        // CFA = sp + 24; ra at CFA-8 = base+16 → 0x2222; bp at CFA-16 = base+8 → 0x1111.
        let r = Rule::new(KIND_SP, 24, Some(-16));
        assert_eq!(r.step(base, 7, &read), Some((0x2222, base + 24, 0x1111)));
        let r = Rule::new(KIND_SP, 8, None);
        assert_eq!(r.step(base, 7, &read), Some((0, base + 8, 7)));
        // Frame pointer: bp = base+8 → CFA = base+24, ra = [base+16], bp = [base+8].
        assert_eq!(
            Rule::FRAME_POINTER.step(base, base + 8, &read),
            Some((0x2222, base + 24, 0x1111))
        );
        assert_eq!(Rule::END.step(base, 7, &read), None);
        // A CFA that does not move up ends the stack.
        assert_eq!(Rule::new(KIND_BP, 16, None).step(base, 0, &read), None);
    }

    #[test]
    fn cache_sets_hold_colliding_addresses() {
        let mut c = RuleCache::new_boxed();
        let addrs: Vec<u64> = (0..4).map(|i| 0x5000 + (i << 27)).collect();
        c.check_generation(1);
        for &a in &addrs {
            assert_eq!(c.get(a), None);
            c.put(a, Rule::END);
        }
        for &a in &addrs {
            assert_eq!(c.get(a), Some(Rule::END));
        }
        c.check_generation(2);
        assert_eq!(c.get(addrs[0]), None, "a new generation empties the cache");
    }

    #[test]
    fn the_shared_table_answers_only_its_own_epoch_and_never_a_torn_entry() {
        let r = Rule::new(KIND_SP, 40, Some(-16));
        let ip = 0x7f12_3456_7890;
        assert_eq!(shared_get(ip, 7), None);
        shared_put(ip, 7, r);
        assert_eq!(shared_get(ip, 7), Some(r));
        assert_eq!(shared_get(ip, 8), None, "another module list's rule");
        assert_eq!(shared_get(ip + 1, 7), None);
        // A reader that sees the key of one entry and the rule of another gets no match.
        let b = bucket(ip);
        let e = if b[0].load(Ordering::Relaxed) == ip ^ mix(r.0 ^ 7) {
            0
        } else {
            2
        };
        b[e + 1].store(Rule::END.0, Ordering::Relaxed);
        assert_eq!(shared_get(ip, 7), None);
        // Two rules in one (empty) bucket are both kept.
        let ip2 = 0x7f00_0000_1000;
        let b2 = bucket(ip2);
        let other = (1..)
            .map(|k| ip2 + (k << 12))
            .find(|&o| std::ptr::eq(bucket(o), b2))
            .unwrap();
        shared_put(ip2, 7, r);
        shared_put(other, 7, Rule::END);
        assert_eq!(
            (shared_get(ip2, 7), shared_get(other, 7)),
            (Some(r), Some(Rule::END))
        );
    }
}
