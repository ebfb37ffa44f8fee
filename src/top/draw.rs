//! Drawing `cuguard top`'s two screens with ratatui: the list (one row per process and device,
//! with a sparkline of its live bytes) and a process's details (its devices' history, top sites
//! and contexts). Colour only when [`App::color`] says so (`NO_COLOR`); without it, bold and
//! reverse video still mark the header and the selection.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Sparkline, Table, TableState, Wrap};

use super::app::{App, Screen};
use super::once::nothing_found;
use super::spark::sparkline;
use crate::live::{LiveProcess, exe_name};
use crate::wording::{bytes, delta_bytes, one_line};

/// Widths of the list's columns before the history: pid, exe, rank/worker, device, live, peak,
/// reserved, growth.
const LIST_WIDTHS: [u16; 8] = [7, 16, 12, 3, 10, 10, 10, 11];

/// Draws the app's screen; `now_ms` (Unix milliseconds) dates the pages.
pub fn draw(frame: &mut Frame, app: &App, now_ms: u64) {
    let [title, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let palette = Palette { color: app.color };
    let count = app.processes.len();
    let heading = format!(
        "cuguard top  {} {}  pages in {}  every {:.1} s",
        count,
        if count == 1 { "process" } else { "processes" },
        one_line(&app.dir.display().to_string()),
        app.interval.as_secs_f64()
    );
    frame.render_widget(Paragraph::new(heading).style(palette.title()), title);
    let help = match app.screen {
        Screen::List => "↑↓ select  Enter details  s snapshot  q quit",
        Screen::Detail => "Esc back  ↑↓ select  s snapshot  q quit",
    };
    let status_line = match &app.status {
        Some(s) => Line::from(vec![
            Span::styled(one_line(s), palette.warn()),
            Span::raw("   "),
            Span::styled(help, palette.dim()),
        ]),
        None => Line::styled(help, palette.dim()),
    };
    frame.render_widget(Paragraph::new(status_line), status);
    match (app.screen, app.selected_process()) {
        (Screen::Detail, Some(p)) => detail(frame, body, p, now_ms, palette),
        _ if app.processes.is_empty() => {
            let text = Text::from(vec![
                Line::from(nothing_found(&app.dir)),
                Line::styled(
                    "(a process appears once it runs under the shim and has made its first CUDA allocation)",
                    palette.dim(),
                ),
            ]);
            frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), body);
        }
        _ => list(frame, body, app, palette),
    }
}

fn list(frame: &mut Frame, area: Rect, app: &App, palette: Palette) {
    let fixed: u16 = LIST_WIDTHS.iter().sum::<u16>() + LIST_WIDTHS.len() as u16;
    let history_width = area.width.saturating_sub(fixed) as usize;
    let header = Row::new(
        [
            "PID",
            "EXE",
            "RANK/WORKER",
            "DEV",
            "LIVE",
            "PEAK",
            "RESERVED",
            "GROWTH",
            "HISTORY",
        ]
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            if (4..8).contains(&i) {
                right(h.to_string())
            } else {
                Cell::from(h)
            }
        }),
    )
    .style(palette.header());
    let rows = app.rows().into_iter().map(|row| {
        let page = &app.processes[row.process].page;
        let mut cells = vec![
            right(page.pid.to_string()),
            Cell::from(one_line(exe_name(&page.exe))),
            Cell::from(rank_worker(page)),
        ];
        match row.device.map(|d| &page.devices[d]) {
            Some(d) => cells.extend([
                right(d.ordinal.to_string()),
                right(bytes(d.live_bytes)),
                right(bytes(d.peak_bytes)),
                right(bytes(d.reserved_bytes)),
                Cell::from(
                    Line::from(delta_bytes(d.growth_bytes.into()))
                        .right_aligned()
                        .style(palette.growth(d.growth_bytes)),
                ),
                Cell::from(sparkline(&d.history, history_width)).style(palette.spark()),
            ]),
            None => cells.extend(
                ["-", "-", "-", "-", "-"]
                    .into_iter()
                    .map(|s| right(s.to_string())),
            ),
        }
        Row::new(cells)
    });
    let widths = LIST_WIDTHS
        .iter()
        .map(|&w| Constraint::Length(w))
        .chain([Constraint::Min(0)]);
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(Some(app.selected));
    frame.render_stateful_widget(table, area, &mut state);
}

/// A process's details: who it is and its page's counts, each device's history, its top sites
/// and its contexts.
fn detail(frame: &mut Frame, area: Rect, p: &LiveProcess, now_ms: u64, palette: Palette) {
    let page = &p.page;
    let devices = page.devices.len().min(4) as u16;
    let sites_height = page.sites.len() as u16 + 3;
    let [facts, history, sites, contexts] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(devices * 4),
        Constraint::Length(sites_height),
        Constraint::Min(0),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(detail_facts(page, now_ms, palette)), facts);
    device_histories(frame, history, page, devices, palette);
    frame.render_widget(site_table(page, palette), sites);
    frame.render_widget(context_table(page, palette), contexts);
}

