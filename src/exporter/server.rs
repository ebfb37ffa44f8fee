//! The HTTP side of `cuguard exporter`: `/metrics`, every other path 404, served so that no client
//! can take it down.
//!
//! One thread waits in `poll(2)` on the listener and on at most [`Limits::connections`] (64)
//! non-blocking connections. Each connection goes through three states, each with a deadline:
//! 1. reading the request head: at most 16 KiB ([`Limits::head_bytes`]; past it, answered 431),
//!    whole within 10 s of being accepted ([`Limits::head_timeout`]; past it, closed);
//! 2. writing the answer, within 10 s ([`Limits::write_timeout`]);
//! 3. lingering: its sending side shut, what the client still sends read and dropped (at most
//!    1 MiB, for at most 2 s), so that closing does not become a reset that loses the answer.
//!
//! Every answer says `Connection: close`, and the connection is closed after it; Prometheus opens
//! a new one for its next scrape. What a client cannot do:
//! - Keep a scrape out with idle connections. When the set is full, a new connection takes the
//!   place of the oldest one that has been answered (lingering), else the oldest that has not
//!   sent a whole request head, else the oldest of all. A scrape behind hundreds of idle sockets
//!   is answered at once.
//! - Exhaust its file descriptors. The set is bounded, and 8 descriptors (duplicates of the
//!   listener) are held in reserve. If `accept` fails with EMFILE or ENFILE anyway (it takes a
//!   descriptor before it looks for a connection), one of the reserve is given up and the accept
//!   tried again. A connection that was waiting takes the place of the oldest as above. With no
//!   other connection, it is closed at once: never left waiting, and the listener never spins on
//!   a connection it cannot take. The whole reserve is also given up while the metrics are read,
//!   so a scrape can always open the pages.
//! - Grow its memory. A request head is at most 16 KiB, and a connection's buffers go with it:
//!   at most 64 × (16 KiB + one answer).
//! - Keep a scrape out with a flood of connections, up to the backlog. What comes while the
//!   exporter is off the CPU waits in the kernel's accept queue, and a connection that finds it
//!   full has its SYN dropped: its client tries again a second later, then 3 s later, past most
//!   scrapes' timeouts. The backlog is 4096 ([`BACKLOG`]; std's `listen` asks for 128; the
//!   kernel caps it at `net.core.somaxconn`). Each wake-up accepts all that waits, and reads
//!   each connection as it is accepted: a request already there is answered at once, a
//!   connection its client already closed is closed without taking a place, and one about to be
//!   closed to make room is read once more first. A flood that keeps more than the backlog
//!   waiting while the exporter is off the CPU still has SYNs dropped, a scrape's among them.
//!
//! Only a failure of the listener itself (not of a client) ends [`MetricsServer::serve`], which
//! returns it.
//!
//! Why no crate: tiny_http (used before) gave each connection a thread and two descriptors, had
//! no idle timeout and read a header line without bound. About 575 idle sockets ran it out of
//! descriptors, and its accept loop ended, so the exporter exited 0. One 400 MiB header took it
//! to 494 MB. rouille is built on it. hyper (alone or under axum) has the limits and timeouts,
//! but needs tokio, a runtime for one endpoint. One endpoint with a bound on everything is a few
//! hundred lines over `poll(2)`, with no dependency beyond libc.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::exposition::CONTENT_TYPE;

/// The path metrics are served at.
pub const METRICS_PATH: &str = "/metrics";

/// What one client may take of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once (the listener not counted); past it, one is closed to take the
    /// new one (see the module doc).
    pub connections: usize,
    /// The most bytes of a request head (request line and headers, up to and with the blank line
    /// that ends them); past it, answered 431.
    pub head_bytes: usize,
    /// From accepting a connection to its whole request head; past it, closed.
    pub head_timeout: Duration,
    /// For writing an answer; past it, closed.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 64,
            head_bytes: 16 * 1024,
            head_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// After an answer: how long, and how many bytes, what the client still sends is read and dropped.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;
