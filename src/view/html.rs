//! The page of `cuguard view`: HTML with its CSS (`page.css`), script (`page.js`) and data
//! inline, and a Content-Security-Policy that forbids any network access.
//!
//! The header, the top sites table and the processes table are plain HTML; the script draws
//! the timeline charts (`svg.timeline`, a `polyline.live` and a `polyline.reserved` each) and the
//! flame graph (`#flame .frame` boxes, callers above callees; click a box to zoom) from the JSON
//! in `<script id="data">`, then sets `data-rendered="yes"` on `<body>`.

use std::io::{self, Write};

use super::View;
use crate::text::{bytes, plural};

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// Escapes text for HTML content and attributes.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// JSON that is safe inside `<script>`: no `<`, `>`, `&` or line separators left raw.
fn script_json(view: &View) -> io::Result<String> {
    let json = serde_json::to_string(&serde_json::json!({
        "charts": view.charts,
        "flame": view.flame,
    }))?;
    Ok(json
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029"))
}

/// Writes the page.
pub fn write(view: &View, out: &mut dyn Write) -> io::Result<()> {
    let s = &view.summary;
    writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">"
    )?;
    writeln!(
        out,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
    )?;
    writeln!(
        out,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    )?;
    writeln!(
        out,
        "<title>cuguard: {} in {}</title>",
        bytes(s.leaked_bytes),
        plural(s.leaks, "leak", "leaks")
    )?;
    writeln!(out, "<style>\n{CSS}</style>\n</head>\n<body>")?;
    writeln!(out, "<h1>cuguard report</h1>")?;
    let leaked = if s.leaks == 0 {
        "<span class=\"good\">nothing leaked</span>".to_string()
    } else {
        format!(
            "<span class=\"bad\">{} leaked in {}</span>",
            bytes(s.leaked_bytes),
            plural(s.leaks, "leak", "leaks")
        )
    };
    let incomplete = s.reports - s.complete_reports;
    writeln!(
        out,
        "<p class=\"totals\">{}{}: {leaked}, {}.</p>",
        plural(s.reports as u64, "process report", "process reports"),
        if incomplete > 0 {
            format!(" (<span class=\"warn\">{incomplete} incomplete</span>)")
        } else {
            String::new()
        },
        plural(s.event_total(), "event", "events"),
    )?;

    writeln!(out, "<h2>Device memory over time</h2>")?;
    writeln!(
        out,
        "<div class=\"legend\"><span class=\"l\">live (owned by the program)</span><span class=\"r\">reserved (held from the driver, pool included)</span></div>"
    )?;
    writeln!(out, "<div id=\"charts\" class=\"charts\"></div>")?;
    if view.charts_omitted > 0 {
        writeln!(
            out,
            "<p class=\"note\">{} more timelines not shown.</p>",
            view.charts_omitted
        )?;
    }

    writeln!(out, "<h2>Top sites</h2>")?;
    if s.sites.is_empty() {
        writeln!(out, "<p>No leaks.</p>")?;
    } else {
        writeln!(
            out,
            "<table id=\"sites\">\n<thead><tr><th class=\"num\">leaked</th><th class=\"num\">leaks</th><th class=\"num\">processes</th><th>site</th></tr></thead>\n<tbody>"
        )?;
        for site in &s.sites {
            let label = &site.label;
            writeln!(
                out,
                "<tr class=\"site\"><td class=\"num\" title=\"{} bytes\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"site\">{}</td></tr>",
                site.leaked_bytes,
                bytes(site.leaked_bytes),
                site.leaks,
                site.processes,
                esc(label)
            )?;
        }
        writeln!(out, "</tbody>\n</table>")?;
        if s.sites_total > s.sites.len() {
            writeln!(
                out,
                "<p class=\"note\">{} more sites not shown (see --top).</p>",
                s.sites_total - s.sites.len()
            )?;
        }
    }

    writeln!(out, "<h2>Leaked bytes by stack</h2>")?;
    writeln!(
        out,
        "<p class=\"note\">Callers above callees; width is leaked bytes. Click a frame to zoom, the top frame to zoom out.</p>"
    )?;
    writeln!(out, "<div id=\"flame\"></div>")?;

    writeln!(out, "<h2>Processes</h2>")?;
    writeln!(
        out,
        "<table id=\"processes\">\n<thead><tr><th>process</th><th>host</th><th class=\"num\">rank</th><th>report</th><th class=\"num\">leaked</th><th class=\"num\">leaks</th><th class=\"num\">events</th><th>source</th></tr></thead>\n<tbody>"
    )?;
    for p in &s.processes {
        writeln!(
            out,
            "<tr><td>{}[{}]</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"site\">{}</td></tr>",
            esc(p.exe_name()),
            p.process.pid,
            esc(&p.process.hostname),
            p.process.rank.map(|r| r.to_string()).unwrap_or_default(),
            if p.complete {
                "complete".to_string()
            } else {
                format!(
                    "<span class=\"warn\">incomplete ({})</span>",
                    esc(&p.reason)
                )
            },
            bytes(p.leaked_bytes),
            p.leaks,
            p.events.iter().map(|e| e.count).sum::<u64>(),
            esc(&p.source)
        )?;
    }
    writeln!(out, "</tbody>\n</table>")?;
    writeln!(
        out,
        "<script type=\"application/json\" id=\"data\">{}</script>",
        script_json(view)?
    )?;
    writeln!(out, "<script>\n{JS}</script>\n</body>\n</html>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Node;

    #[test]
    fn hostile_names_stay_inert() {
        assert_eq!(esc("<script>&\"'"), "&lt;script&gt;&amp;&quot;&#39;");
        let view = View {
            summary: crate::summary::Summary::new(Vec::new(), 10),
            charts: Vec::new(),
            charts_omitted: 0,
            flame: Node {
                name: "</script><script>alert(1)</script>".into(),
                bytes: 1,
                children: Vec::new(),
            },
        };
        let json = script_json(&view).unwrap();
        assert!(!json.contains('<') && !json.contains('>'));
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["flame"]["n"], "</script><script>alert(1)</script>");
    }
}
