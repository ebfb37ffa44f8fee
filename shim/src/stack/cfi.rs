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

const SETS: usize = 2048;
const WAYS: usize = 4;

/// A per-thread cache of rules by address: 4-way set associative, 2048 sets (128 KiB), so the
/// thousands of return addresses a framework allocates from (PyTorch's dispatch paths) stay
/// resident together (framehop's direct-mapped 509-slot cache, tried first, lost several
/// entries of every 40-frame stack to collisions). Each miss costs a CFI evaluation (about
/// half a microsecond).
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
}
