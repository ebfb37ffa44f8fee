//! The state of the interactive `cuguard top` and what each key does to it, apart from the
//! terminal (drawn by [`super::draw`], driven by [`super::terminal`]), so it is tested without
//! one.

use std::path::PathBuf;
use std::time::Duration;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::live::{LiveProcess, Scan};

/// Which screen is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    /// One row per process and device.
    List,
    /// The selected process: its devices' history, top sites and contexts.
    Detail,
}

/// What a key asks of the loop around the app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// End `top`.
    Quit,
    /// Ask this process for a snapshot report (`cuguard snapshot`).
    Snapshot(u32),
}

/// One row of the list: a process and one of its devices (`None` when it has none yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// Index into [`App::processes`].
    pub process: usize,
    /// Index into that process's devices.
    pub device: Option<usize>,
}

/// What `top` shows.
#[derive(Debug)]
pub struct App {
    /// The processes of the last scan, by pid.
    pub processes: Vec<LiveProcess>,
    /// The selected row, an index into [`App::rows`].
    pub selected: usize,
    /// The screen shown.
    pub screen: Screen,
    /// The line at the bottom: the last thing worth saying (a snapshot's outcome, a skipped
    /// page, a directory that cannot be read).
    pub status: Option<String>,
    /// Every skipped-page line said so far, to repeat on standard error when `top` ends.
    pub notes: Vec<String>,
    /// The page directory.
    pub dir: PathBuf,
    /// How often the pages are read.
    pub interval: Duration,
    /// Whether colours may be used (`NO_COLOR` unset).
    pub color: bool,
    /// The process a snapshot was asked of and not yet answered.
    pub snapshot_pending: Option<u32>,
}

impl App {
    /// An app with nothing read yet.
    pub fn new(dir: PathBuf, interval: Duration, color: bool) -> App {
        App {
            processes: Vec::new(),
            selected: 0,
            screen: Screen::List,
            status: None,
            notes: Vec::new(),
            dir,
            interval,
            color,
            snapshot_pending: None,
        }
    }

