//! The benchmark programs' command lines: `--help` prints the usage with an example and runs
//! nothing; an option a program does not know, or one without its value, stops it with the
//! usage (exit 2) rather than running minutes of benchmark.

use std::process::Command;

use crate::support;

#[test]
fn the_benchmarks_print_their_usage_and_refuse_what_they_do_not_know() {
    for program in ["alloc_bench", "capture_bench"] {
        let path = support::rust_program(program);
        let help = Command::new(&path).arg("--help").output().unwrap();
        assert_eq!(help.status.code(), Some(0), "{program} --help");
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(text.starts_with(&format!("{program}: ")), "{text}");
        assert!(
            text.contains("\nUsage: ") && text.contains("\nExample"),
            "{text}"
        );
        for wrong in [&["--bogus"][..], &["--rounds"][..]] {
            let out = Command::new(&path).args(wrong).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "{program} {wrong:?}");
            let said = String::from_utf8_lossy(&out.stderr);
            let first = said.lines().next().unwrap_or_default();
            let want = if wrong[0] == "--bogus" {
                "unknown option --bogus"
            } else {
                "--rounds needs a value"
            };
            assert!(first.ends_with(&format!("{program}: {want}")), "{said}");
            assert!(said.contains("\nUsage: "), "{said}");
            assert!(out.stdout.is_empty(), "nothing ran");
        }
    }
}
