//! The pages as Prometheus metrics, in the text exposition format (version 0.0.4), the same text
//! for `/metrics` and for node_exporter's textfile collector.
//!
//! | metric | type | one series per | value |
//! |---|---|---|---|
//! | `cuguard_live_bytes` | gauge | process and device | bytes the program holds now |
//! | `cuguard_peak_bytes` | gauge | process and device | the highest `cuguard_live_bytes` so far |
//! | `cuguard_reserved_bytes` | gauge | process and device | bytes cuguard's pool holds from the driver (0 with the pool off) |
//! | `cuguard_leaks` | gauge | process | live allocations: what the report would list as leaks if the process ended now |
//! | `cuguard_oom_total` | counter | process | allocations that returned out of memory to the program |
//! | `cuguard_alerts_total` | counter | process | alerts fired (`CUGUARD_WARN_AT` crossings) |
//! | `cuguard_tag_live_bytes` | gauge | process and tag | device bytes live under the tag (`cuguard.tag`), by the tag memory was made with; the process's top 16 tags |
//! | `cuguard_tag_live_allocations` | gauge | process and tag | device allocations live under the tag |
//!
//! Labels, in this order: `pid`; `exe` (the executable's file name, as `summary` names
//! processes); `rank` and `worker` (empty when the process has none); `host`; and on the
//! per-tag metrics `tag`; on the per-device metrics `device` (the CUDA ordinal in that process) and `UUID` (the device's UUID,
//! `GPU-…`, empty when the driver gave none). `UUID` is spelled as DCGM's exporter spells it, so
//! `on(UUID)` joins these series with DCGM's (`DCGM_FI_DEV_FB_USED`, …); DCGM's own `device`
//! label (`nvidia0`) and `gpu` (the NVML index) are other numbers than the CUDA ordinal, which
//! `CUDA_VISIBLE_DEVICES` renumbers. Every series of a metric carries every label of that
//! metric, empty or not (an empty label is no label to Prometheus), so that collectors that
//! want one label set per metric (node_exporter's textfile collector) accept the text.
//!
//! Label values are escaped as the format says (`\` as `\\`, `"` as `\"`, a newline as `\n`);
//! processes come in the order given (the reader sorts them by pid), devices by the page's
//! order.

use std::fmt::Write as _;

use cuguard_page::{DevicePage, Page, TagPage};

use crate::live::exe_name;

/// The `Content-Type` of the text this module writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One metric: its name, type and help line, and how a page or one of its devices gives its
/// value.
struct Metric {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: Value,
}

enum Value {
    Device(fn(&DevicePage) -> u64),
    Process(fn(&Page) -> u64),
    Tag(fn(&TagPage) -> u64),
}

const METRICS: &[Metric] = &[
    Metric {
        name: "cuguard_live_bytes",
        kind: "gauge",
        help: "Device memory the program holds now, in bytes, per process and device (what its report would list as leaked if it ended now).",
        value: Value::Device(|d| d.live_bytes),
    },
    Metric {
        name: "cuguard_peak_bytes",
        kind: "gauge",
        help: "The highest cuguard_live_bytes of the process on the device so far, in bytes.",
        value: Value::Device(|d| d.peak_bytes),
    },
    Metric {
        name: "cuguard_reserved_bytes",
        kind: "gauge",
        help: "Device memory cuguard's pool holds from the driver for the process (in use and idle), in bytes; 0 with the pool off.",
        value: Value::Device(|d| d.reserved_bytes),
    },
    Metric {
        name: "cuguard_leaks",
        kind: "gauge",
        help: "Live allocations of the process: what its report would list as leaks if it ended now.",
        value: Value::Process(|p| p.live_allocations),
    },
    Metric {
        name: "cuguard_oom_total",
        kind: "counter",
        help: "Allocations that returned out of memory to the program.",
        value: Value::Process(|p| p.oom_total),
    },
    Metric {
        name: "cuguard_alerts_total",
        kind: "counter",
        help: "Alerts the process fired (CUGUARD_WARN_AT crossings).",
        value: Value::Process(|p| p.alerts_total),
    },
    Metric {
        name: "cuguard_tag_live_bytes",
        kind: "gauge",
        help: "Device memory live under a tag the program gave (cuguard.tag), in bytes, per process and tag (the process's top 16 tags).",
        value: Value::Tag(|t| t.live_bytes),
    },
    Metric {
        name: "cuguard_tag_live_allocations",
        kind: "gauge",
        help: "Device allocations live under a tag the program gave (cuguard.tag), per process and tag.",
        value: Value::Tag(|t| t.allocations),
    },
];

