//! What the subcommands share: their `--helper` ([`HelperArgs`]) and how they write their
//! output ([`write_stdout`], [`write_output`]).

use std::io::{self, Write};

use super::error::CliError;

/// `--helper`: the allocation helpers the analysis looks through ([`crate::call_path`]).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct HelperArgs {
    /// A function that wraps the allocation (`alloc`, `make_*`; repeat, or comma-separate):
    /// its callers are the sites. Helpers every call path of a site shares are found without
    /// it; `--helper none` turns that off. Adds to CUGUARD_HELPERS.
    #[arg(long = "helper", value_name = "FUNCTION")]
    pub helper: Vec<String>,
}

/// Writes to standard output through a buffer; errors name standard output.
pub(crate) fn write_stdout(
    f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), CliError> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    f(&mut out)
        .and_then(|()| out.flush())
        .map_err(|source| CliError::Output {
            what: "standard output".into(),
            source,
        })
}

/// Writes to `path`, or to standard output when `path` is `None`, as every file cuguard writes
/// is written ([`cuguard_files::replace`]): a temporary file with an unpredictable name in the
/// same directory, created without following links, mode 0600, then renamed into place. A link,
/// another user's file or a non-regular file at `path` is refused, and the error says so.
pub(crate) fn write_output(
    path: Option<&std::path::Path>,
    f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), CliError> {
    let Some(path) = path else {
        return write_stdout(f);
    };
    // Temporaries of a writer killed before its rename (an hour or more old) are this user's to
    // clear.
    cuguard_files::clean_stale_temps(path, std::time::Duration::from_secs(3600));
    cuguard_files::replace(path, 0o600, |file| {
        let mut out = io::BufWriter::new(file);
        f(&mut out)?;
        out.flush()
    })
    .map_err(|source| CliError::Output {
        what: crate::wording::one_line(&path.display().to_string()),
        source,
    })
}
