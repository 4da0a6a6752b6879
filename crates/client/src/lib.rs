//! servebench's HTTP client: the server under test ([`Target`]), the shared client
//! ([`HttpClient`]), the HTTP/1.1 streaming client with kernel receive timestamps ([`h1`]) and one
//! streaming request from send to [`servebench_sse::RequestRecord`] ([`stream`]), with the
//! deadlines and 429 retries every request obeys ([`timeouts`]).
//!
//! The measurement runner (servebench-core) and a remote agent both send their requests through
//! this crate. It never prints, and its texts name no command-line flag: a bad target is a typed
//! [`TargetError`], a timeout names its limit with a typed [`timeouts::Limit`]; the CLI maps both
//! to its flags.

#![warn(missing_docs)]

pub mod error;
pub mod failure;
pub mod h1;
pub mod secrets;
pub mod stream;
pub mod target;
pub mod timeouts;

pub use error::HttpError;
pub use target::{Endpoint, HttpClient, Target, TargetError};
