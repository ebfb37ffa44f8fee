//! The shim's own threads, started with every signal blocked: a thread inherits its creator's
//! signal mask, so blocking everything around the spawn means it never runs the program's
//! signal handlers, not even before its first instruction.

/// Starts the thread `name` (a 256 KiB stack) running `f`, every signal blocked in it.
pub fn spawn_masked<F>(name: &str, f: F) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    // SAFETY: sigset_t values are plain data; pthread_sigmask only changes this thread's mask,
    // and the old mask is put back whatever the spawn did.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = std::thread::Builder::new()
            .name(name.into())
            .stack_size(256 << 10)
            .spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}
