//! # baton-server
//!
//! baton over HTTP, in both directions:
//!
//! * [`serve`]: one authority in front of any [`baton_core::Store`], for
//!   many hosts and languages at once. It adds no rule: every answer is
//!   core's decision on the store behind it, and concurrent requests from
//!   every client share that store's group commits.
//! * [`HttpStore`]: the `http://` and `http+unix://` store, a
//!   [`baton_core::Store`] that asks a server, so every CLI command, the
//!   library and the benchmarks run against a server unchanged.
//!
//! Two sets of endpoints share one server: the store protocol
//! (`/v1/store/...`, JSON of core's own types, what [`HttpStore`] speaks)
//! and the task API (`/v1/tasks/...`, the JSON the CLI prints), for
//! clients in any language. See README.md, "Server".

mod api;
mod app;
pub mod auth;
mod client;
mod conns;
pub mod metrics;
mod page;
mod protocol;
mod server;
pub mod tls;
pub mod wire;

pub use auth::Tokens;
pub use client::{HttpOptions, HttpStore, is_http_url};
pub use server::{Listen, READ_TIMEOUT, ServeOptions, Served, serve, spawn};