/// The metrics of these processes' pages, as exposition text.
pub fn render<'a>(pages: impl IntoIterator<Item = &'a Page> + Clone) -> String {
    let mut out = String::new();
    for m in METRICS {
        let _ = writeln!(out, "# HELP {} {}", m.name, escape_help(m.help));
        let _ = writeln!(out, "# TYPE {} {}", m.name, m.kind);
        for page in pages.clone() {
            let process = process_labels(page);
            match m.value {
                Value::Process(value) => {
                    let _ = writeln!(out, "{}{{{process}}} {}", m.name, value(page));
                }
                Value::Device(value) => {
                    for d in &page.devices {
                        let _ = writeln!(
                            out,
                            "{}{{{process},device=\"{}\",UUID=\"{}\"}} {}",
                            m.name,
                            d.ordinal,
                            escape_label(d.uuid.as_deref().unwrap_or("")),
                            value(d)
                        );
                    }
                }
                Value::Tag(value) => {
                    for t in &page.tags {
                        let _ = writeln!(
                            out,
                            "{}{{{process},tag=\"{}\"}} {}",
                            m.name,
                            escape_label(&t.name),
                            value(t)
                        );
                    }
                }
            }
        }
    }
    out
}

/// `pid="…",exe="…",rank="…",worker="…",host="…"`.
fn process_labels(page: &Page) -> String {
    format!(
        "pid=\"{}\",exe=\"{}\",rank=\"{}\",worker=\"{}\",host=\"{}\"",
        page.pid,
        escape_label(exe_name(&page.exe)),
        page.rank.map(|r| r.to_string()).unwrap_or_default(),
        escape_label(page.worker.as_deref().unwrap_or("")),
        escape_label(&page.host),
    )
}