/// Descriptors held in reserve: given up while the metrics are read, and one at a time to
/// accept and close a connection when there is no other descriptor.
const RESERVE: usize = 8;
/// The listener's backlog: connections the kernel completes and holds for `accept`. The kernel
/// caps it at `net.core.somaxconn` (4096 by default since Linux 5.4).
const BACKLOG: libc::c_int = 4096;
/// Connections accepted per wake-up at most: the whole backlog, so that each wake-up leaves the
/// queue empty, yet bounded, so that a flood cannot starve the connections open.
const ACCEPTS_PER_WAKE: usize = BACKLOG as usize;
/// How long accepting pauses when the system has no memory or descriptor to give, and none can
/// be freed here.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// A bound, not yet serving, metrics server.
pub struct MetricsServer {
    listener: TcpListener,
    addr: SocketAddr,
}

/// The address could not be listened on.
#[derive(Debug)]
pub struct BindError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// The operating system's error.
    pub source: io::Error,
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.source.kind() == io::ErrorKind::AddrInUse {
            write!(
                f,
                "cannot listen on {}: the address is in use (another exporter?); choose another with --listen HOST:PORT",
                self.addr
            )
        } else {
            write!(f, "cannot listen on {}: {}", self.addr, self.source)
        }
    }
}

impl std::error::Error for BindError {}

/// Why [`MetricsServer::serve`] stopped: the listener failed (never a client).
#[derive(Debug)]
pub struct ServeError {
    /// The address it served on.
    pub addr: SocketAddr,
    /// What it was doing: "accepting a connection", "waiting for connections".
    pub doing: &'static str,
    /// The operating system's error.
    pub source: io::Error,
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "stopped serving http://{}{METRICS_PATH}: {}: {}",
            self.addr, self.doing, self.source
        )
    }
}

impl std::error::Error for ServeError {}

