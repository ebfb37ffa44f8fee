//! The `cuguard` command. Everything lives in the library's `cli` module; exit codes are listed
//! in `cuguard::cli::exit`.

// Reading reports allocates many small strings from two threads: mimalloc is faster at that
// than glibc's malloc, and gives memory back between reports instead of fragmenting.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cuguard::cli::main()
}
