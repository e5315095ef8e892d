//! # baton-store-http
//!
//! The `http://` and `http+unix://` store: [`HttpStore`] is a
//! [`baton_core::Store`] that asks a `baton serve` (the `baton-server`
//! crate), so every CLI command, the library and the benchmarks run
//! against a server unchanged. A client links this crate, never the
//! server.
//!
//! [`wire`] is the store protocol both ends speak (`/v1/store/...`, JSON
//! of core's own types), and [`tls`] the TLS setup both ends use.

mod client;
pub mod tls;
pub mod wire;

pub use client::{HttpOptions, HttpStore, is_http_url};
