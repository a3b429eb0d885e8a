//! The HTTP plumbing under every resource: the listener and its connection limits,
//! authentication, microversions and their route gates, Ironic's error shape, and the
//! middleware every request passes through.
//!
//! | module | what it holds |
//! |---|---|
//! | [`listener`] | the TCP listener on hyper: connection limits, graceful shutdown |
//! | [`connections`] | the open connections, which are idle, and which to close for a new client |
//! | [`base`] | the base of a request's links: its `Host`, unless `public_url` is configured |
//! | [`auth`] | HTTP basic auth against a bcrypt htpasswd file, with a bounded checker |
//! | [`version`] | the microversion a request asked for, and the headers of every answer |
//! | [`gate`] | routes that exist only from a microversion on |
//! | [`error`] | [`error::ApiError`] and Ironic's error body |
//! | [`streamed`] | answers written on a blocking thread and sent as they are written |
//! | [`plumbing`] | request ids, the request timeout, unrouted paths and methods, closing after a refused body |

pub mod auth;
pub mod base;
pub mod connections;
pub mod error;
pub mod gate;
pub mod listener;
pub mod plumbing;
pub mod streamed;
pub mod version;
