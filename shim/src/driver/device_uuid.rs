//! What the real driver says of a device that the shim needs by name: its UUID, as `nvidia-smi`
//! prints it (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`), which NVML looks devices up by and
//! which DCGM's metrics carry; and, the other way, which CUDA ordinal a UUID is ([`ordinal_of`]).

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

/// The most ordinals [`ordinal_of`] asks the driver about.
const MAX_ORDINALS: i32 = 64;

/// How a device UUID (an NVML device's) was matched to a CUDA ordinal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordinal {
    /// The driver, which the program has initialized, gives this ordinal that UUID.
    ByDriver(i32),
    /// The driver is not initialized; this is the position of the UUID in
    /// `CUDA_VISIBLE_DEVICES`.
    ByVisibleDevices(i32),
    /// Neither says.
    Unknown,
}

/// The CUDA ordinal of the device with UUID `uuid`: by the driver's own UUIDs when the program
/// has initialized the driver (the shim never does), else by the UUID's position in
/// `CUDA_VISIBLE_DEVICES` (entries given as UUIDs, `GPU-…`, whole or as a prefix, as CUDA accepts
/// them).
pub fn ordinal_of(uuid: &str) -> Ordinal {
    // RTLD_NOLOAD: resolves the driver only if the program has loaded it.
    if super::loader::driver().is_some() {
        let mut initialized = false;
        for ordinal in 0..MAX_ORDINALS {
            // Before cuInit the driver answers CUDA_ERROR_NOT_INITIALIZED; past the last device,
            // CUDA_ERROR_INVALID_DEVICE.
            let Some(u) = self::uuid(ordinal) else { break };
            initialized = true;
            if u.eq_ignore_ascii_case(uuid) {
                return Ordinal::ByDriver(ordinal);
            }
        }
        if initialized {
            return Ordinal::Unknown;
        }
    }
    std::env::var("CUDA_VISIBLE_DEVICES")
        .ok()
        .and_then(|v| visible_position(&v, uuid))
        .map_or(Ordinal::Unknown, Ordinal::ByVisibleDevices)
}

/// The position of `uuid` among the comma-separated entries of `visible`, matching entries
/// that are a `GPU-` UUID or a prefix of one.
fn visible_position(visible: &str, uuid: &str) -> Option<i32> {
    let uuid = uuid.to_ascii_lowercase();
    visible
        .split(',')
        .map(|e| e.trim().to_ascii_lowercase())
        .position(|e| e.len() > 4 && e.starts_with("gpu-") && uuid.starts_with(&e))
        .and_then(|p| i32::try_from(p).ok())
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
    fn uuids_found_in_cuda_visible_devices() {
        let a = "GPU-63756775-6172-642d-7369-6d0000000000";
        let b = "GPU-63756775-6172-642d-7369-6d0000000001";
        let v = format!("{b}, {a}");
        assert_eq!(super::visible_position(&v, a), Some(1));
        assert_eq!(super::visible_position(&v, b), Some(0));
        assert_eq!(super::visible_position("0,1", a), None);
        assert_eq!(super::visible_position("1,GPU-63756775-6172", a), Some(1));
        assert_eq!(super::visible_position("GPU-", a), None);
        assert_eq!(super::visible_position(&a.to_uppercase(), a), Some(0));
    }

    #[test]
    fn uuids_as_nvidia_smi_prints_them() {
        let b: [u8; 16] = std::array::from_fn(|i| (i as u8) * 17);
        assert_eq!(
            super::format_uuid(&b),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }
}