/// The details' first lines: who the process is, its page's counts, its exe and report.
fn detail_facts(page: &cuguard_page::Page, now_ms: u64, palette: Palette) -> Vec<Line<'static>> {
    let mut who = vec![Span::styled(
        format!("{} [{}]", one_line(exe_name(&page.exe)), page.pid),
        palette.header(),
    )];
    if let Some(rank) = page.rank {
        who.push(Span::raw(format!("  rank {rank}")));
    }
    if let Some(worker) = &page.worker {
        who.push(Span::raw(format!("  worker {}", one_line(worker))));
    }
    who.push(Span::raw(format!("  on {}", one_line(&page.host))));
    let age = now_ms.saturating_sub(page.updated_unix_ms) as f64 / 1000.0;
    vec![
        Line::from(who),
        Line::from(format!(
            "{} live allocations  {} out of memory  {} alerts  {} contexts  page updated {age:.1} s ago",
            page.live_allocations, page.oom_total, page.alerts_total, page.contexts_live
        )),
        Line::from(format!("exe {}", one_line(&page.exe))),
        Line::from(format!("report {}", one_line(&page.report))),
    ]
}

/// One sparkline of live bytes per device (the first `devices`), titled with its numbers.
fn device_histories(
    frame: &mut Frame,
    area: Rect,
    page: &cuguard_page::Page,
    devices: u16,
    palette: Palette,
) {
    let slots = Layout::vertical((0..devices).map(|_| Constraint::Length(4))).split(area);
    for (d, slot) in page.devices.iter().zip(slots.iter()) {
        let window = d.history.len() as u64 * u64::from(d.history_interval_ms) / 1000;
        let mut title = format!("device {}", d.ordinal);
        if !d.name.is_empty() {
            title.push_str(&format!(" {}", one_line(&d.name)));
        }
        if let Some(uuid) = &d.uuid {
            title.push_str(&format!(" {}", one_line(uuid)));
        }
        title.push_str(&format!(
            ": live {}  peak {}  reserved {}  growth {} over {window} s",
            bytes(d.live_bytes),
            bytes(d.peak_bytes),
            bytes(d.reserved_bytes),
            delta_bytes(d.growth_bytes.into()),
        ));
        let spark = Sparkline::default()
            .block(Block::bordered().title(title))
            .data(&d.history)
            .style(palette.spark());
        frame.render_widget(spark, *slot);
    }
}

/// The process's top sites by live bytes.
fn site_table(page: &cuguard_page::Page, palette: Palette) -> Table<'_> {
    let site_rows = page.sites.iter().map(|s| {
        Row::new([
            right(s.device.to_string()),
            right(bytes(s.live_bytes)),
            right(s.allocations.to_string()),
            Cell::from(
                Line::from(delta_bytes(s.growth_bytes.into()))
                    .right_aligned()
                    .style(palette.growth(s.growth_bytes)),
            ),
            Cell::from(one_line(&s.owner)),
            Cell::from(one_line(&s.label)),
        ])
    });
    Table::new(
        site_rows,
        [
            Constraint::Length(3),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(11),
            Constraint::Length(24),
            Constraint::Min(0),
        ],
    )
    .header(
        Row::new([
            right("DEV".into()),
            right("LIVE".into()),
            right("ALLOCS".into()),
            right("GROWTH".into()),
            Cell::from("OWNER"),
            Cell::from("SITE"),
        ])
        .style(palette.header()),
    )
    .block(Block::bordered().title("top sites by live bytes"))
}

/// The process's contexts.
fn context_table(page: &cuguard_page::Page, palette: Palette) -> Table<'_> {
    let context_rows = page.contexts.iter().map(|c| {
        Row::new([
            right(c.id.to_string()),
            right(c.device.to_string()),
            Cell::from(if c.primary { "primary" } else { "" }),
            right(format!("{:.1} s", c.created_ms as f64 / 1000.0)),
            right(bytes(c.live_bytes)),
        ])
    });
    Table::new(
        context_rows,
        [
            Constraint::Length(4),
            Constraint::Length(3),
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(10),
        ],
    )
    .header(
        Row::new([
            right("ID".into()),
            right("DEV".into()),
            Cell::from(""),
            right("CREATED".into()),
            right("LIVE".into()),
        ])
        .style(palette.header()),
    )
    .block(Block::bordered().title("contexts"))
}

/// `3`, `worker`, `3 worker`, or `-`.
fn rank_worker(page: &cuguard_page::Page) -> String {
    match (page.rank, &page.worker) {
        (Some(r), Some(w)) => format!("{r} {}", one_line(w)),
        (Some(r), None) => r.to_string(),
        (None, Some(w)) => one_line(w),
        (None, None) => "-".into(),
    }
}

fn right(text: String) -> Cell<'static> {
    Cell::from(Line::from(text).right_aligned())
}

/// The styles, with or without colour.
#[derive(Clone, Copy)]
struct Palette {
    color: bool,
}

