//! Wire types shared by the server, the executor and the clients: the
//! `ToolResult` a call returns, the `key=value` request payload codec and
//! the dispatch fields taken out of a call's arguments.

pub mod dispatch;
mod payload;
mod result;
mod token;

pub use dispatch::{
    Dispatch, DispatchError, DurationError, parse_duration, parse_timeout, take_dispatch,
};
pub use payload::{
    DISPATCH_KEYS, Payload, PayloadError, RESERVED_KEYS, coerce_fields, encode_payload,
    parse_payload,
};
pub use result::{Content, ToolResult};
pub use token::random_token;
