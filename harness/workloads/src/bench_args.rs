//! The benchmark programs' command lines (`alloc_bench`, `capture_bench`, each including this
//! file): `--help` prints the usage and an example, and an option the program does not know
//! stops it with the usage, rather than running a benchmark of minutes.

/// The options of one program: those that take a value, those that do not, and its usage text.
pub struct Options {
    pub valued: &'static [&'static str],
    pub flags: &'static [&'static str],
    pub usage: &'static str,
}

impl Options {
    /// Checks `args` (the program's name first): returns normally when they are the program's;
    /// prints the usage and exits 0 for `--help` or `-h`, or exits 2 naming what is wrong.
    pub fn check(&self, args: &[String]) {
        let mut rest = args.iter().skip(1);
        while let Some(a) = rest.next() {
            let problem = if a == "--help" || a == "-h" {
                println!("{}", self.usage);
                std::process::exit(0);
            } else if self.valued.contains(&a.as_str()) {
                match rest.next() {
                    Some(_) => continue,
                    None => format!("{a} needs a value"),
                }
            } else if self.flags.contains(&a.as_str()) {
                continue;
            } else {
                format!("unknown option {a}")
            };
            eprintln!("{}: {problem}\n\n{}", args[0], self.usage);
            std::process::exit(2);
        }
    }
}
