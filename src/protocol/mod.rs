//! Wire types shared by the server, the executor and the clients: the
//! `ToolResult` a call returns and the `key=value` request payload codec.

mod result;

pub use result::{Content, ToolResult};
