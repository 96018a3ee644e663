//! 9P2000: message codec, the server connection loop and a small client.
//! Knows nothing of tools; the namespace lives in `server`.

pub mod client;
pub mod fs;
pub mod server;
pub mod wire;

pub use server::serve_conn;