/// A label value as the format wants it: `\`, `"` and newlines escaped.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A help line as the format wants it: `\` and newlines escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuguard_page::DevicePage;

    fn pages() -> Vec<Page> {
        vec![
            Page {
                pid: 4242,
                rank: Some(3),
                oom_total: 2,
                alerts_total: 1,
                live_allocations: 17,
                exe: "/usr/bin/python3.12".into(),
                worker: Some("tcp://127.0.0.1:40001".into()),
                host: "gpu-node-7".into(),
                devices: vec![
                    DevicePage {
                        ordinal: 0,
                        live_bytes: 3 << 20,
                        peak_bytes: 5 << 20,
                        reserved_bytes: 64 << 20,
                        uuid: Some("GPU-5c3a3f0e-1f2b-4c5d-8e9f-0a1b2c3d4e5f".into()),
                        ..DevicePage::default()
                    },
                    DevicePage {
                        ordinal: 1,
                        live_bytes: 1024,
                        peak_bytes: 4096,
                        ..DevicePage::default()
                    },
                ],
                tags: vec![TagPage {
                    name: "kv_cache".into(),
                    live_bytes: 2 << 20,
                    allocations: 2,
                }],
                ..Page::default()
            },
            Page {
                pid: 77,
                exe: "/opt/odd \"name\"\\with\nnewline".into(),
                host: "gpu-node-7".into(),
                ..Page::default()
            },
        ]
    }

    #[test]
    fn exact_text_for_a_known_set_of_pages() {
        let want = r#"# HELP cuguard_live_bytes Device memory the program holds now, in bytes, per process and device (what its report would list as leaked if it ended now).
# TYPE cuguard_live_bytes gauge
cuguard_live_bytes{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7",device="0",UUID="GPU-5c3a3f0e-1f2b-4c5d-8e9f-0a1b2c3d4e5f"} 3145728
cuguard_live_bytes{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7",device="1",UUID=""} 1024
# HELP cuguard_peak_bytes The highest cuguard_live_bytes of the process on the device so far, in bytes.
# TYPE cuguard_peak_bytes gauge
cuguard_peak_bytes{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7",device="0",UUID="GPU-5c3a3f0e-1f2b-4c5d-8e9f-0a1b2c3d4e5f"} 5242880
cuguard_peak_bytes{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7",device="1",UUID=""} 4096
# HELP cuguard_reserved_bytes Device memory cuguard's pool holds from the driver for the process (in use and idle), in bytes; 0 with the pool off.
# TYPE cuguard_reserved_bytes gauge
cuguard_reserved_bytes{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7",device="0",UUID="GPU-5c3a3f0e-1f2b-4c5d-8e9f-0a1b2c3d4e5f"} 67108864
cuguard_reserved_bytes{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7",device="1",UUID=""} 0
# HELP cuguard_leaks Live allocations of the process: what its report would list as leaks if it ended now.
# TYPE cuguard_leaks gauge
cuguard_leaks{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7"} 17
cuguard_leaks{pid="77",exe="odd \"name\"\\with\nnewline",rank="",worker="",host="gpu-node-7"} 0
# HELP cuguard_oom_total Allocations that returned out of memory to the program.
# TYPE cuguard_oom_total counter
cuguard_oom_total{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7"} 2
cuguard_oom_total{pid="77",exe="odd \"name\"\\with\nnewline",rank="",worker="",host="gpu-node-7"} 0
# HELP cuguard_alerts_total Alerts the process fired (CUGUARD_WARN_AT crossings).
# TYPE cuguard_alerts_total counter
cuguard_alerts_total{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7"} 1
cuguard_alerts_total{pid="77",exe="odd \"name\"\\with\nnewline",rank="",worker="",host="gpu-node-7"} 0
# HELP cuguard_tag_live_bytes Device memory live under a tag the program gave (cuguard.tag), in bytes, per process and tag (the process's top 16 tags).
# TYPE cuguard_tag_live_bytes gauge
cuguard_tag_live_bytes{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7",tag="kv_cache"} 2097152
# HELP cuguard_tag_live_allocations Device allocations live under a tag the program gave (cuguard.tag), per process and tag.
# TYPE cuguard_tag_live_allocations gauge
cuguard_tag_live_allocations{pid="4242",exe="python3.12",rank="3",worker="tcp://127.0.0.1:40001",host="gpu-node-7",tag="kv_cache"} 2
"#;
        let got = render(&pages());
        for (g, w) in got.lines().zip(want.lines()) {
            assert_eq!(g, w);
        }
        assert_eq!(got, want);
    }

    #[test]
    fn no_pages_is_the_help_and_type_lines_alone() {
        let got = render(&[]);
        assert_eq!(got.lines().count(), 16);
        assert!(got.lines().all(|l| l.starts_with("# ")), "{got}");
    }

    proptest::proptest! {
        /// Whatever strings a page holds, each series stays one line of `name{labels} value`.
        #[test]
        fn any_strings_stay_one_series_a_line(
            exe in ".*", worker in ".*", host in ".*", uuid in ".*", devices in 0usize..3,
        ) {
            let page = Page {
                exe,
                worker: Some(worker),
                host,
                devices: (0..devices)
                    .map(|i| DevicePage { ordinal: i as u32, uuid: Some(uuid.clone()), ..DevicePage::default() })
                    .collect(),
                ..Page::default()
            };
            let text = render(&[page]);
            let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with("# ")).collect();
            proptest::prop_assert_eq!(samples.len(), 3 * devices + 3);
            for line in samples {
                proptest::prop_assert!(line.starts_with("cuguard_"), "{}", line);
                proptest::prop_assert!(line.ends_with("} 0"), "{}", line);
            }
        }
    }

    #[test]
    fn escaping() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }
}
