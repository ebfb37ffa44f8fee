//! The shim's own problems, kept for the report's `faults` list (bounded).

use std::sync::Mutex;

const MAX_FAULTS: usize = 64;

static FAULTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records a fault for the report.
pub fn record(message: String) {
    if let Ok(mut f) = FAULTS.lock()
        && f.len() < MAX_FAULTS
    {
        f.push(message);
    }
}

/// All faults recorded so far.
pub fn all() -> Vec<String> {
    FAULTS.lock().map(|f| f.clone()).unwrap_or_default()
}
