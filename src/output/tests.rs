//! Every registered format of every output renders the fixtures; `--format` offers exactly the
//! registry's rows; a registry refuses to be empty or to hold one name twice. (The formats'
//! snapshots live with their outputs, in `summary/tests.rs` and `check/tests.rs`; clap's
//! self-check of the whole command is in `cli`.)

use std::path::PathBuf;

use clap::CommandFactory;

use super::{Options, Registry};
use crate::check::suppressions::Suppressions;
use crate::check::{self, Baseline, Limits, ProcessCheck, Verdict};
use crate::diff::{self, Diff};
use crate::input::map_reports;
use crate::style::Style;
use crate::summary::{self, ReportSummary, Summary};

/// Every report fixture (`tests/fixtures/*.json`), by name.
fn fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "fixtures: {files:?}");
    files
}

fn summarize(files: &[PathBuf], top: usize) -> Summary {
    let processes = map_reports(files, |src, r| ReportSummary::new(src, &r, top)).unwrap();
    Summary::new(processes.into_iter().map(|(_, s)| s).collect(), top)
}

fn condense(files: &[PathBuf]) -> Vec<ProcessCheck> {
    let none = Suppressions::default();
    map_reports(files, |src, r| ProcessCheck::new(src, &r, &none))
        .unwrap()
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

/// The option sets the command can pass: plain or coloured, lists cut or whole.
const OPTIONS: [Options; 2] = [
    Options {
        style: Style { color: false },
        top: 2,
        cost: false,
    },
    Options {
        style: Style { color: true },
        top: usize::MAX,
        cost: true,
    },
];

/// Writes `value` in every format of `formats` with every option set; checks each output is
/// UTF-8, non-empty but for `github` (workflow commands: none when a check passes), and that a
/// `json` or `sarif` format's is one JSON document.
fn renders_in_every_format<T, P>(formats: Registry<T, P>, value: &T, what: &str) {
    for format in formats.rows() {
        for options in &OPTIONS {
            let mut out = Vec::new();
            format
                .write(value, &mut out, options)
                .unwrap_or_else(|e| panic!("{} of {what}: {e}", format.name()));
            let text = String::from_utf8(out)
                .unwrap_or_else(|e| panic!("{} of {what} is not UTF-8: {e}", format.name()));
            assert!(
                !text.is_empty() || format.name() == "github",
                "{} of {what} is empty",
                format.name()
            );
            if format.name() == "json" || format.name() == "sarif" {
                serde_json::from_str::<serde_json::Value>(&text)
                    .unwrap_or_else(|e| panic!("json of {what}: {e}"));
            }
        }
    }
}

#[test]
fn every_summary_format_renders_each_fixture_and_all_together() {
    let files = fixtures();
    for file in &files {
        let what = file.display().to_string();
        for top in [1, usize::MAX] {
            let summary = summarize(std::slice::from_ref(file), top);
            renders_in_every_format(summary::FORMATS, &summary, &what);
        }
    }
    renders_in_every_format(summary::FORMATS, &summarize(&files, 3), "all fixtures");
}

#[test]
fn every_check_format_renders_each_fixture_passing_and_failing() {
    let files = fixtures();
    let none = Suppressions::default();
    let loose = Limits {
        max_leaked_bytes: Some(u64::MAX),
        max_leaks: Some(u64::MAX),
        fail_on_events: check::FailingEvents::None,
        require_complete: false,
        ..Limits::default()
    };
    for file in &files {
        let what = file.display().to_string();
        let processes = condense(std::slice::from_ref(file));
        for limits in [Limits::default(), loose.clone()] {
            let verdict = Verdict::new(&processes, None, &none, limits);
            renders_in_every_format(check::FORMATS, &verdict, &what);
        }
    }
    // All fixtures against the first as a baseline: new, grown and baselined sites.
    let baseline = Baseline::new(&condense(&files[..1]));
    let all = condense(&files);
    let verdict = Verdict::new(&all, Some(&baseline), &none, Limits::default());
    renders_in_every_format(check::FORMATS, &verdict, "all fixtures against a baseline");
}

#[test]
fn every_diff_format_renders_each_pair_of_fixtures() {
    let files = fixtures();
    let summaries: Vec<Summary> = files
        .iter()
        .map(|f| summarize(std::slice::from_ref(f), usize::MAX))
        .collect();
    for (i, base) in summaries.iter().enumerate() {
        for (j, new) in summaries.iter().enumerate() {
            let what = format!("{} → {}", files[i].display(), files[j].display());
            renders_in_every_format(diff::FORMATS, &Diff::new(base, new), &what);
        }
    }
}

#[test]
fn registries_keep_the_command_s_names_and_defaults() {
    fn names<T, P>(formats: Registry<T, P>) -> Vec<&'static str> {
        formats.rows().iter().map(|r| r.name()).collect()
    }
    assert_eq!(names(summary::FORMATS), ["text", "json", "markdown"]);
    assert_eq!(
        names(check::FORMATS),
        ["text", "json", "junit", "sarif", "github"]
    );
    assert_eq!(
        names(diff::FORMATS),
        ["text", "json", "markdown", "sarif", "github"]
    );
    assert_eq!(summary::FORMATS.default_format().name(), "text");
    assert_eq!(check::FORMATS.default_format().name(), "text");
    assert_eq!(diff::FORMATS.default_format().name(), "text");
    assert_eq!(check::FORMATS.get("junit").unwrap().name(), "junit");
    assert!(check::FORMATS.get("markdown").is_none());
}

