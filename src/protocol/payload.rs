//! The `key=value` request payload of `proc/new` and `proc/new.bg`: escaping,
//! parsing into reserved fields and arguments, and schema-guided argument typing.
//!
//! Format: one `key=value` per line (split at the first `=`), blank lines ignored.
//! Values escape `\` as `\\` and newline as `\n`; any other backslash sequence
//! (and a trailing lone backslash) is kept literally, as the Go server does.
//! Keys are not escaped: they must not contain `=` or a newline. Every key may
//! appear once; a repeated key is an error.

use serde_json::{Map, Value};

/// Keys with a meaning of their own; every other key is one tool argument.
pub const RESERVED_KEYS: [&str; 9] = [
    "token", "tool", "agent", "session", "cwd", "args", "bypass", "timeout", "sandbox",
];
/// Reserved keys that steer the call and travel in [`Payload::fields`].
pub const DISPATCH_KEYS: [&str; 3] = ["bypass", "timeout", "sandbox"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("payload line {line}: expected key=value")]
    MissingEquals { line: usize },
    #[error("payload line {line}: empty key before '='")]
    EmptyKey { line: usize },
    #[error("payload line {line}: key '{key}' appears more than once")]
    Duplicate { line: usize, key: String },
    #[error("payload 'args' must be a JSON object: {reason}")]
    BadArgs { reason: String },
    #[error("argument '{key}' should be JSON of type {ty}: {reason}")]
    BadArgument {
        key: String,
        ty: String,
        reason: String,
    },
}

/// A parsed request payload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Payload {
    pub token: Option<String>,
    pub tool: Option<String>,
    pub agent: Option<String>,
    pub session: Option<String>,
    pub cwd: Option<String>,
    /// The reserved `args` key: a whole JSON object of arguments.
    pub args: Option<Map<String, Value>>,
    /// Every other key, including the dispatch fields, in payload order.
    pub fields: Vec<(String, String)>,
}

impl Payload {
    /// A dispatch field (`bypass`, `timeout`, `sandbox`) if present.
    pub fn dispatch(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key && DISPATCH_KEYS.contains(&k.as_str()))
            .map(|(_, v)| v.as_str())
    }

    /// The call's arguments: `args`, then each argument field (typed by the
    /// schema, see [`coerce_fields`]) overriding the same key.
    pub fn arguments(
        &self,
        schema_type_of: impl Fn(&str) -> Option<String>,
    ) -> Result<Map<String, Value>, PayloadError> {
        let mut out = self.args.clone().unwrap_or_default();
        out.extend(coerce_fields(&self.fields, schema_type_of)?);
        Ok(out)
    }
}

fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Builds a payload: one `key=escaped value` line per field, in order.
pub fn encode_payload(fields: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (key, value) in fields {
        out.push_str(key);
        out.push('=');
        out.push_str(&escape(value));
        out.push('\n');
    }
    out
}

/// Parses a payload (see the module docs for the format).
pub fn parse_payload(text: &str) -> Result<Payload, PayloadError> {
    let mut p = Payload::default();
    let mut seen: Vec<String> = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let line_no = i + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        let (key, raw) = line
            .split_once('=')
            .ok_or(PayloadError::MissingEquals { line: line_no })?;
        if key.is_empty() {
            return Err(PayloadError::EmptyKey { line: line_no });
        }
        if seen.iter().any(|k| k == key) {
            return Err(PayloadError::Duplicate {
                line: line_no,
                key: key.to_owned(),
            });
        }
        seen.push(key.to_owned());
        let value = unescape(raw);
        match key {
            "token" => p.token = Some(value),
            "tool" => p.tool = Some(value),
            "agent" => p.agent = Some(value),
            "session" => p.session = Some(value),
            "cwd" => p.cwd = Some(value),
            "args" => match serde_json::from_str::<Value>(&value) {
                Ok(Value::Object(map)) => p.args = Some(map),
                Ok(_) => {
                    return Err(PayloadError::BadArgs {
                        reason: "not an object".to_owned(),
                    });
                }
                Err(e) => {
                    return Err(PayloadError::BadArgs {
                        reason: e.to_string(),
                    });
                }
            },
            _ => p.fields.push((key.to_owned(), value)),
        }
    }
    Ok(p)
}

/// Turns argument fields into JSON values. A property whose schema type is
/// integer, number, boolean, array or object is parsed as JSON (an error names
/// the key); any other property stays a string. Dispatch fields are skipped.
pub fn coerce_fields(
    fields: &[(String, String)],
    schema_type_of: impl Fn(&str) -> Option<String>,
) -> Result<Map<String, Value>, PayloadError> {
    let mut out = Map::new();
    for (key, value) in fields {
        if DISPATCH_KEYS.contains(&key.as_str()) {
            continue;
        }
        let ty = schema_type_of(key);
        let json = match ty.as_deref() {
            Some(t @ ("integer" | "number" | "boolean" | "array" | "object")) => {
                serde_json::from_str::<Value>(value.trim()).map_err(|e| {
                    PayloadError::BadArgument {
                        key: key.clone(),
                        ty: t.to_owned(),
                        reason: e.to_string(),
                    }
                })?
            }
            _ => Value::String(value.clone()),
        };
        out.insert(key.clone(), json);
    }
    Ok(out)
}
