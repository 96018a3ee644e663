//! Wire types shared by the server, the executor and the clients: the
//! `ToolResult` a call returns and the `key=value` request payload codec.

mod payload;
mod result;

pub use payload::{
    DISPATCH_KEYS, Payload, PayloadError, RESERVED_KEYS, coerce_fields, encode_payload,
    parse_payload, parse_timeout,
};
pub use result::{Content, ToolResult};