/// `--format` of `subcommand`: its values with their help, and its default.
fn format_option(subcommand: &str) -> (Vec<(String, String)>, Vec<String>) {
    let cli = crate::cli::Cli::command();
    let sub = cli.find_subcommand(subcommand).unwrap();
    let arg = sub
        .get_arguments()
        .find(|a| a.get_id() == "format")
        .unwrap();
    let values = arg
        .get_possible_values()
        .iter()
        .map(|v| {
            let help = v.get_help().map(|h| h.to_string()).unwrap_or_default();
            (v.get_name().to_string(), help)
        })
        .collect();
    let default = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    (values, default)
}

#[test]
fn format_option_offers_the_registry_rows_with_their_help() {
    /// The rows' names and help, and the default's name.
    fn rows<T, P>(formats: Registry<T, P>) -> (Vec<(String, String)>, &'static str) {
        let rows = formats
            .rows()
            .iter()
            .map(|r| (r.name().to_string(), r.help().to_string()))
            .collect();
        (rows, formats.default_format().name())
    }
    for (subcommand, (rows, default)) in [
        ("summary", rows(summary::FORMATS)),
        ("check", rows(check::FORMATS)),
        ("diff", rows(diff::FORMATS)),
    ] {
        let (values, defaults) = format_option(subcommand);
        assert_eq!(values, rows, "{subcommand} --format");
        assert_eq!(defaults, [default], "{subcommand} --format default");
        assert!(rows.iter().all(|(_, help)| !help.is_empty()));
    }
}

#[test]
fn format_option_parses_to_the_row_and_refuses_other_names() {
    use crate::cli::{Cli, Command};
    use clap::Parser;

    let cli = Cli::try_parse_from(["cuguard", "check", "--format", "junit", "r.json"]).unwrap();
    let Command::Check(args) = cli.command else {
        panic!("not check")
    };
    assert_eq!(args.format.name(), "junit");
    let cli = Cli::try_parse_from(["cuguard", "summary", "r.json"]).unwrap();
    let Command::Summary(args) = cli.command else {
        panic!("not summary")
    };
    assert_eq!(args.format.name(), "text");

    let err = Cli::try_parse_from(["cuguard", "diff", "--format", "junit", "a", "b"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
    let text = err.to_string();
    assert!(
        text.contains("invalid value 'junit' for '--format <FORMAT>'"),
        "{text}"
    );
    assert!(
        text.contains("[possible values: text, json, markdown, sarif, github]"),
        "{text}"
    );
}

/// A format of bytes, for the registry's own checks.
struct Hex;

impl super::Format<[u8]> for Hex {
    const NAME: &'static str = "hex";
    const HELP: &'static str = "Two hex digits a byte";
    fn write(bytes: &[u8], out: &mut dyn std::io::Write, _: &Options) -> std::io::Result<()> {
        bytes.iter().try_for_each(|b| write!(out, "{b:02x}"))
    }
}

#[test]
fn a_row_writes_through_its_format() {
    static ROWS: [super::Row<[u8]>; 1] = [super::Row::of::<Hex>()];
    let formats = Registry::new(&ROWS);
    let mut out = Vec::new();
    let hex = formats.get("hex").unwrap();
    hex.write(b"\x01\xfe", &mut out, &Options::default())
        .unwrap();
    assert_eq!(out, b"01fe");
    assert_eq!(format!("{formats:?}"), r#"[Row("hex")]"#);
}

#[test]
#[should_panic(expected = "two formats of one registry share a name")]
fn a_registry_refuses_two_formats_of_one_name() {
    static ROWS: [super::Row<[u8]>; 2] = [super::Row::of::<Hex>(), super::Row::of::<Hex>()];
    Registry::new(&ROWS);
}

#[test]
#[should_panic(expected = "a registry needs a format")]
fn a_registry_refuses_to_be_empty() {
    static ROWS: [super::Row<[u8]>; 0] = [];
    Registry::new(&ROWS);
}

#[test]
fn the_rows_with_parts_say_what_each_needs() {
    /// The rows' names and help lines.
    fn rows<T, P>(formats: Registry<T, P>) -> Vec<(&'static str, &'static str)> {
        formats
            .rows()
            .iter()
            .map(|r| (r.name(), r.help()))
            .collect()
    }
    let places: Vec<&str> = check::FORMATS
        .rows()
        .iter()
        .filter(|r| r.parts().places)
        .map(|r| r.name())
        .collect();
    assert_eq!(places, ["sarif", "github"]);
    let export = rows(crate::cli::export::FORMATS);
    assert_eq!(
        export.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        ["memory-viz", "pprof"]
    );
    let (values, default) = format_option("export");
    assert_eq!(
        values,
        export
            .iter()
            .map(|(n, h)| (n.to_string(), h.to_string()))
            .collect::<Vec<_>>()
    );
    assert_eq!(default, ["memory-viz"]);
}
