//! The bypass broker: approval requests, the credential gate for `sudo`
//! and the tool-facing bypass socket.
