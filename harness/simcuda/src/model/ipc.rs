//! The IPC family's model: the layout of a simulated `CUipcMemHandle`.
//!
//! Handle layout (64 bytes): magic `"CSIM"`, pid (i32), fd (i32), 4 zero bytes, size (u64),
//! buffer id (u64), then zeros.

use std::ffi::c_int;

use crate::ffi::CUipcMemHandle;

const MAGIC: &[u8; 4] = b"CSIM";

/// What a handle names.
pub struct Decoded {
    pub pid: i32,
    pub fd: c_int,
    pub size: u64,
}

/// The handle of allocation `id` of `size` bytes, exported by process `pid` as memory file `fd`.
pub fn encode(pid: i32, fd: c_int, size: u64, id: u64) -> CUipcMemHandle {
    let mut b = [0u8; 64];
    b[0..4].copy_from_slice(MAGIC);
    b[4..8].copy_from_slice(&pid.to_le_bytes());
    b[8..12].copy_from_slice(&fd.to_le_bytes());
    b[16..24].copy_from_slice(&size.to_le_bytes());
    b[24..32].copy_from_slice(&id.to_le_bytes());
    CUipcMemHandle {
        reserved: b.map(|x| x as std::ffi::c_char),
    }
}

/// What handle `h` names, if it is one of the simulator's.
pub fn decode(h: &CUipcMemHandle) -> Option<Decoded> {
    let b: [u8; 64] = h.reserved.map(|x| x as u8);
    if &b[0..4] != MAGIC {
        return None;
    }
    let i32_at = |i: usize| i32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    Some(Decoded {
        pid: i32_at(4),
        fd: i32_at(8),
        size: u64_at(16),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip() {
        let h = encode(1234, 17, 1 << 20, 99);
        let d = decode(&h).unwrap();
        assert_eq!((d.pid, d.fd, d.size), (1234, 17, 1 << 20));
        assert!(decode(&CUipcMemHandle { reserved: [0; 64] }).is_none());
    }
}
