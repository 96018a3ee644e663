//! The `.meta` file as written: every documented field typed, unknown ones
//! kept; parse errors carry serde_json's line and column and name the field.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Problem;

/// The fields a `.meta` top level and a variant share. `None` means unset,
/// so variants inherit it; JSON `null` counts as unset.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RawFields {
    pub description: Option<String>,
    pub prompt: Option<String>,
    pub keywords: Option<Vec<String>>,
    pub args: Option<Value>,
    pub tier: Option<String>,
    pub read_only: Option<bool>,
    pub cmd: Option<String>,
    pub sudo: Option<bool>,
    pub elevated: Option<bool>,
    pub bypass: Option<bool>,
    pub scope: Option<String>,
    pub output_format: Option<String>,
    pub resets_counter: Option<bool>,
    /// Fields this version does not know, kept as written.
    pub extra: Map<String, Value>,
}

/// A `match` value: one string, or an array meaning "any of these".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum MatchValue {
    One(String),
    Any(Vec<String>),
}

impl MatchValue {
    /// The alternatives (one for a plain string).
    pub fn values(&self) -> &[String] {
        match self {
            MatchValue::One(s) => std::slice::from_ref(s),
            MatchValue::Any(v) => v,
        }
    }
}

/// One entry of `variants`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RawVariant {
    /// `None` when the variant has no `match` (it always matches).
    pub matches: Option<BTreeMap<String, MatchValue>>,
    pub fields: RawFields,
}

/// A whole parsed `.meta` file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RawMeta {
    /// Tool name: the file name without `.meta`.
    pub name: String,
    /// The `.meta` file.
    pub path: PathBuf,
    pub fields: RawFields,
    /// Empty when the file has none (or `[]`).
    pub variants: Vec<RawVariant>,
}

/// Parses the text of `<name>.meta`. Syntax errors and wrongly typed fields
/// become an error [`Problem`] with line and column.
pub fn parse_meta(name: &str, path: &Path, text: &str) -> Result<RawMeta, Problem> {
    let top: TopLevel = serde_json::from_str(text).map_err(|e| {
        let (line, col) = (e.line(), e.column());
        let mut pos = (line > 0).then_some((line, col.max(1)));
        let mut msg = strip_position(&e.to_string());
        // Field errors wrapped by us carry the inner, more precise positions.
        while let Some((inner, l, c)) = split_position(&msg) {
            pos = Some((l, c.max(1)));
            msg = inner;
        }
        Problem::error(path, msg).at(pos)
    })?;
    Ok(RawMeta {
        name: name.to_string(),
        path: path.to_path_buf(),
        fields: top.0.fields,
        variants: top.0.variants.unwrap_or_default(),
    })
}

/// Removes serde_json's " at line N column M" suffix (we report it apart).
fn strip_position(msg: &str) -> String {
    split_position(msg).map_or_else(|| msg.to_string(), |(m, _, _)| m)
}

/// Splits `"message at line N column M"` into its parts.
fn split_position(msg: &str) -> Option<(String, usize, usize)> {
    let i = msg.rfind(" at line ")?;
    let (l, c) = msg[i + " at line ".len()..].split_once(" column ")?;
    Some((msg[..i].to_string(), l.parse().ok()?, c.parse().ok()?))
}

/// Wraps a field's error with the field name, keeping its position inside
/// the message (serde_json would otherwise move it to the enclosing object).
fn named<E: de::Error>(what: &str, e: impl fmt::Display) -> E {
    E::custom(format!("{what}: {e}"))
}

/// An object with all [`RawFields`] plus `variants` and `match`.
#[derive(Default)]
struct Object {
    fields: RawFields,
    variants: Option<Vec<RawVariant>>,
    matches: Option<BTreeMap<String, MatchValue>>,
}

struct TopLevel(Object);

impl<'de> Deserialize<'de> for TopLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // `match` means nothing at the top level: it is kept as an unknown field.
        Ok(TopLevel(
            d.deserialize_map(ObjectVisitor { variant: false })?,
        ))
    }
}

impl<'de> Deserialize<'de> for RawVariant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Variants do not nest: a nested `variants` is kept as an unknown field.
        let obj = d.deserialize_map(ObjectVisitor { variant: true })?;
        Ok(RawVariant {
            matches: obj.matches,
            fields: obj.fields,
        })
    }
}

struct ObjectVisitor {
    variant: bool,
}

/// Reads one field's value, naming the field in any error.
fn field<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    key: &str,
) -> Result<Option<T>, A::Error> {
    map.next_value::<Option<T>>()
        .map_err(|e| named(&format!("`{key}`"), e))
}

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Object;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.variant {
            f.write_str("a variant object")
        } else {
            f.write_str("a JSON object of tool metadata")
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
        let mut o = Object::default();
        let f = &mut o.fields;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "description" => f.description = field(&mut map, &key)?,
                "prompt" => f.prompt = field(&mut map, &key)?,
                "keywords" => f.keywords = field(&mut map, &key)?,
                "args" => {
                    f.args = field::<A, Value>(&mut map, &key)?;
                    if let Some(v) = &f.args
                        && !v.is_object()
                    {
                        return Err(de::Error::custom(
                            "`args`: must be a JSON Schema object, like {\"type\":\"object\",\"properties\":{…}}",
                        ));
                    }
                }
                "tier" => f.tier = field(&mut map, &key)?,
                "readOnly" => f.read_only = field(&mut map, &key)?,
                "cmd" => f.cmd = field(&mut map, &key)?,
                "sudo" => f.sudo = field(&mut map, &key)?,
                "elevated" => f.elevated = field(&mut map, &key)?,
                "bypass" => f.bypass = field(&mut map, &key)?,
                "scope" => f.scope = field(&mut map, &key)?,
                "outputFormat" => f.output_format = field(&mut map, &key)?,
                "resetsCounter" => f.resets_counter = field(&mut map, &key)?,
                "variants" if !self.variant => o.variants = field(&mut map, &key)?,
                "match" if self.variant => {
                    o.matches = map.next_value_seed(MatchSeed)?;
                }
                _ => {
                    let v: Value = map.next_value()?;
                    f.extra.insert(key, v);
                }
            }
        }
        Ok(o)
    }
}