    /// The list's rows: each process's devices in order.
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for (process, p) in self.processes.iter().enumerate() {
            if p.page.devices.is_empty() {
                rows.push(Row {
                    process,
                    device: None,
                });
            }
            for device in 0..p.page.devices.len() {
                rows.push(Row {
                    process,
                    device: Some(device),
                });
            }
        }
        rows
    }

    /// The selected process, if there is one.
    pub fn selected_process(&self) -> Option<&LiveProcess> {
        let row = *self.rows().get(self.selected)?;
        self.processes.get(row.process)
    }

    /// Takes a new scan, keeping the same process and device selected when it is still there.
    pub fn update(&mut self, scan: Scan) {
        let key = |app: &App| {
            let row = *app.rows().get(app.selected)?;
            let p = &app.processes[row.process].page;
            Some((
                p.pid,
                p.start_unix_ms,
                row.device.map(|d| p.devices[d].ordinal),
            ))
        };
        let before = key(self);
        if let Some(note) = scan.notes.last() {
            self.status = Some(note.clone());
        }
        self.notes.extend(scan.notes);
        self.processes = scan.processes;
        let rows = self.rows();
        if let Some((pid, start, ordinal)) = before {
            let same_process = |r: &Row| {
                let p = &self.processes[r.process].page;
                p.pid == pid && p.start_unix_ms == start
            };
            let found = rows
                .iter()
                .position(|r| {
                    same_process(r)
                        && r.device
                            .map(|d| self.processes[r.process].page.devices[d].ordinal)
                            == ordinal
                })
                .or_else(|| rows.iter().position(same_process));
            match found {
                Some(i) => self.selected = i,
                // The process is gone: its details with it.
                None => self.screen = Screen::List,
            }
        }
        self.selected = self.selected.min(rows.len().saturating_sub(1));
        if rows.is_empty() {
            self.screen = Screen::List;
        }
    }

    /// Says a failure to read the page directory (the last processes stay shown).
    pub fn scan_failed(&mut self, message: String) {
        self.status = Some(message);
    }

    /// Says how a snapshot went.
    pub fn snapshot_done(&mut self, message: String) {
        self.snapshot_pending = None;
        self.status = Some(message);
    }

    /// What a key does.
    pub fn key(&mut self, key: KeyEvent) -> Option<Command> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        let rows = self.rows().len();
        match key.code {
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                return Some(Command::Quit);
            }
            KeyCode::Char('q') => return Some(Command::Quit),
            KeyCode::Esc => match self.screen {
                Screen::Detail => self.screen = Screen::List,
                Screen::List => return Some(Command::Quit),
            },
            KeyCode::Enter => {
                self.screen = match self.screen {
                    Screen::List if rows > 0 => Screen::Detail,
                    _ => Screen::List,
                }
            }
            KeyCode::Backspace | KeyCode::Left | KeyCode::Char('h') => self.screen = Screen::List,
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(rows.saturating_sub(1));
            }
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Home | KeyCode::Char('g') => self.selected = 0,
            KeyCode::End | KeyCode::Char('G') => self.selected = rows.saturating_sub(1),
            KeyCode::PageDown => self.selected = (self.selected + 10).min(rows.saturating_sub(1)),
            KeyCode::PageUp => self.selected = self.selected.saturating_sub(10),
            KeyCode::Char('s') => {
                let pid = self.selected_process()?.page.pid;
                if let Some(pending) = self.snapshot_pending {
                    self.status = Some(format!(
                        "a snapshot of {pending} is still being written; wait for it"
                    ));
                    return None;
                }
                self.snapshot_pending = Some(pid);
                self.status = Some(format!("asking process {pid} for a snapshot report…"));
                return Some(Command::Snapshot(pid));
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use cuguard_page::{DevicePage, Page};

    use super::*;

    fn process(pid: u32, devices: &[u32]) -> LiveProcess {
        LiveProcess {
            path: PathBuf::new(),
            page: Page {
                pid,
                start_unix_ms: 1,
                devices: devices
                    .iter()
                    .map(|&ordinal| DevicePage {
                        ordinal,
                        ..DevicePage::default()
                    })
                    .collect(),
                ..Page::default()
            },
        }
    }

    fn scan(processes: Vec<LiveProcess>) -> Scan {
        Scan {
            processes,
            ..Scan::default()
        }
    }

    fn press(app: &mut App, code: KeyCode) -> Option<Command> {
        app.key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    #[test]
    fn selection_follows_its_process_across_scans() {
        let mut app = App::new(PathBuf::new(), Duration::from_secs(1), false);
        app.update(scan(vec![process(10, &[0, 1]), process(20, &[0])]));
        assert_eq!(app.rows().len(), 3);
        press(&mut app, KeyCode::Down);
        assert_eq!(app.selected, 1, "process 10, device 1");
        // A process with a smaller pid appears: the selection stays on 10's device 1.
        app.update(scan(vec![
            process(5, &[]),
            process(10, &[0, 1]),
            process(20, &[0]),
        ]));
        assert_eq!(app.selected, 2);
        assert_eq!(app.selected_process().unwrap().page.pid, 10);
        // Device 1 goes away: the process stays selected.
        app.update(scan(vec![
            process(5, &[]),
            process(10, &[0]),
            process(20, &[0]),
        ]));
        assert_eq!(app.selected_process().unwrap().page.pid, 10);
        // The process ends while its details are shown: back to the list.
        assert_eq!(press(&mut app, KeyCode::Enter), None);
        assert_eq!(app.screen, Screen::Detail);
        app.update(scan(vec![process(5, &[])]));
        assert_eq!(app.screen, Screen::List);
        assert_eq!(app.selected, 0);
        app.update(scan(vec![]));
        assert_eq!(app.selected, 0);
        assert_eq!(press(&mut app, KeyCode::Enter), None);
        assert_eq!(app.screen, Screen::List, "no details of nothing");
    }

    #[test]
    fn keys() {
        let mut app = App::new(PathBuf::new(), Duration::from_secs(1), false);
        app.update(scan(vec![process(10, &[0]), process(20, &[0])]));
        press(&mut app, KeyCode::End);
        assert_eq!(app.selected, 1);
        press(&mut app, KeyCode::Down);
        assert_eq!(app.selected, 1, "stays on the last row");
        assert_eq!(
            press(&mut app, KeyCode::Char('s')),
            Some(Command::Snapshot(20))
        );
        assert_eq!(press(&mut app, KeyCode::Char('s')), None, "one at a time");
        assert!(
            app.status
                .as_deref()
                .unwrap()
                .contains("still being written")
        );
        app.snapshot_done("snapshot of 20: /tmp/r.json".into());
        assert_eq!(app.snapshot_pending, None);
        press(&mut app, KeyCode::Enter);
        assert_eq!(
            press(&mut app, KeyCode::Esc),
            None,
            "Esc leaves the details first"
        );
        assert_eq!(app.screen, Screen::List);
        assert_eq!(press(&mut app, KeyCode::Esc), Some(Command::Quit));
        assert_eq!(press(&mut app, KeyCode::Char('q')), Some(Command::Quit));
        assert_eq!(
            app.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Command::Quit)
        );
    }

    #[test]
    fn notes_are_kept_and_the_last_shown() {
        let mut app = App::new(PathBuf::new(), Duration::from_secs(1), false);
        app.update(Scan {
            notes: vec!["page a: truncated".into(), "page b: zeroed".into()],
            ..Scan::default()
        });
        assert_eq!(app.status.as_deref(), Some("page b: zeroed"));
        assert_eq!(app.notes.len(), 2);
    }
}
