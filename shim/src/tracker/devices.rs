//! How many devices the tracker counts apart ([`DEVICES`]), below everything else of the tracker.

/// Devices counted separately; higher ordinals share the last slot.
pub const DEVICES: usize = 16;
