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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn types(key: &str) -> Option<String> {
        match key {
            "count" => Some("integer".into()),
            "ratio" => Some("number".into()),
            "force" => Some("boolean".into()),
            "list" => Some("array".into()),
            "opts" => Some("object".into()),
            "name" => Some("string".into()),
            _ => None,
        }
    }

    #[test]
    fn reserved_keys_and_fields_are_split() {
        let text = "token=t0k\ntool=grep\nagent=a1\nsession=s9\ncwd=/tmp/x\n\
                    pattern=fo\\\\o\\nbar\ntimeout=90s\nbypass=true\n\nsandbox=strict\n";
        let p = parse_payload(text).unwrap();
        assert_eq!(p.token.as_deref(), Some("t0k"));
        assert_eq!(p.tool.as_deref(), Some("grep"));
        assert_eq!(p.agent.as_deref(), Some("a1"));
        assert_eq!(p.session.as_deref(), Some("s9"));
        assert_eq!(p.cwd.as_deref(), Some("/tmp/x"));
        assert_eq!(p.args, None);
        let fields: Vec<(&str, &str)> = p
            .fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("pattern", "fo\\o\nbar"),
                ("timeout", "90s"),
                ("bypass", "true"),
                ("sandbox", "strict")
            ]
        );
        assert_eq!(p.dispatch("timeout"), Some("90s"));
        assert_eq!(p.dispatch("pattern"), None);
    }

    #[test]
    fn values_may_contain_equals_and_unknown_escapes_stay_literal() {
        let p = parse_payload("expr=a=b\npath=C:\\temp\\x\\\nempty=\n").unwrap();
        assert_eq!(p.fields[0], ("expr".into(), "a=b".into()));
        assert_eq!(p.fields[1], ("path".into(), "C:\\temp\\x\\".into()));
        assert_eq!(p.fields[2], ("empty".into(), "".into()));
    }

    #[test]
    fn malformed_payloads_name_the_line() {
        assert_eq!(
            parse_payload("tool=x\n\njunk\n"),
            Err(PayloadError::MissingEquals { line: 3 })
        );
        assert_eq!(parse_payload("=v"), Err(PayloadError::EmptyKey { line: 1 }));
        let e = parse_payload("tool=a\ntool=b").unwrap_err();
        assert_eq!(
            e,
            PayloadError::Duplicate {
                line: 2,
                key: "tool".into()
            }
        );
        assert!(e.to_string().contains("line 2"));
        assert!(matches!(
            parse_payload("timeout=1\ntimeout=2"),
            Err(PayloadError::Duplicate { .. })
        ));
        assert!(matches!(
            parse_payload("args=[1,2]"),
            Err(PayloadError::BadArgs { .. })
        ));
        assert!(matches!(
            parse_payload("args={oops"),
            Err(PayloadError::BadArgs { .. })
        ));
    }

    #[test]
    fn fields_are_typed_by_the_schema_and_override_args() {
        let text = encode_payload(&[
            ("tool", "t"),
            ("args", r#"{"count":1,"keep":"yes","name":"old"}"#),
            ("count", "5"),
            ("ratio", "2.5"),
            ("force", "true"),
            ("list", r#"["a", 2]"#),
            ("opts", r#"{"k": null}"#),
            ("name", "42"),
            ("free", "[not json"),
            ("timeout", "30"),
        ]);
        let args = parse_payload(&text).unwrap().arguments(types).unwrap();
        assert_eq!(
            Value::Object(args),
            json!({
                "count": 5, "ratio": 2.5, "force": true, "list": ["a", 2],
                "opts": {"k": null}, "name": "42", "free": "[not json", "keep": "yes"
            })
        );
    }

    #[test]
    fn a_typed_field_that_is_not_json_names_the_key() {
        let fields = vec![("count".to_owned(), "five".to_owned())];
        let e = coerce_fields(&fields, types).unwrap_err();
        assert!(matches!(&e, PayloadError::BadArgument { key, ty, .. }
            if key == "count" && ty == "integer"));
        assert!(e.to_string().contains("'count'"));
    }

    fn key() -> impl Strategy<Value = String> {
        "[a-z_][a-z0-9_.-]{0,8}"
    }

    proptest! {
        #[test]
        fn encode_then_parse_round_trips(
            pairs in prop::collection::btree_map(key(), "\\PC*|[\\\\\n=ab]*", 0..8)
        ) {
            let fields: Vec<(&str, &str)> = pairs
                .iter()
                .filter(|(k, _)| k.as_str() != "args")
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let p = parse_payload(&encode_payload(&fields)).unwrap();
            let mut back: Vec<(String, String)> = p.fields.clone();
            for (k, v) in [("token", &p.token), ("tool", &p.tool), ("agent", &p.agent),
                           ("session", &p.session), ("cwd", &p.cwd)] {
                if let Some(v) = v {
                    back.push((k.to_owned(), v.clone()));
                }
            }
            back.sort();
            let mut want: Vec<(String, String)> = fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            want.sort();
            prop_assert_eq!(back, want);
        }

        #[test]
        fn parse_never_panics(text in "\\PC*|[\\\\\n=a-c{}\\[\\]\"]*") {
            if let Ok(p) = parse_payload(&text) {
                let _ = p.arguments(|k| Some(if k.len() % 2 == 0 { "integer" } else { "array" }.into()));
            }
            let _ = crate::protocol::parse_timeout(&text);
        }
    }
}
