//! The HTTP side of `cuguard exporter`: `/metrics` on a tiny_http server, every other path 404.
//!
//! Why tiny_http: a scrape is a few requests a minute, answered from small files in a few
//! milliseconds, so a small synchronous server is all it takes. tiny_http is widely used (rouille
//! and others are built on it), stable (0.12 since 2022), needs no async runtime, has four small
//! dependencies, and takes a listener the caller bound, so a port in use is told apart from other
//! failures. hyper (with axum or warp) would bring tokio; rouille adds routing that one endpoint
//! does not need.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};

use tiny_http::{Header, Method, Response, Server};

use super::exposition::CONTENT_TYPE;

/// The path metrics are served at.
pub const METRICS_PATH: &str = "/metrics";

/// A bound, not yet serving, metrics server.
pub struct MetricsServer {
    server: Server,
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

impl MetricsServer {
    /// Listens on `addr` (port 0: a free port, see [`MetricsServer::addr`]).
    pub fn bind(addr: SocketAddr) -> Result<MetricsServer, BindError> {
        let err = |source| BindError { addr, source };
        let listener = TcpListener::bind(addr).map_err(err)?;
        let bound = listener.local_addr().map_err(err)?;
        let server = Server::from_listener(listener, None).map_err(|e| err(io::Error::other(e)))?;
        Ok(MetricsServer {
            server,
            addr: bound,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers requests until the process ends: `GET` or `HEAD` of `/metrics` (any query
    /// string) with what `metrics` returns (`Ok`: the text, 200; `Err`: a message, 500); any
    /// other method there with 405; any other path with 404.
    pub fn serve(self, mut metrics: impl FnMut() -> Result<String, String>) {
        for request in self.server.incoming_requests() {
            let path = request.url().split('?').next().unwrap_or("");
            let response = if path != METRICS_PATH {
                text(
                    404,
                    format!("not found; the metrics are at {METRICS_PATH}\n"),
                )
            } else if !matches!(request.method(), Method::Get | Method::Head) {
                text(405, "only GET and HEAD\n".into()).with_header(header("Allow", "GET, HEAD"))
            } else {
                match metrics() {
                    Ok(body) => Response::from_string(body)
                        .with_header(header("Content-Type", CONTENT_TYPE)),
                    Err(message) => text(500, message + "\n"),
                }
            };
            // A client that went away is no concern of the next one.
            let _ = request.respond(response);
        }
    }
}

fn text(status: u16, body: String) -> Response<io::Cursor<Vec<u8>>> {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    fn request(addr: SocketAddr, head: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(format!("{head}\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
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
}
