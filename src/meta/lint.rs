//! Host-independent checks of a parsed `.meta`: tiers, `args` schemas
//! (compiled once here), `required` names, prompts and impossible variants.

use std::sync::Arc;

use jsonschema::Validator;
use serde_json::Value;

use super::locate::{Seg, key, locate, pointer};
use super::raw::{RawFields, RawMeta};
use super::variant::{MATCH_KEYS, merge};
use super::{Problem, Severity, Tier};

/// Go's `runtime.GOOS` values.
pub const GO_OSES: &[&str] = &[
    "aix",
    "android",
    "darwin",
    "dragonfly",
    "freebsd",
    "hurd",
    "illumos",
    "ios",
    "js",
    "linux",
    "nacl",
    "netbsd",
    "openbsd",
    "plan9",
    "solaris",
    "wasip1",
    "windows",
    "zos",
];

/// Go's `runtime.GOARCH` values.
pub const GO_ARCHES: &[&str] = &[
    "386",
    "amd64",
    "amd64p32",
    "arm",
    "armbe",
    "arm64",
    "arm64be",
    "loong64",
    "mips",
    "mipsle",
    "mips64",
    "mips64le",
    "mips64p32",
    "mips64p32le",
    "ppc",
    "ppc64",
    "ppc64le",
    "riscv",
    "riscv64",
    "s390",
    "s390x",
    "sparc",
    "sparc64",
    "wasm",
];

/// A compiled `args` schema, or why it could not be compiled.
pub type Compiled = Result<Arc<Validator>, String>;

/// A parsed `.meta` with its host-independent problems and compiled schemas.
#[derive(Debug)]
pub struct Checked {
    pub raw: RawMeta,
    pub problems: Vec<Problem>,
    /// Index 0: the top-level `args`; index i+1: variant i's own `args`.
    /// `None` where that object sets no `args`.
    pub schemas: Vec<Option<Compiled>>,
}

impl Checked {
    /// The compiled schema in effect for the top level (`None`) or a variant.
    pub fn schema_for(&self, variant: Option<usize>) -> Option<&Compiled> {
        if let Some(i) = variant
            && let Some(Some(c)) = self.schemas.get(i + 1)
        {
            return Some(c);
        }
        self.schemas.first().and_then(Option::as_ref)
    }
}

struct Linter<'a> {
    text: &'a str,
    raw: &'a RawMeta,
    out: Vec<Problem>,
}

impl Linter<'_> {
    fn push(&mut self, sev: Severity, at: &[Seg], msg: impl Into<String>) {
        let p = Problem::new(&self.raw.path, sev, msg).at(locate(self.text, at));
        self.out.push(p);
    }
}

fn with(base: &[Seg], more: &[Seg]) -> Vec<Seg> {
    base.iter().chain(more).cloned().collect()
}

/// Runs every host-independent check; `text` is the file text (for positions).
pub fn analyze(raw: RawMeta, text: &str) -> Checked {
    let mut l = Linter {
        text,
        raw: &raw,
        out: Vec::new(),
    };
    let mut schemas = vec![check_fields(&mut l, &raw.fields, &[])];
    for (i, v) in raw.variants.iter().enumerate() {
        let base = vec![key("variants"), Seg::Index(i)];
        schemas.push(check_fields(&mut l, &v.fields, &base));
    }
    check_variants(&mut l);
    check_docs(&mut l);
    let problems = l.out;
    Checked {
        raw,
        problems,
        schemas,
    }
}

/// Checks one object's own fields; returns its compiled `args`, if set.
fn check_fields(l: &mut Linter, f: &RawFields, base: &[Seg]) -> Option<Compiled> {
    if let Some(t) = &f.tier
        && Tier::parse(t).is_none()
    {
        l.push(
            Severity::Error,
            &with(base, &[key("tier")]),
            format!("unknown tier \"{t}\" (expected \"hot\", \"warm\" or \"cold\"); using \"hot\""),
        );
    }
    if base.is_empty() && f.extra.contains_key("match") {
        l.push(
            Severity::Warning,
            &[key("match")],
            "`match` at the top level is ignored; put it inside an entry of `variants`",
        );
    }
    if !base.is_empty() && f.extra.contains_key("variants") {
        l.push(
            Severity::Warning,
            &with(base, &[key("variants")]),
            "nested `variants` are ignored; variants do not nest",
        );
    }
    let args = f.args.as_ref()?;
    let at = with(base, &[key("args")]);
    Some(check_schema(l, args, &at))
}

