//! The metrics server in this process, over real sockets: the routes and statuses, and each
//! bound (the head's size and time, the set of connections, a listener that fails).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::*;

fn request(addr: SocketAddr, head: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("{head}\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Sends `bytes` on a new connection and reads the answer to its end.
fn send(addr: SocketAddr, bytes: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(bytes.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A server on a free loopback port, serving `m N` for the Nth scrape in a thread of its own.
fn start(limits: Limits) -> SocketAddr {
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.addr();
    let mut scrapes = 0;
    std::thread::spawn(move || {
        server.serve_with(limits, move || {
            scrapes += 1;
            Ok(format!("m {scrapes}\n"))
        })
    });
    addr
}

/// Whether the server has closed `s`: its end read (or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
    }
}

#[test]
fn metrics_and_nothing_else() {
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.addr();
    assert_ne!(addr.port(), 0);
    let mut scrapes = 0;
    std::thread::spawn(move || {
        server.serve(move || {
            scrapes += 1;
            if scrapes == 3 {
                Err("reading the page directory /x: denied".into())
            } else {
                Ok(format!("m {scrapes}\n"))
            }
        })
    });
    let ok = request(addr, "GET /metrics HTTP/1.1");
    assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
    assert!(
        ok.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
        "{ok}"
    );
    assert!(ok.ends_with("\r\n\r\nm 1\n"), "{ok}");
    let query = request(addr, "GET /metrics?x=1 HTTP/1.1");
    assert!(query.ends_with("\r\n\r\nm 2\n"), "{query}");
    let failed = request(addr, "GET /metrics HTTP/1.1");
    assert!(failed.starts_with("HTTP/1.1 500 "), "{failed}");
    assert!(failed.ends_with("denied\n"), "{failed}");
    for path in ["/", "/metrics/", "/favicon.ico", "/metricsx"] {
        let got = request(addr, &format!("GET {path} HTTP/1.1"));
        assert!(got.starts_with("HTTP/1.1 404 "), "{path}: {got}");
    }
    let post = request(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0");
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    assert!(post.contains("Allow: GET, HEAD\r\n"), "{post}");
}

#[test]
fn answers_exactly() {
    let addr = start(Limits::default());
    assert_eq!(
        request(addr, "GET /metrics HTTP/1.1"),
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: 4\r\nConnection: close\r\n\r\nm 1\n"
    );
    assert_eq!(
        request(addr, "HEAD /metrics HTTP/1.0"),
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: 4\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(
        request(addr, "PUT /metrics HTTP/1.1"),
        "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Allow: GET, HEAD\r\nContent-Length: 18\r\nConnection: close\r\n\r\nonly GET and HEAD\n"
    );
    assert_eq!(
        request(addr, "HEAD /nothing HTTP/1.1"),
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: 39\r\nConnection: close\r\n\r\n"
    );
    for line in ["GET /metrics", "GET  /metrics HTTP/1.1", "\u{0}"] {
        let got = request(addr, line);
        assert!(
            got.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{line:?}: {got}"
        );
    }
    let got = request(addr, "GET /metrics HTTP/2.0");
    assert!(
        got.starts_with("HTTP/1.1 505 HTTP Version Not Supported\r\n"),
        "{got}"
    );
    // Lines ended by a newline alone, and a head that came a byte at a time.
    let got = request(addr, "GET /metrics HTTP/1.1\n\n");
    assert!(got.ends_with("\r\n\r\nm 3\n"), "{got}");
    let mut s = TcpStream::connect(addr).unwrap();
    for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    assert!(got.ends_with("\r\n\r\nm 4\n"), "{got}");
}

#[test]
fn head_end() {
    assert_eq!(
        super::head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"),
        Some(24)
    );
    assert_eq!(super::head_end(b"GET / HTTP/1.1\n\n"), Some(16));
    assert_eq!(super::head_end(b"\n\r\n"), Some(3));
    assert_eq!(super::head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r"), None);
    assert_eq!(super::head_end(b""), None);
}

#[test]
fn a_head_over_the_limit_is_answered_431_and_closed() {
    let addr = start(Limits {
        head_bytes: 1024,
        ..Limits::default()
    });
    let got = send(
        addr,
        &format!("GET /metrics HTTP/1.1\r\nX: {}", "a".repeat(2000)),
    );
    assert_eq!(
        got,
        "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: 36\r\nConnection: close\r\n\r\nthe request head is over 1024 bytes\n"
    );
    // A head of exactly the limit is whole; one byte more is not.
    let head = |len: usize| {
        let start = "GET /metrics HTTP/1.1\r\nX: ";
        format!("{start}{}\r\n\r\n", "a".repeat(len - start.len() - 4))
    };
    let got = send(addr, &head(1024));
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    let got = send(addr, &head(1025));
    assert!(
        got.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{got}"
    );
}

#[test]
fn a_silent_connection_is_closed_after_the_head_timeout() {
    let addr = start(Limits {
        head_timeout: Duration::from_millis(300),
        ..Limits::default()
    });
    let started = Instant::now();
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut begun = TcpStream::connect(addr).unwrap();
    begun.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(5)));
    assert!(closed_within(&mut begun, Duration::from_secs(5)));
    let took = started.elapsed();
    assert!(
        (Duration::from_millis(300)..Duration::from_secs(2)).contains(&took),
        "{took:?}"
    );
    assert!(request(addr, "GET /metrics HTTP/1.1").ends_with("\r\n\r\nm 1\n"));
}

#[test]
fn a_full_set_drops_its_oldest_idle_connection() {
    let addr = start(Limits {
        connections: 3,
        ..Limits::default()
    });
    let mut idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // Each one more takes the place of the oldest idle one: the three oldest go, the three
    // newest stay. (A scrape here would not tell: one whose request is there when it is
    // accepted is answered at once, without taking a place.)
    for _ in 0..3 {
        idle.push(TcpStream::connect(addr).unwrap());
    }
    for (i, s) in idle.iter_mut().enumerate() {
        let wait = Duration::from_millis(if i < 3 { 2000 } else { 300 });
        assert_eq!(closed_within(s, wait), i < 3, "connection {i}");
    }
    let got = request(addr, "GET /metrics HTTP/1.1");
    assert!(got.ends_with("\r\n\r\nm 1\n"), "{got}");
}

#[test]
fn a_client_that_reads_nothing_is_closed_after_the_write_timeout() {
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.addr();
    let big = "m 1\n".repeat(16 << 20);
    std::thread::spawn(move || {
        server.serve_with(
            Limits {
                write_timeout: Duration::from_millis(300),
                ..Limits::default()
            },
            move || Ok(big.clone()),
        )
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    // 64 MiB it does not read: the server gives up on writing, and closes.
    std::thread::sleep(Duration::from_millis(800));
    let mut got = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let ended = loop {
        let mut buf = [0u8; 65536];
        match s.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break Err(e),
        }
    };
    assert!(
        ended.is_ok() || ended.as_ref().unwrap_err().kind() == io::ErrorKind::ConnectionReset,
        "{ended:?}"
    );
    assert!(got.len() < 64 << 20, "{}", got.len());
}

#[test]
fn a_listener_that_stops_listening_ends_serve() {
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.addr();
    let listener = server.listener.try_clone().unwrap();
    let serving = std::thread::spawn(move || server.serve(|| Ok(String::new())));
    assert!(request(addr, "GET /metrics HTTP/1.1").starts_with("HTTP/1.1 200 "));
    // SAFETY: shutdown on a descriptor this test holds (a duplicate of the listener).
    let shut = unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RD) };
    assert_eq!(shut, 0);
    let stopped = serving.join().unwrap();
    assert_eq!(stopped.source.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(
        stopped.to_string(),
        format!(
            "stopped serving http://{addr}/metrics: accepting a connection: Invalid argument (os error 22)"
        )
    );
}

#[test]
fn a_port_in_use_is_said_plainly() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = MetricsServer::bind(addr).err().expect("the port is taken");
    assert_eq!(err.source.kind(), io::ErrorKind::AddrInUse);
    assert_eq!(
        err.to_string(),
        format!(
            "cannot listen on {addr}: the address is in use (another exporter?); choose another with --listen HOST:PORT"
        )
    );
}

/// Whether the server has closed `s` by now (its end read, or reset), without waiting.
fn closed_now(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut s: &TcpStream = s;
    match s.read(&mut [0; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
    }
}

#[test]
fn a_scrape_behind_five_hundred_waiting_connections_is_answered() {
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if somaxconn < 1024 {
        eprintln!("skipped: net.core.somaxconn is {somaxconn}, under the 501 connections queued");
        return;
    }
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.addr();
    // Before it serves, the accept queue alone holds them: with std's backlog of 128, the
    // 130th connection's SYN was dropped and it waited a second.
    let waiting: Vec<TcpStream> = (0..500)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_millis(500))
                .unwrap_or_else(|e| panic!("connection {i}: {e}"))
        })
        .collect();
    let mut scrape = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).unwrap();
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::spawn(move || server.serve(|| Ok("m 1\n".to_string())));
    scrape
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut got = String::new();
    scrape.read_to_string(&mut got).unwrap();
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.ends_with("\r\n\r\nm 1\n"), "{got}");
    // All were accepted at once, each taking the place of the oldest: the 437 oldest are closed
    // (the last of them for the scrape), the 63 newest are open, each within its head timeout.
    let closed: Vec<bool> = waiting.iter().map(closed_now).collect();
    assert_eq!(closed.iter().position(|&c| !c), Some(437), "{closed:?}");
    assert!(closed[437..].iter().all(|&c| !c), "{closed:?}");
}