impl MetricsServer {
    /// Listens on `addr` (port 0: a free port, see [`MetricsServer::addr`]).
    pub fn bind(addr: SocketAddr) -> Result<MetricsServer, BindError> {
        let err = |source| BindError { addr, source };
        let listener = TcpListener::bind(addr).map_err(err)?;
        let bound = listener.local_addr().map_err(err)?;
        listener.set_nonblocking(true).map_err(err)?;
        // std listens with a backlog of 128. Listening again on a listening socket sets its
        // backlog (Linux's inet_listen), here to the longer one.
        // SAFETY: listen on a descriptor the listener owns, which outlives the call.
        if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } != 0 {
            return Err(err(io::Error::last_os_error()));
        }
        Ok(MetricsServer {
            listener,
            addr: bound,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers requests, within the default [`Limits`], until the listener fails: `GET` or
    /// `HEAD` of `/metrics` (any query string) with what `metrics` returns (`Ok`: the text, 200;
    /// `Err`: a message, 500); any other method there with 405; any other path with 404; a
    /// request line that is not HTTP/1 with 400 (505 for another version).
    pub fn serve(self, metrics: impl FnMut() -> Result<String, String>) -> ServeError {
        self.serve_with(Limits::default(), metrics)
    }

    /// [`MetricsServer::serve`] within `limits`.
    pub fn serve_with(
        self,
        limits: Limits,
        mut metrics: impl FnMut() -> Result<String, String>,
    ) -> ServeError {
        let fail = |doing, source| ServeError {
            addr: self.addr,
            doing,
            source,
        };
        let listener = &self.listener;
        let mut reserve = Reserve {
            listener,
            fds: Vec::with_capacity(RESERVE),
        };
        reserve.refill();
        let mut conns: Vec<Conn> = Vec::with_capacity(limits.connections);
        let mut paused_until: Option<Instant> = None;
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(limits.connections + 1);
        loop {
            let now = Instant::now();
            // Past its deadline, a connection is closed.
            conns.retain(|c| c.deadline() > now);
            if paused_until.is_some_and(|t| t <= now) {
                paused_until = None;
            }
            fds.clear();
            // A paused listener is left out (poll skips a negative descriptor), not even hang-ups
            // and errors reported.
            fds.push(libc::pollfd {
                fd: if paused_until.is_some() {
                    -1
                } else {
                    listener.as_raw_fd()
                },
                events: libc::POLLIN,
                revents: 0,
            });
            fds.extend(conns.iter().map(|c| libc::pollfd {
                fd: c.stream.as_raw_fd(),
                events: c.interest(),
                revents: 0,
            }));
            let wake = conns.iter().map(Conn::deadline).chain(paused_until).min();
            // SAFETY: `fds` is an initialized array of `fds.len()` pollfd structures, which
            // outlives the call; poll writes only their `revents`.
            let n = unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    wake.map_or(-1, |t| millis_until(t, now)),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => {}
                    Some(libc::EAGAIN | libc::ENOMEM) => std::thread::sleep(ACCEPT_PAUSE),
                    _ => return fail("waiting for connections", e),
                }
                continue;
            }
            let now = Instant::now();
            // fds[i + 1] is conns[i]; both are in the order the connections were accepted.
            let mut ready = fds[1..].iter().map(|p| p.revents);
            conns.retain_mut(|c| {
                ready.next().unwrap_or(0) == 0
                    || c.advance(now, &limits, &mut reserve, &mut metrics)
            });
            let listening = fds[0].revents;
            if listening & libc::POLLNVAL != 0 {
                return fail(
                    "waiting for connections",
                    io::Error::from_raw_os_error(libc::EBADF),
                );
            }
            if listening != 0 {
                let accepted = accept(
                    listener,
                    &mut conns,
                    &mut reserve,
                    &limits,
                    now,
                    &mut metrics,
                );
                match accepted {
                    Ok(Accepted::All) => {}
                    Ok(Accepted::Pause) => paused_until = Some(now + ACCEPT_PAUSE),
                    // Hung up or in error, yet nothing to accept and no error from accept:
                    // paused, rather than woken again at once.
                    Ok(Accepted::Nothing) if listening & libc::POLLIN == 0 => {
                        paused_until = Some(now + ACCEPT_PAUSE)
                    }
                    Ok(Accepted::Nothing) => {}
                    Err(e) => return fail("accepting a connection", e),
                }
            }
        }
    }
}

/// What one round of [`accept`] did.
enum Accepted {
    /// It took what was waiting (or [`ACCEPTS_PER_WAKE`] of it).
    All,
    /// Nothing was waiting.
    Nothing,
    /// The system has nothing to give now; accepting should pause.
    Pause,
}

