//! Labels a launcher gives a process through its environment: torchrun's `RANK`, `LOCAL_RANK`,
//! `WORLD_SIZE` and `TORCHELASTIC_RUN_ID`, Slurm's `SLURM_PROCID` and `SLURM_JOB_ID`, Open
//! MPI's `OMPI_COMM_WORLD_RANK`. Those present (and not empty) go into the report's
//! `process.labels` under their own names ([`super::labels::all`]), read once.

use std::sync::OnceLock;

/// The variables read, in the order they are listed.
pub const VARS: [&str; 7] = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "SLURM_PROCID",
    "SLURM_JOB_ID",
    "OMPI_COMM_WORLD_RANK",
];

/// The launcher's labels of this process, `(variable, value)`, read at the first call.
pub fn labels() -> &'static [(String, String)] {
    static LABELS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    LABELS.get_or_init(|| from_env(|k| std::env::var(k).ok()))
}

/// The labels in an environment given as a lookup.
pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    VARS.iter()
        .filter_map(|k| {
            let v = var(k)?;
            let v = v.trim();
            (!v.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_variables_only() {
        let env = |k: &str| {
            [
                ("RANK", "3"),
                ("WORLD_SIZE", " 8 "),
                ("SLURM_JOB_ID", ""),
                ("PMI_RANK", "3"),
            ]
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.to_string())
        };
        assert_eq!(
            from_env(env),
            vec![
                ("RANK".to_string(), "3".to_string()),
                ("WORLD_SIZE".to_string(), "8".to_string())
            ]
        );
    }
}
