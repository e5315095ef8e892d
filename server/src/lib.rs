//! # baton-server
//!
//! [`serve`]: one authority in front of any [`baton_core::Store`], for
//! many hosts and languages at once. It adds no rule: every answer is
//! core's decision on the store behind it, and concurrent requests from
//! every client share that store's group commits. Its client, the
//! `http://` store, is the `baton-store-http` crate, which does not link
//! this one.
//!
//! Two sets of endpoints share one server: the store protocol
//! (`/v1/store/...`, JSON of core's own types, what the `http://` store
//! speaks, [`baton_store_http::wire`])
//! and the task API (`/v1/tasks/...`, the JSON the CLI prints), for
//! clients in any language. See README.md, "Server".

mod api;
mod app;
pub mod auth;
mod bodies;
mod caller;
mod conns;
mod counted;
mod deliver;
mod delivery_status;
pub mod metrics;
mod openapi;
mod origin;
mod page;
mod protocol;
mod server;
mod spans;

pub use auth::Tokens;
pub use deliver::{Deliver, POST_TIMEOUT};
pub use server::{Listen, READ_TIMEOUT, ServeOptions, Served, serve, spawn};