/// Accepts the connections waiting on `listener`, closing others to make room (see the module
/// doc). Errs only when the listener itself fails.
///
/// What a connection sent before it was accepted is read at once: a request already there is
/// answered then, and a connection its client already closed is closed without taking a place.
/// Under a flood of connections, a scrape is answered in the same round as it is accepted, not
/// closed by the flood's next ones before it is read.
fn accept(
    listener: &TcpListener,
    conns: &mut Vec<Conn>,
    reserve: &mut Reserve,
    limits: &Limits,
    now: Instant,
    metrics: &mut impl FnMut() -> Result<String, String>,
) -> io::Result<Accepted> {
    let mut took = 0;
    while took < ACCEPTS_PER_WAKE {
        let e = match accept_nonblocking(listener) {
            Ok(stream) => {
                took += 1;
                let mut conn = Conn::new(stream, now + limits.head_timeout);
                if conn.advance(now, limits, reserve, metrics) {
                    if conns.len() >= limits.connections.max(1) {
                        make_room(conns, now, limits, reserve, metrics);
                    }
                    conns.push(conn);
                }
                continue;
            }
            Err(e) => e,
        };
        match e.raw_os_error() {
            _ if e.kind() == io::ErrorKind::WouldBlock => {
                return Ok(if took == 0 {
                    Accepted::Nothing
                } else {
                    Accepted::All
                });
            }
            Some(code) if gone_before_accepted(code) => took += 1,
            // accept(2) takes a descriptor before it looks for a connection: whether one waits
            // is known only with a descriptor to spare, one of the reserve.
            Some(libc::EMFILE | libc::ENFILE) => {
                if !reserve.give_one() {
                    // The reserve is spent (the limit was lowered under it): idle connections
                    // give way to it, as the pages are read with it.
                    if make_room(conns, now, limits, reserve, metrics) {
                        reserve.refill();
                        continue;
                    }
                    return Ok(Accepted::Pause);
                }
                let taken = accept_nonblocking(listener);
                match taken {
                    Ok(stream) => {
                        took += 1;
                        // It takes the place of the oldest idle connection; with none, it is
                        // closed at once rather than left waiting (and the listener readable
                        // for ever).
                        let mut conn = Conn::new(stream, now + limits.head_timeout);
                        if conn.advance(now, limits, reserve, metrics)
                            && make_room(conns, now, limits, reserve, metrics)
                        {
                            conns.push(conn);
                        } else {
                            // Closed before the reserve is taken back up, which needs its
                            // descriptor.
                            drop(conn);
                        }
                        reserve.refill();
                    }
                    Err(e) => {
                        reserve.refill();
                        match e.raw_os_error() {
                            _ if e.kind() == io::ErrorKind::WouldBlock => {
                                return Ok(if took == 0 {
                                    Accepted::Nothing
                                } else {
                                    Accepted::All
                                });
                            }
                            // Another process took the descriptor (ENFILE), or the system has
                            // no memory for the connection.
                            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                                return Ok(Accepted::Pause);
                            }
                            Some(code) if gone_before_accepted(code) => took += 1,
                            _ => return Err(e),
                        }
                    }
                }
            }
            Some(libc::ENOBUFS | libc::ENOMEM) => return Ok(Accepted::Pause),
            _ => return Err(e),
        }
    }
    Ok(Accepted::All)
}

/// One connection from `listener`, non-blocking from the start (one system call, not three).
fn accept_nonblocking(listener: &TcpListener) -> io::Result<TcpStream> {
    // SAFETY: accept4 on a descriptor the listener owns, which outlives the call; null address
    // pointers ask for no peer address.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a connected socket that accept4 just opened, owned by nothing else.
    Ok(unsafe { TcpStream::from_raw_fd(fd) })
}

/// Whether `accept` failing with `code` is about that one connection, not the listener: it went
/// (or a firewall refused it) before it was accepted, or it brought a network error (Linux passes
/// those on; accept(2) says to retry as for EAGAIN), or a signal came.
fn gone_before_accepted(code: i32) -> bool {
    matches!(
        code,
        libc::EINTR
            | libc::ECONNABORTED
            | libc::EPERM
            | libc::EPROTO
            | libc::ENETDOWN
            | libc::ENOPROTOOPT
            | libc::EHOSTDOWN
            | libc::ENONET
            | libc::EHOSTUNREACH
            | libc::EOPNOTSUPP
            | libc::ENETUNREACH
            | libc::ETIMEDOUT
    )
}

/// Closes one connection for a new one: the oldest answered (lingering), else the oldest without
/// a whole request head, else the oldest. One without a whole head is read once more first: if
/// its request has come since, it is answered, and another makes room unless its whole answer
/// went out at once. False when there is none.
fn make_room(
    conns: &mut Vec<Conn>,
    now: Instant,
    limits: &Limits,
    reserve: &mut Reserve,
    metrics: &mut impl FnMut() -> Result<String, String>,
) -> bool {
    let rank = |c: &Conn| match c.state {
        State::Linger { .. } => 0,
        State::Head { .. } => 1,
        State::Write { .. } => 2,
    };
    loop {
        // `conns` is in the order of accepting: the first of the lowest rank is the oldest.
        let Some(i) = (0..conns.len()).min_by_key(|&i| (rank(&conns[i]), i)) else {
            return false;
        };
        let c = &mut conns[i];
        // Each round turns one connection from a head into an answer being written, so this
        // ends.
        if matches!(c.state, State::Head { .. })
            && c.advance(now, limits, reserve, metrics)
            && matches!(c.state, State::Write { .. })
        {
            continue;
        }
        conns.remove(i);
        return true;
    }
}

