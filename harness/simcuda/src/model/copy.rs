//! The copy family's model: when a copy or a set returns, and which operands an entry refuses.
//!
//! Every copy or set is an operation on a stream: the synchronous entries use the legacy default
//! stream (their `_ptds` variants the per-thread one), the `Async` entries the stream given. When
//! the call returns follows the CUDA rules ("API synchronization behavior"):
//!
//! | entry | returns |
//! |---|---|
//! | sync copy to host memory (pinned or pageable) | when the copy is done |
//! | sync copy from pinned host to device | when the copy is done |
//! | sync copy from pageable host to device | once the source is staged (copied aside) |
//! | sync copy device to device | at once |
//! | async copy to pageable host memory | when the copy is done |
//! | async copy from pageable host memory | once the source is staged |
//! | other async copies | at once |
//! | sync set of pinned host or managed memory | when the set is done |
//! | other sets | at once |
//!
//! Device ranges are checked against the allocation they start in; an address the driver does
//! not know is pageable host memory, which device-side operands may not be.

use crate::model::pointer::Place;

/// Synchronous or `Async` entry.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Sync,
    Async,
}

/// The direction an entry names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    HtoD,
    DtoH,
    DtoD,
    /// `cuMemcpy`/`cuMemcpyAsync`: inferred from the addresses.
    Any,
}

impl Dir {
    /// Whether an entry of this direction refuses operands in these places (a device-side
    /// operand in pageable host memory).
    pub fn refuses(self, dst: Place, src: Place) -> bool {
        match self {
            Dir::HtoD => dst == Place::Pageable,
            Dir::DtoH => src == Place::Pageable,
            Dir::DtoD => dst == Place::Pageable || src == Place::Pageable,
            Dir::Any => false,
        }
    }
}

impl Mode {
    /// Whether a copy from `src` to `dst` returns only when it is done (the table above).
    pub fn copy_waits(self, dst: Place, src: Place) -> bool {
        match self {
            Mode::Sync => !dst.device_side() || src == Place::Pinned,
            Mode::Async => dst == Place::Pageable,
        }
    }

    /// Whether a set of `dst` returns only when it is done (the table above).
    pub fn set_waits(self, dst: Place) -> bool {
        self == Mode::Sync && matches!(dst, Place::Pinned | Place::Managed)
    }
}
