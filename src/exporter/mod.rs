//! `cuguard exporter`'s parts: the pages as Prometheus metrics ([`exposition`], whose doc lists
//! the metrics and labels) and the HTTP server that serves them ([`server`]). The command itself
//! (arguments, the textfile loop) is `cli::exporter`.

pub mod exposition;
pub mod server;