/// Descriptors held in reserve: duplicates of the listener, which cost nothing else.
struct Reserve<'a> {
    listener: &'a TcpListener,
    fds: Vec<OwnedFd>,
}

impl Reserve<'_> {
    /// Takes the reserve back up to [`RESERVE`], as far as descriptors are left.
    fn refill(&mut self) {
        while self.fds.len() < RESERVE {
            match self.listener.as_fd().try_clone_to_owned() {
                Ok(fd) => self.fds.push(fd),
                Err(_) => break,
            }
        }
    }

    /// Gives one descriptor up; false if none is left.
    fn give_one(&mut self) -> bool {
        self.fds.pop().is_some()
    }

    /// Runs `f` with the whole reserve given up, then takes it back.
    fn without<T>(&mut self, f: impl FnOnce() -> T) -> T {
        self.fds.clear();
        let got = f();
        self.refill();
        got
    }
}

/// One client connection.
struct Conn {
    stream: TcpStream,
    state: State,
}

enum State {
    /// Reading the request head: what came so far.
    Head { buf: Vec<u8>, deadline: Instant },
    /// Writing the answer, `out[at..]` still to write.
    Write {
        out: Vec<u8>,
        at: usize,
        deadline: Instant,
    },
    /// Answered, the sending side shut: reading and dropping what the client still sends, at
    /// most `left` more bytes, until it closes.
    Linger { left: usize, deadline: Instant },
}

impl Conn {
    fn new(stream: TcpStream, deadline: Instant) -> Conn {
        Conn {
            stream,
            state: State::Head {
                buf: Vec::new(),
                deadline,
            },
        }
    }

    fn deadline(&self) -> Instant {
        match self.state {
            State::Head { deadline, .. }
            | State::Write { deadline, .. }
            | State::Linger { deadline, .. } => deadline,
        }
    }

    /// The poll events it waits for.
    fn interest(&self) -> libc::c_short {
        match self.state {
            State::Head { .. } | State::Linger { .. } => libc::POLLIN,
            State::Write { .. } => libc::POLLOUT,
        }
    }

