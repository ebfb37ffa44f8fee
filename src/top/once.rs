//! `cuguard top --once`: one frame as plain text, for scripts and tests.
//!
//! A header line, then one line per process and device, processes by pid, devices in the page's
//! order. Fixed-width columns, numbers right-aligned, sizes in `summary`'s units (`3.0 MiB`),
//! the executable last so a long name shifts nothing:
//!
//! ```text
//!     PID  RANK  DEV        LIVE        PEAK    RESERVED       GROWTH  EXE
//!    4242     3    0     3.0 MiB     5.0 MiB    64.0 MiB     -1.0 MiB  python3.12 (worker tcp://127.0.0.1:40001)
//!    4300     -    -           -           -           -            -  train
//! ```
//!
//! `RANK` is `-` for a process without one; a process with no device yet has one line of `-`.
//! `GROWTH` is how much the live bytes rose over the page's history window. No escape codes,
//! whatever the terminal.

use std::io::{self, Write};
use std::path::Path;

use crate::live::{LiveProcess, exe_name};
use crate::wording::{bytes, delta_bytes, one_line};

/// The header line.
pub fn header() -> String {
    row([
        "PID", "RANK", "DEV", "LIVE", "PEAK", "RESERVED", "GROWTH", "EXE",
    ])
}

/// One line: the cells padded to the columns' widths, right-aligned, the last one as it is.
fn row(cells: [&str; 8]) -> String {
    let [pid, rank, dev, live, peak, reserved, growth, exe] = cells;
    format!(
        "{pid:>7}  {rank:>4}  {dev:>3}  {live:>10}  {peak:>10}  {reserved:>10}  {growth:>11}  {exe}"
    )
}

/// Writes the frame: the header and a line per process and device; or, with no processes, the
/// one line [`nothing_found`] says.
pub fn write(processes: &[LiveProcess], dir: &Path, out: &mut dyn Write) -> io::Result<()> {
    if processes.is_empty() {
        return writeln!(out, "{}", nothing_found(dir));
    }
    writeln!(out, "{}", header())?;
    for p in processes {
        for line in lines(p) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// The line said when no process is found.
pub fn nothing_found(dir: &Path) -> String {
    format!(
        "no process under cuguard found (no readable page in {})",
        one_line(&dir.display().to_string())
    )
}

/// The process's lines: one per device, or one of `-` when it has none.
pub fn lines(p: &LiveProcess) -> Vec<String> {
    let page = &p.page;
    let rank = page.rank.map_or_else(|| "-".to_string(), |r| r.to_string());
    let mut exe = one_line(exe_name(&page.exe));
    if let Some(worker) = &page.worker {
        exe = format!("{exe} (worker {})", one_line(worker));
    }
    let pid = page.pid.to_string();
    let line = |dev: &str, live: &str, peak: &str, reserved: &str, growth: &str| {
        row([&pid, &rank, dev, live, peak, reserved, growth, &exe])
    };
    if page.devices.is_empty() {
        return vec![line("-", "-", "-", "-", "-")];
    }
    page.devices
        .iter()
        .map(|d| {
            line(
                &d.ordinal.to_string(),
                &bytes(d.live_bytes),
                &bytes(d.peak_bytes),
                &bytes(d.reserved_bytes),
                &delta_bytes(d.growth_bytes.into()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use cuguard_page::{DevicePage, Page};

    use super::*;

    fn process(page: Page) -> LiveProcess {
        LiveProcess {
            path: PathBuf::from("/x"),
            page,
        }
    }

    #[test]
    fn the_frame_as_documented() {
        let a = process(Page {
            pid: 4242,
            rank: Some(3),
            exe: "/usr/bin/python3.12".into(),
            worker: Some("tcp://127.0.0.1:40001".into()),
            devices: vec![
                DevicePage {
                    ordinal: 0,
                    live_bytes: 3 << 20,
                    peak_bytes: 5 << 20,
                    reserved_bytes: 64 << 20,
                    growth_bytes: -(1 << 20),
                    ..DevicePage::default()
                },
                DevicePage {
                    ordinal: 1,
                    live_bytes: 512,
                    peak_bytes: 1536,
                    growth_bytes: 512,
                    ..DevicePage::default()
                },
            ],
            ..Page::default()
        });
        let b = process(Page {
            pid: 4300,
            exe: "train".into(),
            ..Page::default()
        });
        let mut out = Vec::new();
        write(&[a, b], Path::new("/run/user/1000/cuguard"), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "    PID  RANK  DEV        LIVE        PEAK    RESERVED       GROWTH  EXE
   4242     3    0     3.0 MiB     5.0 MiB    64.0 MiB     -1.0 MiB  python3.12 (worker tcp://127.0.0.1:40001)
   4242     3    1       512 B     1.5 KiB         0 B       +512 B  python3.12 (worker tcp://127.0.0.1:40001)
   4300     -    -           -           -           -            -  train
"
        );
    }

    #[test]
    fn nothing_found_is_one_line() {
        let mut out = Vec::new();
        write(&[], Path::new("/tmp/cuguard-7"), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "no process under cuguard found (no readable page in /tmp/cuguard-7)\n"
        );
    }

    #[test]
    fn hostile_names_stay_on_one_line() {
        let p = process(Page {
            pid: 1,
            exe: "/x/evil\n\u{1b}[31mred".into(),
            ..Page::default()
        });
        let lines = lines(&p);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].ends_with("evil\\n\\u{1b}[31mred"), "{}", lines[0]);
    }
}
