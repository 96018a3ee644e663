//! A tool resolved for one host ([`Tool`]): merged fields, command, and
//! argument validation against its compiled `args` schema.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use jsonschema::Validator;
use jsonschema::error::ValidationErrorKind;
use serde::ser::{Serialize, SerializeStruct, Serializer};
use serde_json::{Map, Value};

use super::lint::{Checked, Compiled};
use super::locate::{Seg, key, locate};
use super::resolve::resolve;
use super::variant::{Selection, effective, select};
use super::{Command, Host, Problem, Tier};

/// A tool as this host sees it: the first matching variant merged over the
/// top level, with its command resolved.
#[derive(Debug)]
pub struct Tool {
    pub name: String,
    /// The tools directory the `.meta` was found in.
    pub dir: PathBuf,
    pub meta_path: PathBuf,
    pub description: String,
    pub prompt: String,
    /// Discovery-only vocabulary; never shown to the model as schema.
    pub keywords: Vec<String>,
    /// The JSON Schema of the arguments (default `{"type":"object"}`).
    pub args: Value,
    pub tier: Tier,
    pub read_only: bool,
    pub sudo: bool,
    /// Needs to leave the sandbox: `bypass`, `elevated` or `sudo`.
    pub bypass: bool,
    pub scope: Option<String>,
    pub output_format: Option<String>,
    pub resets_counter: bool,
    /// What to run; `None` (with a problem reported) when nothing was found.
    pub command: Option<Command>,
    /// Unknown `.meta` fields, kept as written.
    pub extra: Map<String, Value>,
    /// The variant in effect (0-based), `None` for a file without variants.
    pub variant: Option<usize>,
    validator: OnceLock<Compiled>,
}

/// Arguments that do not satisfy a tool's `args` schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// One message per violation, each naming the field and the rule.
    #[error("invalid arguments: {}", errors.join("; "))]
    Invalid { errors: Vec<String> },
    /// The tool's own schema is broken.
    #[error("the tool's `args` schema is invalid: {0}")]
    Schema(String),
}

impl Tool {
    /// Checks `args` against the schema (compiled once, then cached).
    pub fn validate_args(&self, args: &Value) -> Result<(), ArgsError> {
        let compiled = self.validator.get_or_init(|| {
            jsonschema::validator_for(&self.args)
                .map(Arc::new)
                .map_err(|e| e.to_string())
        });
        let v: &Validator = compiled
            .as_ref()
            .map_err(|e| ArgsError::Schema(e.clone()))?;
        let errors: Vec<String> = v.iter_errors(args).map(|e| describe(&e)).collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ArgsError::Invalid { errors })
        }
    }

    /// The schema `type` of property `name` (the first non-`null` one when
    /// `type` is a list), e.g. to turn `count=5` into a number.
    pub fn arg_type(&self, name: &str) -> Option<&str> {
        match self.args.get("properties")?.get(name)?.get("type")? {
            Value::String(s) => Some(s),
            Value::Array(a) => a.iter().filter_map(Value::as_str).find(|s| *s != "null"),
            _ => None,
        }
    }
}

/// `"path": required property missing`, `"/count": 5 is not of type "string"`.
fn describe(e: &jsonschema::ValidationError<'_>) -> String {
    let at = e.instance_path().as_str();
    match e.kind() {
        ValidationErrorKind::Required { property } => {
            let prop = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_string);
            if at.is_empty() {
                format!("\"{prop}\": required property missing")
            } else {
                format!("\"{at}/{prop}\": required property missing")
            }
        }
        _ if at.is_empty() => format!("(root): {e}"),
        _ => format!("\"{at}\": {e}"),
    }
}

impl Serialize for Tool {
    /// The model-facing description: no keywords, no unknown fields.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Tool", 6)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("description", &self.description)?;
        st.serialize_field("prompt", &self.prompt)?;
        st.serialize_field("args", &self.args)?;
        st.serialize_field("tier", &self.tier)?;
        st.serialize_field("readOnly", &self.read_only)?;
        st.end()
    }
}

/// The outcome of resolving one checked `.meta` on a host.
#[derive(Debug)]
pub struct Built {
    /// `None` when hidden or when its schema is broken.
    pub tool: Option<Tool>,
    /// No variant matches on this host.
    pub hidden: bool,
    /// Host-dependent problems (commands); lint problems are in `Checked`.
    pub problems: Vec<Problem>,
}

