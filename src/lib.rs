//! toolsrv: discover tools from `.meta` sidecars, serve them over 9P2000 and
//! run each call as a confined child process.
//!
//! Data flows one way: socket → [`ninep`] → [`server`] (namespace) →
//! [`proc`] (process table) → [`exec`] (one call) → [`sandbox`] → child.

pub mod bypass;
pub mod cli;
pub mod client;
pub mod dirs;
pub mod exec;
pub mod meta;
pub mod ninep;
pub mod notify;
pub mod proc;
pub mod protocol;
pub mod registry;
pub mod remote;
pub mod sandbox;
pub mod search;
pub mod server;
