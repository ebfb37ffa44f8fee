//! Where alerts go: `CUGUARD_ALERT` ([`crate::config::AlertTo`]).
//!
//! - `stderr` (the default): the alert's `message` as one `cuguard: …` line, for a person;
//! - `json`: the alert as one JSON object a line on stderr ([`cuguard_format::alert`]), for
//!   collectors that read the program's output (a container's log);
//! - `syslog`: the same JSON object as one syslog message, ident `cuguard`, facility `user`,
//!   severity `warning` (a `warn_at`) or `notice` (a `cleared`), sent to `/dev/log` as
//!   `<PRI>Mmm dd hh:mm:ss cuguard[PID]: {…}`. The shim writes to the socket itself rather than
//!   through `openlog`/`syslog`: `openlog` would change the ident of the program's own syslog
//!   messages too;
//! - `file:PATH`: the JSON object appended to PATH (opened, appended with one `write`, closed, for
//!   each alert, so log rotation needs nothing special; created with mode 0644 less the umask).
//!   PATH takes the placeholders of `CUGUARD_REPORT` (`%p`, `%h`, `%r`, …); relative to the
//!   directory the program started in.
//!
//! When syslog or the file cannot be written, that is said once on stderr and the alert goes to
//! stderr as a `cuguard: …` line instead, so that no alert is lost.

use std::io::Write;
use std::sync::atomic::AtomicBool;

use cuguard_format::alert::{Alert, AlertKind};

use crate::config::AlertTo;
use crate::process::diag;

/// Sends `alert` where `CUGUARD_ALERT` says.
pub fn send(alert: &Alert) {
    let cfg = crate::config::get();
    let sent = match &cfg.alert {
        AlertTo::Stderr => {
            diag::warn(&alert.message);
            Ok(())
        }
        AlertTo::Json => {
            diag::raw(&alert.to_line());
            Ok(())
        }
        AlertTo::Syslog => syslog(&cfg.syslog_socket, alert).map_err(|e| {
            static SAID: AtomicBool = AtomicBool::new(false);
            diag::warn_once(
                &SAID,
                &format!(
                    "CUGUARD_ALERT=syslog: cannot send to {}: {e}; alerts go to stderr",
                    cfg.syslog_socket.display()
                ),
            );
        }),
        AlertTo::File(template) => {
            let path = crate::writer::expand_path(template);
            append(&path, alert).map_err(|e| {
                static SAID: AtomicBool = AtomicBool::new(false);
                diag::warn_once(
                    &SAID,
                    &format!(
                        "CUGUARD_ALERT=file: cannot append to {}: {e}; alerts go to stderr",
                        path.display()
                    ),
                );
            })
        }
    };
    if sent.is_err() {
        diag::warn(&alert.message);
    }
}

/// Appends the alert's line to `path`, in one write: never through a link, never to another
/// user's file or a FIFO, created 0600 ([`cuguard_files::append`]).
fn append(path: &std::path::Path, alert: &Alert) -> std::io::Result<()> {
    cuguard_files::append(path)?.write_all(alert.to_line().as_bytes())
}

/// The syslog message for `alert` (RFC 3164, as glibc's `syslog` writes it), without a newline.
fn syslog_message(alert: &Alert, local_time: &str) -> String {
    const LOG_USER: u32 = 1 << 3;
    const LOG_WARNING: u32 = 4;
    const LOG_NOTICE: u32 = 5;
    let severity = match alert.kind {
        AlertKind::WarnAt => LOG_WARNING,
        AlertKind::Cleared => LOG_NOTICE,
    };
    let json = alert.to_line();
    format!(
        "<{}>{local_time} cuguard[{}]: {}",
        LOG_USER | severity,
        alert.pid,
        json.trim_end()
    )
}

/// `unix_ms` as syslog's local time stamp (`Dec  1 10:00:00`).
fn local_time(unix_ms: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = (unix_ms / 1000) as libc::time_t;
    // SAFETY: tm is plain data, filled by localtime_r from a valid time_t.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return String::new();
        }
        tm
    };
    format!(
        "{} {:>2} {:02}:{:02}:{:02}",
        MONTHS[tm.tm_mon.clamp(0, 11) as usize],
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

fn syslog(socket: &std::path::Path, alert: &Alert) -> std::io::Result<()> {
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    let message = syslog_message(alert, &local_time(alert.unix_ms));
    sock.send_to(message.as_bytes(), socket).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syslog_messages_say_who_and_how_bad() {
        let a = Alert {
            source: "cuguard".into(),
            kind: AlertKind::WarnAt,
            time: String::new(),
            unix_ms: 0,
            pid: 77,
            exe: String::new(),
            host: String::new(),
            rank: None,
            device: 0,
            device_uuid: None,
            live_bytes: 0,
            threshold_bytes: 0,
            rearm_bytes: 0,
            setting: String::new(),
            alerts_total: 1,
            top_sites: vec![],
            report: String::new(),
            message: String::new(),
        };
        let m = syslog_message(&a, "Dec  1 10:00:00");
        assert!(
            m.starts_with("<12>Dec  1 10:00:00 cuguard[77]: {\"source\":\"cuguard\""),
            "{m}"
        );
        assert!(!m.ends_with('\n'));
        let cleared = Alert {
            kind: AlertKind::Cleared,
            ..a
        };
        assert!(syslog_message(&cleared, "x").starts_with("<13>x cuguard[77]: "));
        assert_eq!(local_time(0).len(), "Jan  1 00:00:00".len());
    }
}
