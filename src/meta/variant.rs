//! Variants: evaluating `match` against a [`Host`] (AND across keys, OR
//! within an array value), picking the first match, merging over the top.

use std::collections::BTreeMap;

use super::Host;
use super::raw::{MatchValue, RawFields, RawMeta};

/// The match keys this version understands.
pub const MATCH_KEYS: &[&str] = &["binary", "file", "os", "arch", "env", "nenv"];

/// Which definition applies on a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// The file has no variants: the top level applies.
    TopLevel,
    /// Variant `n` (0-based) is the first that matches.
    Variant(usize),
    /// There are variants and none matches: the tool is hidden here.
    Hidden,
}

/// Whether one `key: value` condition holds. Unknown keys never hold.
pub fn condition_holds(key: &str, value: &MatchValue, host: &Host) -> bool {
    let test = |v: &str| match key {
        "binary" => host.has_binary(v),
        "file" => host.file_exists(v),
        "os" => host.os == v,
        "arch" => host.arch == v,
        "env" => host.env_nonempty(v),
        "nenv" => !v.is_empty() && !host.env_nonempty(v),
        _ => false,
    };
    value.values().iter().any(|v| test(v))
}

/// Whether a variant's `match` holds: every key (AND); no `match` holds.
pub fn matches(m: Option<&BTreeMap<String, MatchValue>>, host: &Host) -> bool {
    m.is_none_or(|m| m.iter().all(|(k, v)| condition_holds(k, v, host)))
}

/// The first variant that matches, or the top level when there are none.
pub fn select(meta: &RawMeta, host: &Host) -> Selection {
    if meta.variants.is_empty() {
        return Selection::TopLevel;
    }
    meta.variants
        .iter()
        .position(|v| matches(v.matches.as_ref(), host))
        .map_or(Selection::Hidden, Selection::Variant)
}

/// The fields in effect for a selection (`None` when hidden).
pub fn effective(meta: &RawMeta, sel: Selection) -> Option<RawFields> {
    match sel {
        Selection::TopLevel => Some(meta.fields.clone()),
        Selection::Variant(i) => Some(merge(&meta.fields, &meta.variants.get(i)?.fields)),
        Selection::Hidden => None,
    }
}

