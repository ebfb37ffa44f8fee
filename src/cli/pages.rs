//! What `top` and `exporter` share: where the stats pages are (`--dir`), how often to look
//! (`--interval`), and the bad-page lines said on standard error.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::live::{self, Reader, Scan};

/// `--dir`.
#[derive(Debug, Args)]
pub struct PagesArgs {
    /// The directory of the stats pages [default: $CUGUARD_RUNTIME_DIR, else
    /// $XDG_RUNTIME_DIR/cuguard, else /tmp/cuguard-UID and the private
    /// /tmp/cuguard-UID.XXXXXXXX the shim uses when another user took that name].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

impl PagesArgs {
    /// A reader of the pages there.
    pub fn reader(&self) -> Reader {
        match &self.dir {
            Some(dir) => Reader::new(dir.clone()),
            None => Reader::of(live::default_dir()),
        }
    }
}

/// Parses `--interval`: seconds, at least 0.1, at most a day.
pub fn interval(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.1..=86_400.0).contains(&secs) {
        return Err(format!("{s} seconds: give 0.1 to 86400"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Says each new bad-page line of `scan` on standard error.
pub fn say_notes(scan: &Scan) {
    for note in &scan.notes {
        eprintln!("cuguard: {note}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn intervals() {
        assert_eq!(super::interval("1"), Ok(Duration::from_secs(1)));
        assert_eq!(super::interval(" 0.5"), Ok(Duration::from_millis(500)));
        assert!(super::interval("0").is_err());
        assert!(super::interval("NaN").is_err());
        assert!(super::interval("inf").is_err());
        assert_eq!(
            super::interval("1s"),
            Err("\"1s\" is not a number of seconds".into())
        );
    }
}
