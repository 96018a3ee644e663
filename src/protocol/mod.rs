//! Wire types shared by the server, the executor and the clients: the
//! `ToolResult` a call returns and the `key=value` request payload codec.

pub mod dispatch;
mod result;

pub use dispatch::{
    Dispatch, DispatchError, DurationError, parse_duration, parse_timeout, take_dispatch,
};
pub use result::{Content, ToolResult};
