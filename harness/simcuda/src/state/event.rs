//! The event family's operations on the state: finding an event by its handle.

use std::sync::Arc;

use super::State;
use crate::errors::Fault;
use crate::model::event::Event;

impl State {
    /// The live event with handle `h`.
    pub fn event(&self, h: usize) -> Result<Arc<Event>, Fault> {
        self.events.get(&h).cloned().ok_or(Fault::BadEvent)
    }
}
