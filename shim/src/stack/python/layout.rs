//! Where things are in each CPython version's structures (3.9–3.13, x86-64 release builds):
//! the offsets the frame walk reads, how a frame's instruction is read, and how an entry frame
//! is told. 3.13's are checked against the interpreter's own debug offsets when it is found.

/// How a frame's position (the byte offset of its current instruction) is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lasti {
    /// `f_lasti` (an `int` at this offset of a `PyFrameObject`) is a byte offset (3.9).
    Bytes(usize),
    /// `f_lasti` counts 2-byte code units (3.10).
    Units(usize),
    /// `prev_instr` (3.11, 3.12) or `instr_ptr` (3.13), at offset `field` of the interpreter
    /// frame, points into the code object's bytecode, which starts at `co_code_adaptive`
    /// (offset `code_start` of the code object): the byte offset is the difference, as in
    /// CPython's `_PyInterpreterFrame_LASTI` (and `PyUnstable_InterpreterFrame_GetLasti`).
    Instr { field: usize, code_start: usize },
}

/// Where things are in one CPython version's structures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// Frames are `PyFrameObject`s (3.9–3.10), else `_PyInterpreterFrame`s.
    pub(super) objects: bool,
    /// Offset in the thread state of the frame pointer (3.9/3.10 `frame`, 3.13
    /// `current_frame`) or of `cframe` (3.11/3.12).
    pub(super) tstate_frame: usize,
    /// Offset of `current_frame` in the `_PyCFrame` (3.11/3.12).
    pub(super) cframe_current: Option<usize>,
    pub(super) frame_back: usize,
    pub(super) frame_code: usize,
    /// Offset of the owner byte (interpreter frames); owner 3 (C stack) frames are skipped
    /// on 3.12+.
    pub(super) frame_owner: Option<usize>,
    pub(super) skip_owner: Option<u8>,
    /// How the first frame a call of the evaluation loop ran is told (see [`Entry`]).
    pub(super) entry: Entry,
    pub(super) lasti: Lasti,
    pub(super) code_filename: usize,
    /// `co_qualname` from 3.11 on, `co_name` before.
    pub(super) code_name: usize,
    pub(super) code_firstlineno: usize,
    /// Where the characters of a compact ASCII / compact non-ASCII `str` start.
    pub(super) str_ascii: usize,
    pub(super) str_compact: usize,
}

pub(super) const fn layout(minor: u32) -> Option<Layout> {
    Some(match minor {
        9 | 10 => Layout {
            objects: true,
            tstate_frame: 24,
            cframe_current: None,
            frame_back: 24,
            frame_code: 32,
            frame_owner: None,
            skip_owner: None,
            entry: Entry::Every,
            lasti: if minor == 9 {
                Lasti::Bytes(104)
            } else {
                Lasti::Units(96)
            },
            code_filename: 104,
            code_name: 112,
            code_firstlineno: 40,
            str_ascii: 48,
            str_compact: 72,
        },
        11 => Layout {
            objects: false,
            tstate_frame: 56,
            cframe_current: Some(8),
            frame_back: 48,
            frame_code: 32,
            frame_owner: Some(69),
            skip_owner: None,
            entry: Entry::Flag(68),
            lasti: Lasti::Instr {
                field: 56,
                code_start: 184,
            },
            code_filename: 112,
            code_name: 128,
            code_firstlineno: 72,
            str_ascii: 48,
            str_compact: 72,
        },
        12 => Layout {
            objects: false,
            tstate_frame: 56,
            cframe_current: Some(0),
            frame_back: 8,
            frame_code: 0,
            frame_owner: Some(70),
            skip_owner: Some(3),
            entry: Entry::BeforeCStack,
            lasti: Lasti::Instr {
                field: 56,
                code_start: 192,
            },
            code_filename: 112,
            code_name: 128,
            code_firstlineno: 68,
            str_ascii: 40,
            str_compact: 56,
        },
        // What 3.13's debug offsets are expected to say; see `layout_313`.
        13 => Layout {
            objects: false,
            tstate_frame: 72,
            cframe_current: None,
            frame_back: 8,
            frame_code: 0,
            frame_owner: Some(70),
            skip_owner: Some(3),
            entry: Entry::BeforeCStack,
            lasti: Lasti::Instr {
                field: 56,
                code_start: 200,
            },
            code_filename: 112,
            code_name: 128,
            code_firstlineno: 68,
            str_ascii: 40,
            str_compact: 56,
        },
        _ => return None,
    })
}

/// How a frame that a call of the evaluation loop ran first (an *entry* frame: the outermost
/// Python frame of the chain that one native `_PyEval_EvalFrameDefault` frame runs) is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// Every frame is its own call (3.9, 3.10).
    Every,
    /// A flag byte in the frame (3.11: `is_entry`).
    Flag(usize),
    /// The frame before a C-stack frame (owner 3) in the walk (3.12+: each call of the loop
    /// pushes one below the frames it runs).
    BeforeCStack,
}
