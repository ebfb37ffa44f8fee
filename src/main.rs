//! The `cuguard` command. Everything lives in the library's `cli` module; exit codes are listed
//! in `cuguard::cli::exit`.

fn main() -> std::process::ExitCode {
    cuguard::cli::main()
}