impl Palette {
    fn fg(self, style: Style, color: Color) -> Style {
        if self.color { style.fg(color) } else { style }
    }

    fn title(self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    fn header(self) -> Style {
        self.fg(Style::new().add_modifier(Modifier::BOLD), Color::Cyan)
    }

    fn dim(self) -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }

    fn warn(self) -> Style {
        self.fg(Style::new(), Color::Yellow)
    }

    fn spark(self) -> Style {
        self.fg(Style::new(), Color::Green)
    }

    /// Growing memory in red, shrinking in green.
    fn growth(self, growth: i64) -> Style {
        match growth {
            g if g > 0 => self.fg(Style::new(), Color::Red),
            g if g < 0 => self.fg(Style::new(), Color::Green),
            _ => Style::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use cuguard_page::{ContextPage, DevicePage, Page, SitePage};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    use super::*;
    use crate::live::Scan;

    fn app(color: bool) -> App {
        let mut app = App::new(
            PathBuf::from("/run/user/1000/cuguard"),
            Duration::from_secs(1),
            color,
        );
        app.update(Scan {
            processes: vec![LiveProcess {
                path: PathBuf::new(),
                page: Page {
                    pid: 4242,
                    rank: Some(3),
                    exe: "/usr/bin/python3.12".into(),
                    host: "gpu-node-7".into(),
                    updated_unix_ms: 10_000,
                    live_allocations: 17,
                    devices: vec![DevicePage {
                        ordinal: 0,
                        live_bytes: 3 << 20,
                        peak_bytes: 5 << 20,
                        reserved_bytes: 64 << 20,
                        growth_bytes: 1 << 20,
                        history_interval_ms: 1000,
                        history: vec![0, 1 << 20, 2 << 20, 3 << 20],
                        uuid: Some("GPU-5c3a".into()),
                        name: "NVIDIA H200".into(),
                        ..DevicePage::default()
                    }],
                    sites: vec![SitePage {
                        device: 0,
                        live_bytes: 2 << 20,
                        allocations: 2,
                        growth_bytes: 1 << 20,
                        owner: "program".into(),
                        label: "step (train.py:42)".into(),
                    }],
                    contexts: vec![ContextPage {
                        id: 1,
                        device: 0,
                        primary: true,
                        created_ms: 1500,
                        live_bytes: 3 << 20,
                    }],
                    ..Page::default()
                },
            }],
            ..Scan::default()
        });
        app
    }

    fn screen(app: &App) -> (String, ratatui::buffer::Buffer) {
        let mut terminal = Terminal::new(TestBackend::new(130, 24)).unwrap();
        terminal.draw(|f| draw(f, app, 12_500)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        let text = (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol().to_string())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n");
        (text, buffer)
    }

    #[test]
    fn the_list_shows_a_row_per_process_and_device() {
        let (text, _) = screen(&app(true));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "cuguard top  1 process  pages in /run/user/1000/cuguard  every 1.0 s"
        );
        assert!(
            lines[1].starts_with("PID     EXE              RANK/WORKER  DEV       LIVE"),
            "{}",
            lines[1]
        );
        assert_eq!(
            lines[2],
            "   4242 python3.12       3              0    3.0 MiB    5.0 MiB   64.0 MiB    +1.0 MiB ▁▄▆█"
        );
        assert!(
            lines[23].starts_with("↑↓ select  Enter details"),
            "{}",
            lines[23]
        );
    }

    #[test]
    fn details_show_history_sites_and_contexts() {
        let mut app = app(true);
        app.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        let (text, _) = screen(&app);
        for want in [
            "python3.12 [4242]  rank 3  on gpu-node-7",
            "17 live allocations  0 out of memory  0 alerts  0 contexts  page updated 2.5 s ago",
            "device 0 NVIDIA H200 GPU-5c3a: live 3.0 MiB  peak 5.0 MiB  reserved 64.0 MiB  growth +1.0 MiB over 4 s",
            "step (train.py:42)",
            "primary",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
    }

    #[test]
    fn no_color_means_no_colour() {
        for screen_key in [None, Some(KeyCode::Enter)] {
            let mut app = app(false);
            if let Some(k) = screen_key {
                app.key(KeyEvent::new(k, KeyModifiers::NONE));
            }
            let (_, buffer) = screen(&app);
            for cell in buffer.content() {
                assert_eq!(cell.fg, Color::Reset, "{cell:?}");
                assert_eq!(cell.bg, Color::Reset, "{cell:?}");
            }
        }
        let (_, coloured) = screen(&app(true));
        assert!(coloured.content().iter().any(|c| c.fg != Color::Reset));
    }

    #[test]
    fn nothing_found_is_said() {
        let app = App::new(
            PathBuf::from("/tmp/cuguard-7"),
            Duration::from_secs(2),
            false,
        );
        let (text, _) = screen(&app);
        assert!(
            text.contains("no process under cuguard found (no readable page in /tmp/cuguard-7)"),
            "{text}"
        );
    }
}
