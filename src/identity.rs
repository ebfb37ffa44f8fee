//! Who a process was in a job, and how `--by` groups processes by it.
//!
//! - rank: the report's `process.rank`, else the first of the launcher labels `RANK`,
//!   `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK` (in `process.labels`) that is a number;
//! - worker: the label `worker` (a Dask worker's name or address, a Ray actor's name, a Ray task
//!   worker's `TASK:ID`);
//! - world size: the label `WORLD_SIZE`, when it is a number;
//! - host and pid: `process.hostname` and `process.pid`.
//!
//! A process is named for people by its worker, else its rank, else its pid
//! ([`Identity::name`]): `worker tcp://10.0.0.5:4001`, `rank 3`, `pid 4242`; and in full with
//! its host and pid ([`Identity::describe`]): `rank 3 (host node17, pid 9001)`.

use std::collections::BTreeMap;

use serde::Serialize;

/// The labels a rank is read from, in order, when `process.rank` is absent.
pub const RANK_LABELS: [&str; 3] = ["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"];

/// Who a process was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Identity {
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: String,
    /// Rank (see the module doc), if any.
    pub rank: Option<u32>,
    /// The label `worker`, if any.
    pub worker: Option<String>,
    /// The label `WORLD_SIZE`, if it is a number.
    #[serde(skip)]
    pub world_size: Option<u32>,
}

impl Identity {
    /// The identity of a process with these fields (`labels`: `process.labels`).
    pub fn new(
        pid: u32,
        host: &str,
        rank: Option<u32>,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Identity {
        let label = |k: &str| labels.and_then(|l| l.get(k));
        let number = |k: &str| label(k).and_then(|v| v.trim().parse::<u32>().ok());
        Identity {
            pid,
            host: host.to_string(),
            rank: rank.or_else(|| RANK_LABELS.iter().find_map(|k| number(k))),
            worker: label("worker").cloned(),
            world_size: number("WORLD_SIZE"),
        }
    }

    /// `worker NAME`, else `rank R`, else `pid P`.
    pub fn name(&self) -> String {
        match (&self.worker, self.rank) {
            (Some(w), _) => format!("worker {}", crate::wording::one_line(w)),
            (None, Some(r)) => format!("rank {r}"),
            (None, None) => format!("pid {}", self.pid),
        }
    }

    /// The name with the host and pid (and the rank, for a worker that has one):
    /// `rank 3 (host node17, pid 9001)`.
    pub fn describe(&self) -> String {
        let mut more = Vec::new();
        if let (Some(_), Some(r)) = (&self.worker, self.rank) {
            more.push(format!("rank {r}"));
        }
        more.push(format!("host {}", crate::wording::one_line(&self.host)));
        if self.worker.is_some() || self.rank.is_some() {
            more.push(format!("pid {}", self.pid));
        }
        format!("{} ({})", self.name(), more.join(", "))
    }
}

/// What `--by` groups processes by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The label `worker`.
    Worker,
    /// The rank (see the module doc).
    Rank,
    /// The host name.
    Host,
    /// One group per process.
    Process,
}

impl GroupBy {
    /// `worker`, `rank`, `host` or `process`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Worker => "worker",
            GroupBy::Rank => "rank",
            GroupBy::Host => "host",
            GroupBy::Process => "process",
        }
    }

    /// The group of a process (`index`: its place in the input): `None` when it has no such
    /// label (those form one group, named `(no worker)`, `(no rank)`).
    pub fn key(self, id: &Identity, index: usize) -> Option<GroupKey> {
        match self {
            GroupBy::Worker => id.worker.clone().map(GroupKey::Text),
            GroupBy::Rank => id.rank.map(GroupKey::Number),
            GroupBy::Host => Some(GroupKey::Text(id.host.clone())),
            GroupBy::Process => Some(GroupKey::Number(index as u32)),
        }
    }
}

/// A group's key: ranks and processes sort as numbers, workers and hosts as text.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupKey {
    /// A rank or a process's index.
    Number(u32),
    /// A worker or a host.
    Text(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn rank_comes_from_the_report_then_the_launcher_labels() {
        let l = labels(&[("SLURM_PROCID", "5"), ("RANK", "x"), ("WORLD_SIZE", "8")]);
        assert_eq!(Identity::new(1, "h", Some(2), Some(&l)).rank, Some(2));
        let id = Identity::new(1, "h", None, Some(&l));
        assert_eq!((id.rank, id.world_size), (Some(5), Some(8)));
        assert_eq!(id.name(), "rank 5");
        assert_eq!(id.describe(), "rank 5 (host h, pid 1)");
        assert_eq!(
            Identity::new(7, "h", None, None).describe(),
            "pid 7 (host h)"
        );
    }

    #[test]
    fn a_worker_is_named_by_its_label() {
        let l = labels(&[("worker", "tcp://10.0.0.5:4001"), ("RANK", "1")]);
        let id = Identity::new(9, "n1", None, Some(&l));
        assert_eq!(id.name(), "worker tcp://10.0.0.5:4001");
        assert_eq!(
            id.describe(),
            "worker tcp://10.0.0.5:4001 (rank 1, host n1, pid 9)"
        );
        assert_eq!(
            GroupBy::Worker.key(&id, 0),
            Some(GroupKey::Text("tcp://10.0.0.5:4001".into()))
        );
        assert_eq!(GroupBy::Rank.key(&id, 0), Some(GroupKey::Number(1)));
        assert_eq!(GroupBy::Process.key(&id, 4), Some(GroupKey::Number(4)));
    }
}