    /// Goes on as far as the socket lets it without waiting; false when it is to be closed.
    fn advance(
        &mut self,
        now: Instant,
        limits: &Limits,
        reserve: &mut Reserve,
        metrics: &mut impl FnMut() -> Result<String, String>,
    ) -> bool {
        loop {
            match &mut self.state {
                State::Head { buf, .. } => {
                    let out = match read_head(&mut self.stream, buf, limits.head_bytes) {
                        Head::More => return true,
                        Head::Closed => return false,
                        Head::Whole(len) => answer(&buf[..len], reserve, metrics),
                        Head::TooLarge => response(
                            431,
                            &[],
                            &format!("the request head is over {} bytes\n", limits.head_bytes),
                            false,
                        ),
                    };
                    self.state = State::Write {
                        out,
                        at: 0,
                        deadline: now + limits.write_timeout,
                    };
                }
                State::Write { out, at, .. } => {
                    while *at < out.len() {
                        match self.stream.write(&out[*at..]) {
                            Ok(0) => return false,
                            Ok(n) => *at += n,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => return false,
                        }
                    }
                    if self.stream.shutdown(Shutdown::Write).is_err() {
                        return false;
                    }
                    self.state = State::Linger {
                        left: LINGER_BYTES,
                        deadline: now + LINGER_TIME,
                    };
                }
                State::Linger { left, .. } => {
                    let mut sink = [0u8; 8192];
                    loop {
                        let want = (*left).min(sink.len());
                        match self.stream.read(&mut sink[..want]) {
                            Ok(0) => return false,
                            Ok(n) => {
                                *left -= n;
                                if *left == 0 {
                                    return false;
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => return false,
                        }
                    }
                }
            }
        }
    }
}

/// What reading a request head came to.
enum Head {
    /// Not whole yet: wait for more.
    More,
    /// Whole: its first `.0` bytes, up to and with the blank line.
    Whole(usize),
    /// Over the limit, and not whole.
    TooLarge,
    /// The client closed, or the connection failed.
    Closed,
}

/// Reads what `stream` has into `buf`, never past `max` bytes in all.
fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>, max: usize) -> Head {
    let mut chunk = [0u8; 4096];
    loop {
        let want = max.saturating_sub(buf.len()).min(chunk.len());
        if want == 0 {
            return Head::TooLarge;
        }
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return Head::Closed,
            Ok(n) => {
                // The blank line may have begun in what came before.
                let from = buf.len().saturating_sub(2);
                buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = head_end(&buf[from..]) {
                    return Head::Whole(from + end);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Head::More,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Head::Closed,
        }
    }
}

/// Where the head in `bytes` ends: just after the first empty line (`\r\n` or `\n` alone).
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes.iter().enumerate().find_map(|(i, &b)| {
        if b != b'\n' {
            return None;
        }
        match bytes.get(i + 1..) {
            Some([b'\n', ..]) => Some(i + 2),
            Some([b'\r', b'\n', ..]) => Some(i + 3),
            _ => None,
        }
    })
}

/// The answer to a whole request head.
fn answer(
    head: &[u8],
    reserve: &mut Reserve,
    metrics: &mut impl FnMut() -> Result<String, String>,
) -> Vec<u8> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = std::str::from_utf8(line).unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return response(
            400,
            &[],
            "expected a request line: METHOD TARGET HTTP/1.1\n",
            false,
        );
    };
    let head_only = method == "HEAD";
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") {
        return if version.starts_with("HTTP/") {
            response(505, &[], "only HTTP/1.0 and HTTP/1.1\n", head_only)
        } else {
            response(
                400,
                &[],
                "expected a request line: METHOD TARGET HTTP/1.1\n",
                head_only,
            )
        };
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != METRICS_PATH {
        return response(
            404,
            &[],
            &format!("not found; the metrics are at {METRICS_PATH}\n"),
            head_only,
        );
    }
    if !matches!(method, "GET" | "HEAD") {
        return response(
            405,
            &[("Allow", "GET, HEAD")],
            "only GET and HEAD\n",
            head_only,
        );
    }
    match reserve.without(metrics) {
        Ok(body) => response(200, &[("Content-Type", CONTENT_TYPE)], &body, head_only),
        Err(message) => response(500, &[], &(message + "\n"), head_only),
    }
}

/// A whole answer: the status line, `headers` (a plain-text `Content-Type` unless they give
/// one), `Content-Length`, `Connection: close`, and `body` unless `head_only`.
fn response(status: u16, headers: &[(&str, &str)], body: &str, head_only: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        505 => "HTTP Version Not Supported",
        _ => "",
    };
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n");
    if !headers.iter().any(|(name, _)| *name == "Content-Type") {
        out.push_str("Content-Type: text/plain; charset=utf-8\r\n");
    }
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    if !head_only {
        out.push_str(body);
    }
    out.into_bytes()
}

/// Milliseconds from `now` to `t`, rounded up (so that a wake-up is never before `t`), as poll
/// takes them.
fn millis_until(t: Instant, now: Instant) -> libc::c_int {
    let nanos = t.saturating_duration_since(now).as_nanos();
    libc::c_int::try_from(nanos.div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX)
}

#[cfg(test)]
mod tests;
