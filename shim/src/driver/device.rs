//! What the real driver says of a device that the shim needs by name: its UUID, as `nvidia-smi`
//! prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`), which NVML looks devices up by and
//! which DCGM's metrics carry.

use crate::ffi::CUDA_SUCCESS;

use super::real;

/// The UUID of device `ordinal` (`cuDeviceGetUuid_v2`, else `cuDeviceGetUuid`), or `None` when
/// the driver has neither or refuses.
pub fn uuid(ordinal: i32) -> Option<String> {
    let f = real::cuDeviceGetUuid_v2().or(real::cuDeviceGetUuid())?;
    let mut bytes = [0u8; 16];
    // SAFETY: a 16-byte CUuuid out-parameter.
    if unsafe { f(bytes.as_mut_ptr().cast(), ordinal) } != CUDA_SUCCESS {
        return None;
    }
    Some(format_uuid(&bytes))
}

/// 16 bytes as `GPU-` and the 8-4-4-4-12 hexadecimal groups.
pub fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_as_nvidia_smi_prints_them() {
        let b: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
        assert_eq!(
            super::format_uuid(&b),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }
}
