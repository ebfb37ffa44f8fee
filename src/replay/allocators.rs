//! The allocators `cuguard replay` models, by name ([`Allocator`]), with the settings some of
//! them take ([`Settings`]), and each one made for a capacity ([`build`]).

use serde::Serialize;

use super::async_pool::AsyncPool;
use super::cuguard::Cuguard;
use super::driver::Driver;
use super::model::Model;
use super::rmm::RmmPool;
use super::torch::Torch;
use super::torch_expandable::TorchExpandable;

/// An allocator a program could run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Allocator {
    Driver,
    Async,
    Cuguard,
    RmmPool,
    Torch,
    TorchExpandable,
}

impl Allocator {
    /// Every allocator, in the order they are printed.
    pub const ALL: [Allocator; 6] = [
        Allocator::Driver,
        Allocator::Async,
        Allocator::Cuguard,
        Allocator::RmmPool,
        Allocator::Torch,
        Allocator::TorchExpandable,
    ];

    /// Its name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Allocator::Driver => "driver",
            Allocator::Async => "async",
            Allocator::Cuguard => "cuguard",
            Allocator::RmmPool => "rmm-pool",
            Allocator::Torch => "torch",
            Allocator::TorchExpandable => "torch-expandable",
        }
    }

    /// A comma-separated list of names (`all` for every one), each once, in the order of
    /// [`Allocator::ALL`]; an unknown name is refused with the names there are.
    pub fn parse_list(text: &str) -> Result<Vec<Allocator>, String> {
        let mut out = Vec::new();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if word == "all" {
                out.extend(Allocator::ALL);
                continue;
            }
            match Allocator::ALL.iter().find(|a| a.name() == word) {
                Some(a) => out.push(*a),
                None => {
                    return Err(format!(
                        "unknown allocator {:?}: the allocators are {}, or all",
                        crate::wording::one_line(word),
                        Allocator::ALL.map(Allocator::name).join(", ")
                    ));
                }
            }
        }
        if out.is_empty() {
            return Err(format!(
                "no allocator named: the allocators are {}, or all",
                Allocator::ALL.map(Allocator::name).join(", ")
            ));
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

/// What some allocators are set with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `async`: the pool's release threshold (`u64::MAX`: keep everything).
    pub release_threshold: u64,
    /// `rmm-pool`: the initial pool; `None`: half the capacity.
    pub initial_pool: Option<u64>,
    /// `rmm-pool`: the maximum pool; `None`: none (RMM's default: the pool doubles as it grows).
    pub maximum_pool: Option<u64>,
}

/// `allocator` on a device of `capacity` bytes, as `settings` set it.
pub fn build(allocator: Allocator, capacity: u64, settings: &Settings) -> Box<dyn Model> {
    match allocator {
        Allocator::Driver => Box::new(Driver::new(capacity)),
        Allocator::Async => Box::new(AsyncPool::new(capacity, settings.release_threshold)),
        Allocator::Cuguard => Box::new(Cuguard::new(capacity)),
        Allocator::RmmPool => Box::new(RmmPool::new(
            capacity,
            settings.initial_pool.unwrap_or(capacity / 2),
            settings.maximum_pool,
        )),
        Allocator::Torch => Box::new(Torch::new(capacity)),
        Allocator::TorchExpandable => Box::new(TorchExpandable::new(capacity)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_in_any_order_once_each() {
        assert_eq!(
            Allocator::parse_list("torch, driver,torch"),
            Ok(vec![Allocator::Driver, Allocator::Torch])
        );
        assert_eq!(Allocator::parse_list("all").unwrap().len(), 6);
        assert_eq!(
            Allocator::parse_list("tf").unwrap_err(),
            "unknown allocator \"tf\": the allocators are driver, async, cuguard, rmm-pool, \
             torch, torch-expandable, or all"
        );
        assert!(Allocator::parse_list(" , ").is_err());
    }
}