/// Variant fields override the top level where set; unset ones inherit.
/// Unknown fields merge key by key.
pub fn merge(top: &RawFields, v: &RawFields) -> RawFields {
    fn pick<T: Clone>(v: &Option<T>, top: &Option<T>) -> Option<T> {
        v.clone().or_else(|| top.clone())
    }
    let mut extra = top.extra.clone();
    extra.extend(v.extra.iter().map(|(k, x)| (k.clone(), x.clone())));
    RawFields {
        description: pick(&v.description, &top.description),
        prompt: pick(&v.prompt, &top.prompt),
        keywords: pick(&v.keywords, &top.keywords),
        args: pick(&v.args, &top.args),
        tier: pick(&v.tier, &top.tier),
        read_only: pick(&v.read_only, &top.read_only),
        cmd: pick(&v.cmd, &top.cmd),
        sudo: pick(&v.sudo, &top.sudo),
        elevated: pick(&v.elevated, &top.elevated),
        bypass: pick(&v.bypass, &top.bypass),
        scope: pick(&v.scope, &top.scope),
        output_format: pick(&v.output_format, &top.output_format),
        resets_counter: pick(&v.resets_counter, &top.resets_counter),
        extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::parse_meta;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    fn meta(text: &str) -> RawMeta {
        parse_meta("t", Path::new("/d/t.meta"), text).unwrap()
    }

    fn host() -> Host {
        Host::new("linux", "amd64", vec![])
            .with_env("DISPLAY", ":0")
            .with_env("EMPTY", "")
    }

    fn sel(text: &str, h: &Host) -> Selection {
        select(&meta(text), h)
    }

    #[test]
    fn os_arch_env_nenv() {
        let h = host();
        let one = |m: &str| sel(&format!(r#"{{"variants":[{{"match":{m}}}]}}"#), &h);
        assert_eq!(one(r#"{"os":"linux"}"#), Selection::Variant(0));
        assert_eq!(one(r#"{"os":"darwin"}"#), Selection::Hidden);
        assert_eq!(one(r#"{"arch":"amd64"}"#), Selection::Variant(0));
        assert_eq!(one(r#"{"arch":"x86_64"}"#), Selection::Hidden);
        assert_eq!(one(r#"{"env":"DISPLAY"}"#), Selection::Variant(0));
        assert_eq!(one(r#"{"env":"EMPTY"}"#), Selection::Hidden);
        assert_eq!(one(r#"{"env":"UNSET"}"#), Selection::Hidden);
        assert_eq!(one(r#"{"nenv":"EMPTY"}"#), Selection::Variant(0));
        assert_eq!(one(r#"{"nenv":"UNSET"}"#), Selection::Variant(0));
        assert_eq!(one(r#"{"nenv":"DISPLAY"}"#), Selection::Hidden);
        assert_eq!(one(r#"{"nosuchkey":"x"}"#), Selection::Hidden);
        assert_eq!(one(r#"{}"#), Selection::Variant(0));
    }

    #[test]
    fn binary_and_file_use_the_real_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("journalctl");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let h = Host::new("linux", "amd64", vec![dir.path().to_path_buf()]);
        let without = Host::new("linux", "amd64", vec![PathBuf::from("/nonexistent")]);
        let text = r#"{"variants":[{"match":{"binary":"journalctl"}}]}"#;
        assert_eq!(sel(text, &h), Selection::Variant(0));
        assert_eq!(sel(text, &without), Selection::Hidden);
        let abs = format!(
            r#"{{"variants":[{{"match":{{"binary":"{}"}}}}]}}"#,
            bin.display()
        );
        assert_eq!(sel(&abs, &without), Selection::Variant(0));
        let file = format!(
            r#"{{"variants":[{{"match":{{"file":"{}"}}}}]}}"#,
            dir.path().display()
        );
        assert_eq!(sel(&file, &without), Selection::Variant(0));
        let nofile = r#"{"variants":[{"match":{"file":"/nonexistent/x"}}]}"#;
        assert_eq!(sel(nofile, &without), Selection::Hidden);
    }

    #[test]
    fn and_across_keys_or_within_arrays() {
        let h = host();
        let one = |m: &str| sel(&format!(r#"{{"variants":[{{"match":{m}}}]}}"#), &h);
        assert_eq!(
            one(r#"{"os":"linux","arch":"amd64"}"#),
            Selection::Variant(0)
        );
        assert_eq!(one(r#"{"os":"linux","arch":"arm64"}"#), Selection::Hidden);
        assert_eq!(one(r#"{"os":["freebsd","linux"]}"#), Selection::Variant(0));
        assert_eq!(one(r#"{"os":["freebsd","darwin"]}"#), Selection::Hidden);
        assert_eq!(one(r#"{"os":[]}"#), Selection::Hidden);
        assert_eq!(
            one(r#"{"os":["darwin","linux"],"env":["NOPE","DISPLAY"]}"#),
            Selection::Variant(0)
        );
        assert_eq!(
            one(r#"{"os":["darwin","linux"],"env":["NOPE"]}"#),
            Selection::Hidden
        );
    }

    #[test]
    fn first_match_wins_and_no_match_always_matches() {
        let h = host();
        let text = r#"{"variants":[{"match":{"os":"darwin"}},{"match":{"os":"linux"}},{"match":{"arch":"amd64"}}]}"#;
        assert_eq!(sel(text, &h), Selection::Variant(1));
        let text = r#"{"variants":[{"match":{"os":"darwin"}},{"cmd":"fallback"},{"match":{"os":"linux"}}]}"#;
        assert_eq!(sel(text, &h), Selection::Variant(1));
        assert_eq!(sel(r#"{"variants":[]}"#, &h), Selection::TopLevel);
        assert_eq!(sel(r#"{}"#, &h), Selection::TopLevel);
    }

    #[test]
    fn merging_overrides_and_inherits() {
        let m = meta(
            r#"{"description":"top","tier":"cold","readOnly":true,"cmd":"a","x":1,"y":1,
            "variants":[{"match":{"os":"linux"},"cmd":"b","readOnly":false,"prompt":"vp","y":2}]}"#,
        );
        let f = effective(&m, select(&m, &host())).unwrap();
        assert_eq!(f.description.as_deref(), Some("top"));
        assert_eq!(f.tier.as_deref(), Some("cold"));
        assert_eq!(f.read_only, Some(false));
        assert_eq!(f.cmd.as_deref(), Some("b"));
        assert_eq!(f.prompt.as_deref(), Some("vp"));
        assert_eq!(
            (f.extra["x"].clone(), f.extra["y"].clone()),
            (1.into(), 2.into())
        );
        assert!(effective(&m, Selection::Hidden).is_none());
    }
}
