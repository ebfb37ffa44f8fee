//! The interactive `cuguard top`: takes the terminal (raw mode, alternate screen), reads the
//! pages every interval, draws, answers keys, and gives the terminal back as it found it, also
//! on an error or a panic (ratatui's hook).

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ratatui::DefaultTerminal;
use ratatui::crossterm::event::{self, Event};

use super::app::{App, Command};
use super::draw::draw;
use crate::live::{Reader, process::unix_ms};

/// How often keys are looked for while waiting for the next read (and a snapshot's answer).
const TICK: Duration = Duration::from_millis(200);

/// Runs `top` on the terminal until a key ends it; returns the app as it ended (its
/// [`App::notes`] are for standard error). `snapshot` asks a process for a snapshot report and
/// says how that went, in one line; it runs on its own thread.
pub fn run(mut app: App, mut reader: Reader, snapshot: fn(u32) -> String) -> io::Result<App> {
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, &mut app, &mut reader, snapshot);
    let restored = ratatui::try_restore();
    result.and(restored).map(|()| app)
}

fn event_loop(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    reader: &mut Reader,
    snapshot: fn(u32) -> String,
) -> io::Result<()> {
    let (answers, answered) = mpsc::channel::<String>();
    let mut next_read = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_read {
            match reader.scan() {
                Ok(scan) => app.update(scan),
                Err(e) => app.scan_failed(e.to_string()),
            }
            next_read = now + app.interval;
        }
        while let Ok(answer) = answered.try_recv() {
            app.snapshot_done(answer);
        }
        terminal.draw(|frame| draw(frame, app, unix_ms()))?;
        let wait = next_read
            .saturating_duration_since(Instant::now())
            .min(TICK);
        if !event::poll(wait)? {
            continue;
        }
        if let Event::Key(key) = event::read()? {
            match app.key(key) {
                Some(Command::Quit) => return Ok(()),
                Some(Command::Snapshot(pid)) => {
                    let answers = answers.clone();
                    std::thread::spawn(move || {
                        let _ = answers.send(snapshot(pid));
                    });
                }
                None => {}
            }
        }
    }
}
