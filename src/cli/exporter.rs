//! `cuguard exporter`: this user's stats pages as Prometheus metrics, served over HTTP
//! (`--listen`, loopback unless told otherwise) or written for node_exporter's textfile
//! collector (`--textfile DIR`). The metrics and labels are listed in
//! [`crate::exporter::exposition`].

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::common::write_output;
use super::error::CliError;
use super::exit;
use super::pages::{self, PagesArgs};
use crate::exporter::exposition;
use crate::exporter::server::MetricsServer;
use crate::live::{Reader, Scan};

/// Where `/metrics` is served unless `--listen` says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

/// The file `--textfile DIR` writes (node_exporter reads `*.prom`).
pub const TEXTFILE_NAME: &str = "cuguard.prom";

/// Arguments of `cuguard exporter`.
#[derive(Debug, Args)]
#[command(after_help = "\
Metrics (per process and device: cuguard_live_bytes, cuguard_peak_bytes, cuguard_reserved_bytes;
per process: cuguard_leaks, cuguard_oom_total, cuguard_alerts_total; per process and tag:
cuguard_tag_live_bytes, cuguard_tag_live_allocations) with the labels pid, exe,
rank, worker, host, device and UUID (as DCGM's exporter names the GPU's UUID, to join its
metrics) on the per-device ones, and tag on the per-tag ones. The pages read are those of this user's processes running under the shim.

Examples:
  cuguard exporter                                   # http://127.0.0.1:9464/metrics
  cuguard exporter --listen 0.0.0.0:9464             # every interface
  cuguard exporter --textfile /var/lib/node_exporter/textfile --interval 15
  curl -s localhost:9464/metrics | grep cuguard_live_bytes")]
pub struct ExporterArgs {
    /// Serve /metrics on HOST:PORT (port 0: any free port, printed at start). Loopback by
    /// default; 0.0.0.0:PORT or [::]:PORT serves every interface.
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_LISTEN,
          value_parser = listen_addr, conflicts_with = "textfile")]
    pub listen: SocketAddr,
    /// Instead of serving, write the metrics to DIR/cuguard.prom (atomically: a temporary
    /// file, then a rename) for node_exporter's textfile collector.
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,
    /// With --textfile: write once and exit.
    #[arg(long, requires = "textfile")]
    pub once: bool,
    /// With --textfile: seconds between writes.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = pages::interval,
          requires = "textfile")]
    pub interval: Duration,
    #[command(flatten)]
    pub pages: PagesArgs,
}

/// Runs `cuguard exporter`: serves until the process is ended (or its listener fails: exit 2),
/// or with `--textfile --once` writes once.
pub fn run(args: ExporterArgs) -> Result<u8, CliError> {
    let mut reader = args.pages.reader();
    match &args.textfile {
        Some(dir) => write_textfiles(&mut reader, dir, args.once, args.interval),
        None => serve(reader, args.listen),
    }
}

fn serve(mut reader: Reader, addr: SocketAddr) -> Result<u8, CliError> {
    let server = MetricsServer::bind(addr).map_err(CliError::Listen)?;
    // A directory that cannot be read is said now, not at the first scrape.
    let scan = reader.scan().map_err(CliError::Scan)?;
    pages::say_notes(&scan);
    eprintln!(
        "cuguard exporter: serving http://{}/metrics from the pages in {}",
        server.addr(),
        crate::wording::one_line(&reader.dir().display().to_string())
    );
    let mut last_error = None;
    let stopped = server.serve(move || match reader.scan() {
        Ok(scan) => {
            last_error = None;
            pages::say_notes(&scan);
            Ok(metrics(&scan))
        }
        Err(e) => {
            let message = e.to_string();
            if last_error.as_ref() != Some(&message) {
                eprintln!("cuguard: {message}");
                last_error = Some(message.clone());
            }
            Err(message)
        }
    });
    // No client ends it, only its listener failing: said in one line, as errors are, and exit 2
    // (a service manager restarts it on failure).
    eprintln!("cuguard: error: {stopped}");
    Ok(exit::USAGE)
}

fn write_textfiles(
    reader: &mut Reader,
    dir: &std::path::Path,
    once: bool,
    interval: Duration,
) -> Result<u8, CliError> {
    let path = dir.join(TEXTFILE_NAME);
    let mut last_error = None;
    loop {
        let written = reader.scan().map_err(CliError::Scan).and_then(|scan| {
            pages::say_notes(&scan);
            let text = metrics(&scan);
            write_output(Some(&path), |out| out.write_all(text.as_bytes()))
        });
        match written {
            Ok(()) if once => return Ok(exit::OK),
            Ok(()) => last_error = None,
            Err(e) if once => return Err(e),
            // Writing every few seconds for hours: a directory that cannot be read or written
            // for a while is said (once) and tried again; the file keeps its last contents
            // (node_exporter's node_textfile_mtime_seconds shows how old they are).
            Err(e) => {
                let message = e.to_string();
                if last_error.as_ref() != Some(&message) {
                    eprintln!("cuguard: error: {message}; trying again every {interval:?}");
                    last_error = Some(message);
                }
            }
        }
        std::thread::sleep(interval);
    }
}

fn metrics(scan: &Scan) -> String {
    exposition::render(scan.processes.iter().map(|p| &p.page))
}

/// Parses `--listen`: `HOST:PORT`, the host a name or an address (`[::1]:9464` for IPv6).
fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    if s.starts_with(':') {
        return Err(format!(
            "{s}: give the host too: 127.0.0.1{s} for this machine only, 0.0.0.0{s} for every interface"
        ));
    }
    s.to_socket_addrs()
        .map_err(|e| format!("{s}: {e} (expected HOST:PORT, as 127.0.0.1:9464)"))?
        .next()
        .ok_or_else(|| format!("{s}: names no address"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn listen_addresses() {
        assert_eq!(
            super::listen_addr("127.0.0.1:9464").unwrap().to_string(),
            "127.0.0.1:9464"
        );
        assert_eq!(
            super::listen_addr("[::1]:0").unwrap().to_string(),
            "[::1]:0"
        );
        assert!(
            super::listen_addr(":9464")
                .unwrap_err()
                .contains("127.0.0.1:9464 for this machine only")
        );
        assert!(super::listen_addr("127.0.0.1").is_err());
        assert!(super::listen_addr("127.0.0.1:99999").is_err());
    }
}
