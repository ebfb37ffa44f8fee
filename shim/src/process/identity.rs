//! Facts about this process for the report: pid, executable, arguments, host and rank.

use std::ffi::CStr;

/// This process's pid.
pub fn pid() -> u32 {
    std::process::id()
}

/// The parent's pid.
pub fn ppid() -> u32 {
    // SAFETY: getppid cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// The executable's path.
pub fn exe() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The executable's file name (`%e` in the report template).
pub fn exe_name() -> String {
    let exe = exe();
    let name = exe.rsplit('/').next().unwrap_or("");
    if name.is_empty() {
        "unknown".into()
    } else {
        name.to_string()
    }
}

/// The command line.
pub fn argv() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The host name.
pub fn hostname() -> String {
    let mut buf = [0 as libc::c_char; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates on success (the last
    // byte stays 0 regardless).
    unsafe {
        if libc::gethostname(buf.as_mut_ptr(), buf.len() - 1) == 0 {
            return CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned();
        }
    }
    String::new()
}

/// The process's rank in a parallel job, from the usual launchers' variables.
pub fn rank() -> Option<i64> {
    const VARS: [&str; 6] = [
        "RANK",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
        "MV2_COMM_WORLD_RANK",
    ];
    VARS.iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}