/// `match`: an object whose values are strings or arrays of strings.
struct MatchSeed;

impl<'de> DeserializeSeed<'de> for MatchSeed {
    type Value = Option<BTreeMap<String, MatchValue>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        Option::<MatchMap>::deserialize(d).map(|m| m.map(|m| m.0))
    }
}

struct MatchMap(BTreeMap<String, MatchValue>);

impl<'de> Deserialize<'de> for MatchMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MatchMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`match` to be an object like {\"os\": \"linux\"}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MatchMap, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    let v: MatchValue = map
                        .next_value()
                        .map_err(|e| named(&format!("`match.{key}`"), e))?;
                    out.insert(key, v);
                }
                Ok(MatchMap(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'de> Deserialize<'de> for MatchValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MatchValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<MatchValue, E> {
                Ok(MatchValue::One(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MatchValue, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(s);
                }
                Ok(MatchValue::Any(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RawMeta, Problem> {
        parse_meta("t", Path::new("/d/t.meta"), text)
    }

    #[test]
    fn all_fields() {
        let m = parse(
            r#"{"description":"d","prompt":"p","keywords":["a","b"],
            "args":{"type":"object"},"tier":"warm","readOnly":true,"cmd":"x",
            "sudo":true,"elevated":false,"bypass":true,"scope":"s","outputFormat":"o",
            "resetsCounter":true,"future":{"x":1},"variants":[{"match":{"os":["linux","freebsd"]},"cmd":"y","zz":1}]}"#,
        )
        .unwrap();
        let f = &m.fields;
        assert_eq!(f.description.as_deref(), Some("d"));
        assert_eq!(f.keywords, Some(vec!["a".into(), "b".into()]));
        assert_eq!(f.tier.as_deref(), Some("warm"));
        assert_eq!(
            (f.read_only, f.sudo, f.elevated, f.bypass),
            (Some(true), Some(true), Some(false), Some(true))
        );
        assert_eq!(f.scope.as_deref(), Some("s"));
        assert_eq!(f.output_format.as_deref(), Some("o"));
        assert_eq!(f.resets_counter, Some(true));
        assert_eq!(f.extra["future"], serde_json::json!({"x":1}));
        assert_eq!(m.variants.len(), 1);
        let v = &m.variants[0];
        assert_eq!(
            v.matches.as_ref().unwrap()["os"],
            MatchValue::Any(vec!["linux".into(), "freebsd".into()])
        );
        assert_eq!(v.fields.cmd.as_deref(), Some("y"));
        assert_eq!(v.fields.extra["zz"], 1);
    }

    #[test]
    fn null_is_unset_and_empty_object_ok() {
        let m = parse(r#"{"description":null,"args":null}"#).unwrap();
        assert_eq!(m.fields, RawFields::default());
        assert!(parse("{}").unwrap().variants.is_empty());
    }

    #[test]
    fn syntax_error_has_position() {
        let p = parse("{\n  \"description\": \"x\",\n  oops\n}").unwrap_err();
        assert_eq!(p.line, Some(3));
        assert_eq!(p.column, Some(3));
        assert!(p.message.contains("key must be a string"), "{}", p.message);
        assert!(!p.message.contains("at line"));
    }

    #[test]
    fn wrong_type_names_field_with_position() {
        let p = parse("{\n  \"tier\": 5\n}").unwrap_err();
        assert!(
            p.message.starts_with("`tier`: invalid type: integer `5`"),
            "{}",
            p.message
        );
        assert_eq!(p.line, Some(2));
        let p = parse(r#"{"keywords":["a",3]}"#).unwrap_err();
        assert!(p.message.contains("`keywords`"), "{}", p.message);
        let p = parse(r#"{"args":"string"}"#).unwrap_err();
        assert!(p.message.contains("JSON Schema object"), "{}", p.message);
        let p = parse(r#"{"variants":[{"match":{"os":5}}]}"#).unwrap_err();
        assert!(p.message.contains("`match.os`"), "{}", p.message);
        let p = parse(r#"[1]"#).unwrap_err();
        assert!(p.message.contains("object"), "{}", p.message);
        let p = parse("{\"variants\": [\n {\"match\": {}, \"tier\": 5}]}").unwrap_err();
        assert_eq!(
            p.message,
            "`variants`: `tier`: invalid type: integer `5`, expected a string"
        );
        assert_eq!((p.line, p.column), (Some(2), Some(24)));
        let p = parse(r#"{"readOnly":"yes"}"#).unwrap_err();
        assert!(p.message.contains("`readOnly`"), "{}", p.message);
    }

    #[test]
    fn top_level_match_and_nested_variants_are_kept_as_extra() {
        let m = parse(r#"{"match":{"os":"linux"},"variants":[{"variants":[]}]}"#).unwrap();
        assert!(m.fields.extra.contains_key("match"));
        assert!(m.variants[0].fields.extra.contains_key("variants"));
        assert!(m.variants[0].matches.is_none());
    }
}