/// Validates `args` against its meta-schema, compiles it, checks `required`.
fn check_schema(l: &mut Linter, args: &Value, at: &[Seg]) -> Compiled {
    if let Err(e) = jsonschema::meta::validate(args) {
        let where_ = e.instance_path().as_str();
        let inner = pointer(where_);
        let what = match (where_.rsplit('/').next(), e.instance().as_ref()) {
            (Some("type"), Value::String(t)) => format!(
                "unknown type \"{t}\" (expected string, number, integer, boolean, object, array or null)"
            ),
            _ => e.to_string(),
        };
        let sep = if where_.is_empty() { "" } else { ": " };
        let msg = format!("`args` is not a valid JSON Schema: {where_}{sep}{what}");
        l.push(Severity::Error, &with(at, &inner), msg.clone());
        return Err(msg);
    }
    let compiled = match jsonschema::validator_for(args) {
        Ok(v) => Arc::new(v),
        Err(e) => {
            let msg = format!("`args` schema does not compile: {e}");
            l.push(Severity::Error, at, msg.clone());
            return Err(msg);
        }
    };
    if let Some(t) = args.get("type")
        && t != "object"
    {
        l.push(
            Severity::Warning,
            &with(at, &[key("type")]),
            "`args` should have \"type\": \"object\": tools receive a JSON object",
        );
    }
    let props = args.get("properties").and_then(Value::as_object);
    let open = args.get("patternProperties").is_some();
    if let Some(req) = args.get("required").and_then(Value::as_array) {
        for (i, name) in req.iter().enumerate() {
            let Some(name) = name.as_str() else { continue };
            if !open && !props.is_some_and(|p| p.contains_key(name)) {
                l.push(
                    Severity::Error,
                    &with(at, &[key("required"), Seg::Index(i)]),
                    format!("required property \"{name}\" is not defined in `properties`"),
                );
            }
        }
    }
    Ok(compiled)
}

fn check_variants(l: &mut Linter) {
    let raw = l.raw;
    let mut catch_all: Option<usize> = None;
    for (i, v) in raw.variants.iter().enumerate() {
        let base = vec![key("variants"), Seg::Index(i)];
        if let Some(first) = catch_all {
            l.push(
                Severity::Error,
                &base,
                format!(
                    "variant {i} can never be chosen: variant {first} has no conditions and always matches"
                ),
            );
        }
        let Some(m) = &v.matches else {
            catch_all.get_or_insert(i);
            continue;
        };
        if m.is_empty() {
            catch_all.get_or_insert(i);
        }
        for (k, val) in m {
            let at = with(&base, &[key("match"), key(k)]);
            if !MATCH_KEYS.contains(&k.as_str()) {
                l.push(
                    Severity::Error,
                    &at,
                    format!(
                        "unknown match key `{k}` (expected one of {}); variant {i} can never match",
                        MATCH_KEYS.join(", ")
                    ),
                );
                continue;
            }
            let vals = val.values();
            if vals.is_empty() {
                l.push(
                    Severity::Error,
                    &at,
                    format!("empty `{k}` list: variant {i} can never match"),
                );
                continue;
            }
            let known: Option<&[&str]> = match k.as_str() {
                "os" => Some(GO_OSES),
                "arch" => Some(GO_ARCHES),
                _ => None,
            };
            let bad: Vec<&String> = vals
                .iter()
                .filter(|s| s.is_empty() || known.is_some_and(|names| !names.contains(&s.as_str())))
                .collect();
            for s in &bad {
                let hint = match s.as_str() {
                    "macos" => " (Go calls it \"darwin\")",
                    "x86_64" | "x64" => " (Go calls it \"amd64\")",
                    "aarch64" => " (Go calls it \"arm64\")",
                    "i386" | "i686" | "x86" => " (Go calls it \"386\")",
                    _ => "",
                };
                let what = if s.is_empty() {
                    format!("empty `{k}` value")
                } else {
                    format!("unknown `{k}` value \"{s}\"{hint}")
                };
                if bad.len() == vals.len() {
                    l.push(
                        Severity::Error,
                        &at,
                        format!("{what}: variant {i} can never match"),
                    );
                } else {
                    l.push(Severity::Warning, &at, format!("{what} never matches"));
                }
            }
        }
    }
}

