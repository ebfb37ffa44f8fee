//! The command's usage errors as a user meets them: one line on standard error, ending in the
//! `--help` to read (the subcommand's when one was named), exit 2 and nothing on standard
//! output; `--help` and `--version` still print in full and exit 0.

use std::process::{Command, Output};

use crate::support;

fn cuguard(args: &[&str]) -> Output {
    Command::new(&support::artifacts().cuguard)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap()
}

/// Asserts exit 2, nothing on standard output and exactly `want` (one line) on standard error.
fn assert_usage_error(args: &[&str], want: &str) {
    let out = cuguard(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err, format!("{want}\n"), "{args:?}");
    assert!(out.stdout.is_empty(), "{args:?}");
}

#[test]
fn cli_usage_errors_are_one_line_with_the_help_to_read() {
    assert_usage_error(
        &["check", "--bogus"],
        "cuguard: error: unexpected argument '--bogus' found (see cuguard check --help)",
    );
    assert_usage_error(
        &["summary"],
        "cuguard: error: the following required arguments were not provided: <PATH>... \
         (see cuguard summary --help)",
    );
    assert_usage_error(
        &["frobnicate"],
        "cuguard: error: unrecognized subcommand 'frobnicate' (see cuguard --help)",
    );
    // clap's suggestion and the possible values stay, on the same line.
    assert_usage_error(
        &["sumary", "r.json"],
        "cuguard: error: unrecognized subcommand 'sumary'; did you mean 'summary'? \
         (see cuguard --help)",
    );
    assert_usage_error(
        &["check", "--formt", "json", "r.json"],
        "cuguard: error: unexpected argument '--formt' found; did you mean '--format'? \
         (see cuguard check --help)",
    );
    assert_usage_error(
        &["summary", "--format", "yaml", "r.json"],
        "cuguard: error: invalid value 'yaml' for '--format <FORMAT>' \
         [possible values: text, json, markdown] (see cuguard summary --help)",
    );
    assert_usage_error(
        &["check", "--max-leaks", "lots", "r.json"],
        "cuguard: error: invalid value 'lots' for '--max-leaks <N>': invalid digit found in \
         string (see cuguard check --help)",
    );
    assert_usage_error(
        &["diff", "a.json"],
        "cuguard: error: the following required arguments were not provided: <NEW> \
         (see cuguard diff --help)",
    );
}

#[test]
fn cli_usage_help_and_version_still_print_in_full() {
    for args in [&["--help"][..], &["check", "--help"], &["help", "summary"]] {
        let out = cuguard(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Usage: cuguard"), "{args:?}: {text}");
        assert!(text.contains("Examples:") || args == ["--help"], "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}");
    }
    let out = cuguard(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("cuguard "), "{text}");
}
