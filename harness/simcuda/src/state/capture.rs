//! The capture family's operations on the state: refusing a potentially unsafe call while a
//! capture forbids it (and invalidating that capture), and ending a destroyed stream's capture.

use super::State;
use crate::errors::Fault;
use crate::model::capture::{forbids, thread_id, thread_mode};

impl State {
    /// Called by a potentially unsafe entry before it does anything: fails with
    /// [`Fault::CaptureUnsupported`], invalidating the captures that forbid the call, when any does.
    pub fn refuse_unsafe(&mut self) -> Result<(), Fault> {
        if self.captures.is_empty() {
            return Ok(());
        }
        let (me, mode) = (thread_id(), thread_mode());
        let mut refused = false;
        for c in self.captures.iter_mut().filter(|c| forbids(c, me, mode)) {
            c.invalidated = true;
            refused = true;
        }
        if refused {
            Err(Fault::CaptureUnsupported)
        } else {
            Ok(())
        }
    }

    /// A destroyed stream's capture ends with it.
    pub fn stream_gone(&mut self, key: usize) {
        self.captures.retain(|c| c.stream != key);
    }
}