/// Every definition a host can end up with should have a description and a prompt.
fn check_docs(l: &mut Linter) {
    let raw = l.raw;
    let missing = |f: &RawFields, which: &str| match which {
        "prompt" => f.prompt.as_deref().is_none_or(str::is_empty),
        _ => f.description.as_deref().is_none_or(str::is_empty),
    };
    for which in ["description", "prompt"] {
        let msg = format!("no `{which}`: the model is told nothing about this tool");
        if raw.variants.is_empty() {
            if missing(&raw.fields, which) {
                l.push(Severity::Warning, &[], msg);
            }
            continue;
        }
        for (i, v) in raw.variants.iter().enumerate() {
            if missing(&merge(&raw.fields, &v.fields), which) {
                let at = [key("variants"), Seg::Index(i)];
                l.push(Severity::Warning, &at, format!("variant {i}: {msg}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::parse_meta;
    use std::path::Path;

    fn lint(text: &str) -> Vec<Problem> {
        let raw = parse_meta("t", Path::new("/d/t.meta"), text).unwrap();
        analyze(raw, text).problems
    }

    fn has(ps: &[Problem], sev: Severity, needle: &str) -> Option<(usize, usize)> {
        let p = ps
            .iter()
            .find(|p| p.severity == sev && p.message.contains(needle))
            .unwrap_or_else(|| panic!("no {sev} containing {needle:?} in {ps:#?}"));
        p.line.zip(p.column)
    }

    #[test]
    fn clean_file_has_no_problems() {
        let ps = lint(
            r#"{"description":"d","prompt":"p","args":{"type":"object","required":["a"],"properties":{"a":{"type":"string"}}}}"#,
        );
        assert!(ps.is_empty(), "{ps:#?}");
    }

    #[test]
    fn schema_errors_are_located() {
        let text = "{\"description\":\"d\",\"prompt\":\"p\",\n \"args\": {\"type\": \"object\",\n  \"properties\": {\"n\": {\"type\": \"strang\"}}}}";
        let ps = lint(text);
        let pos = has(&ps, Severity::Error, "not a valid JSON Schema");
        assert_eq!(pos.map(|p| p.0), Some(3));
        let ps = lint(
            r#"{"description":"d","prompt":"p","args":{"type":"object","properties":{"s":{"type":"string","pattern":"(["}}}}"#,
        );
        has(&ps, Severity::Error, "args");
    }

    #[test]
    fn required_not_in_properties_tier_and_prompt() {
        let text = "{\n\"tier\": \"tepid\",\n\"args\": {\"type\":\"object\",\"required\":[\"x\"],\"properties\":{}}}";
        let ps = lint(text);
        assert_eq!(has(&ps, Severity::Error, "unknown tier"), Some((2, 1)));
        has(&ps, Severity::Error, "required property \"x\"");
        has(&ps, Severity::Warning, "no `prompt`");
        has(&ps, Severity::Warning, "no `description`");
    }

    #[test]
    fn impossible_variants() {
        let text = r#"{"description":"d","prompt":"p","variants":[
            {"match":{"os":"macos"}},
            {"match":{"os":["linux","plan10"]}},
            {"match":{"arch":"x86_64"}},
            {"match":{"distro":"debian"}},
            {"match":{"env":[]}},
            {"cmd":"fallback"},
            {"match":{"os":"linux"}}]}"#;
        let ps = lint(text);
        has(
            &ps,
            Severity::Error,
            "unknown `os` value \"macos\" (Go calls it \"darwin\"): variant 0",
        );
        has(
            &ps,
            Severity::Warning,
            "unknown `os` value \"plan10\" never matches",
        );
        has(&ps, Severity::Error, "\"amd64\"");
        has(&ps, Severity::Error, "unknown match key `distro`");
        has(&ps, Severity::Error, "empty `env` list");
        has(
            &ps,
            Severity::Error,
            "variant 6 can never be chosen: variant 5",
        );
        assert!(!ps.iter().any(|p| p.message.contains("variant 5 can never")));
    }

    #[test]
    fn schemas_per_variant() {
        let text = r#"{"args":{"type":"object"},"variants":[{"match":{"os":"linux"}},{"args":{"type":"nope"}}]}"#;
        let raw = parse_meta("t", Path::new("/d/t.meta"), text).unwrap();
        let c = analyze(raw, text);
        assert!(matches!(c.schema_for(None), Some(Ok(_))));
        assert!(matches!(c.schema_for(Some(0)), Some(Ok(_))));
        assert!(matches!(c.schema_for(Some(1)), Some(Err(_))));
        let text = r#"{"variants":[{}]}"#;
        let raw = parse_meta("t", Path::new("/d/t.meta"), text).unwrap();
        assert!(analyze(raw, text).schema_for(Some(0)).is_none());
    }
}