/// Selects the variant, merges, resolves the command.
pub fn build(checked: &Checked, dir: &Path, text_for_pos: Option<&str>, host: &Host) -> Built {
    let raw = &checked.raw;
    let sel = select(raw, host);
    let (Some(f), variant) = (
        effective(raw, sel),
        match sel {
            Selection::Variant(i) => Some(i),
            _ => None,
        },
    ) else {
        return Built {
            tool: None,
            hidden: true,
            problems: Vec::new(),
        };
    };
    let mut problems = Vec::new();
    let base: Vec<Seg> = variant.map_or_else(Vec::new, |i| vec![key("variants"), Seg::Index(i)]);
    let pos = |segs: &[Seg]| text_for_pos.and_then(|t| locate(t, segs));
    let compiled = checked.schema_for(variant);
    if let Some(Err(_)) = compiled {
        let which = variant.map_or_else(String::new, |i| format!(" (variant {i})"));
        problems.push(
            Problem::error(
                &raw.path,
                format!(
                    "tool `{}` not loaded: its `args` schema{which} is invalid",
                    raw.name
                ),
            )
            .at(pos(&base)),
        );
        return Built {
            tool: None,
            hidden: false,
            problems,
        };
    }
    let r = resolve(&raw.name, dir, f.cmd.as_deref(), host);
    if let Some(err) = r.error {
        // Point at the `cmd` in effect (the variant's, else the top level's).
        let own_cmd = variant
            .and_then(|i| raw.variants.get(i))
            .is_some_and(|v| v.fields.cmd.is_some());
        let at = if own_cmd {
            [base.clone(), vec![key("cmd")]].concat()
        } else if raw.fields.cmd.is_some() {
            vec![key("cmd")]
        } else {
            base.clone()
        };
        problems
            .push(Problem::error(&raw.path, format!("tool `{}`: {err}", raw.name)).at(pos(&at)));
    }
    let validator = OnceLock::new();
    if let Some(Ok(v)) = compiled {
        let _ = validator.set(Ok(v.clone()));
    }
    let sudo = f.sudo.unwrap_or(false);
    let tool = Tool {
        name: raw.name.clone(),
        dir: dir.to_path_buf(),
        meta_path: raw.path.clone(),
        description: f.description.unwrap_or_default(),
        prompt: f.prompt.unwrap_or_default(),
        keywords: f.keywords.unwrap_or_default(),
        args: f
            .args
            .unwrap_or_else(|| serde_json::json!({"type": "object"})),
        tier: f.tier.as_deref().and_then(Tier::parse).unwrap_or_default(),
        read_only: f.read_only.unwrap_or(false),
        sudo,
        bypass: sudo || f.bypass.unwrap_or(false) || f.elevated.unwrap_or(false),
        scope: f.scope,
        output_format: f.output_format,
        resets_counter: f.resets_counter.unwrap_or(false),
        command: r.command,
        extra: f.extra,
        variant,
        validator,
    };
    Built {
        tool: Some(tool),
        hidden: false,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::lint::analyze;
    use crate::meta::parse_meta;
    use serde_json::json;

    fn tool(text: &str) -> Tool {
        let raw = parse_meta("t", Path::new("/d/t.meta"), text).unwrap();
        let host = Host::new("linux", "amd64", vec![]);
        build(&analyze(raw, text), Path::new("/d"), Some(text), &host)
            .tool
            .unwrap()
    }

    const SCHEMA: &str = r#"{"cmd":"echo hi","args":{"type":"object","required":["path"],
        "properties":{"path":{"type":"string"},"count":{"type":"string"},
        "n":{"type":["null","integer"]},"o":{"type":"object","required":["x"]}}}}"#;

    #[test]
    fn validation_messages_name_field_and_rule() {
        let t = tool(SCHEMA);
        assert_eq!(t.validate_args(&json!({"path": "/x"})), Ok(()));
        let e = t.validate_args(&json!({})).unwrap_err();
        assert_eq!(
            e,
            ArgsError::Invalid {
                errors: vec!["\"path\": required property missing".into()]
            }
        );
        let e = t
            .validate_args(&json!({"path": "/x", "count": 5}))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid arguments: \"/count\": 5 is not of type \"string\""
        );
        let e = t
            .validate_args(&json!({"path": "/x", "o": {}}))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid arguments: \"/o/x\": required property missing"
        );
        let e = t.validate_args(&json!([1])).unwrap_err();
        assert!(
            e.to_string()
                .contains("(root): [1] is not of type \"object\""),
            "{e}"
        );
    }

    #[test]
    fn arg_types_and_defaults() {
        let t = tool(SCHEMA);
        assert_eq!(t.arg_type("count"), Some("string"));
        assert_eq!(t.arg_type("n"), Some("integer"));
        assert_eq!(t.arg_type("nope"), None);
        let t = tool(r#"{"cmd":"true x","sudo":true}"#);
        assert_eq!(t.args, json!({"type":"object"}));
        assert_eq!(t.tier, Tier::Hot);
        assert!(t.sudo && t.bypass);
        assert!(t.validate_args(&json!({"anything": 1})).is_ok());
        assert!(tool(r#"{"cmd":"x y","elevated":true}"#).bypass);
        assert!(!tool(r#"{"cmd":"x y"}"#).bypass);
    }

    #[test]
    fn serializes_model_facing_fields_only() {
        let t = tool(
            r#"{"cmd":"x y","description":"d","prompt":"p","keywords":["k"],"tier":"cold","readOnly":true,"zz":1}"#,
        );
        assert_eq!(t.keywords, vec!["k".to_string()]);
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            json!({"name":"t","description":"d","prompt":"p","args":{"type":"object"},"tier":"cold","readOnly":true})
        );
    }
}
