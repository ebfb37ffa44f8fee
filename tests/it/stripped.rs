//! A shim without debug information, as the release wheel ships it (the `dist` profile, Cargo.toml),
//! still names the program's frames: they are read from the program's own files, never from the
//! shim's line tables. A C program built with `-g` keeps blocks from four sites under a copy of the
//! shim stripped with `strip --strip-debug`; each leak's site is its function, file and line.
//! (The Python suite checks the same of the installed wheel's own shim, and that none of the
//! wheel's binaries carries debug sections: `tests/python/test_distribution.py`.)

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::{
    artifacts, c_program, leak_stack, read_report, run, scratch_dir, shim_command,
};

/// The names of an ELF64 little-endian file's sections.
fn section_names(path: &Path) -> Vec<String> {
    let data = std::fs::read(path).unwrap();
    assert_eq!(
        &data[..6],
        b"\x7fELF\x02\x01",
        "{} is not ELF64 LE",
        path.display()
    );
    let u16_at = |o: usize| u16::from_le_bytes(data[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strings = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(|i| {
            let start = strings + u32_at(header(i));
            let end = start + data[start..].iter().position(|&b| b == 0).unwrap();
            String::from_utf8_lossy(&data[start..end]).into_owned()
        })
        .collect()
}

fn debug_sections(path: &Path) -> Vec<String> {
    section_names(path)
        .into_iter()
        .filter(|n| n.starts_with(".debug_"))
        .collect()
}

#[test]
fn a_shim_stripped_of_debug_information_still_names_the_programs_lines() {
    let a = artifacts();
    let dir = scratch_dir("stripped_shim");
    let stripped = dir.join("libcuguard.so");
    std::fs::copy(&a.shim, &stripped).unwrap();
    let status = Command::new("strip")
        .arg("--strip-debug")
        .arg(&stripped)
        .status()
        .expect("running strip (binutils)");
    assert!(status.success());
    // The built shim has line tables (the dev profile); the copy has none, and keeps its symbols.
    assert!(
        debug_sections(&a.shim).contains(&".debug_line".to_string()),
        "{:?}",
        section_names(&a.shim)
    );
    assert_eq!(debug_sections(&stripped), Vec::<String>::new());
    assert!(section_names(&stripped).contains(&".symtab".to_string()));

    let program = c_program("stack_named");
    let report_path = dir.join("report.json");
    let mut cmd = shim_command(&program, &report_path);
    cmd.env("LD_PRELOAD", &stripped);
    let out = run(&mut cmd, true);
    let report = read_report(&report_path);
    let src = a.root.join("harness/workloads/c/stack_named.c");
    let mut seen = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let stack = leak_stack(&report, w[1]);
        assert_eq!(
            (&stack["site"]["in"], &stack["site"]["index"]),
            (&Value::from("frames"), &Value::from(0)),
            "{stack}"
        );
        let frame = &stack["frames"][0];
        let function = match w[0] {
            "static" => "static_site",
            "thread" => "thread_start",
            "inlined" => "inlined_alloc",
            "pool" => "my_pool_grow",
            other => panic!("unexpected line {other}"),
        };
        assert_eq!(
            (
                frame["function"].as_str(),
                frame["file"].as_str().map(Path::new),
                frame["line"].as_u64(),
            ),
            (Some(function), Some(src.as_path()), w[2].parse().ok()),
            "{}: {frame}",
            w[0]
        );
        seen.push(w[0].to_string());
    }
    assert_eq!(seen, ["static", "thread", "inlined", "pool"]);
}
