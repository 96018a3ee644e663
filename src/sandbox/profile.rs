//! Sandbox profiles: the ollie YAML format (plus our `validation` section),
//! loading `<dir>/<name>.yaml`, and writing the commented default profile.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::SandboxError;
use super::validate::{CooldownConfig, DenyRule, Validator};

/// The default profile written on first use.
pub const DEFAULT_PROFILE_YAML: &str = include_str!("default.yaml");

fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn yes() -> bool {
    true
}

/// `general:` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct General {
    /// Run with what the kernel supports (true) or refuse (false).
    pub best_effort: bool,
}

impl Default for General {
    fn default() -> Self {
        General { best_effort: true }
    }
}

/// `filesystem:` section: lists of path templates.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Filesystem {
    #[serde(deserialize_with = "nullable")]
    pub ro: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub rox: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub rw: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub rwx: Vec<String>,
}

/// `network:` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Network {
    #[serde(default = "yes")]
    pub enabled: bool,
    pub unrestricted: bool,
    #[serde(deserialize_with = "nullable")]
    pub bind_tcp: Vec<u16>,
    #[serde(deserialize_with = "nullable")]
    pub connect_tcp: Vec<u16>,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            enabled: true,
            unrestricted: false,
            bind_tcp: Vec::new(),
            connect_tcp: Vec::new(),
        }
    }
}

/// `advanced:` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Advanced {
    /// Add the executable's shared libraries (from `ldd`) read+execute.
    pub ldd: bool,
    /// Add the executable itself (and its `#!` interpreter) read+execute.
    pub add_exec: bool,
}

/// One `validation.deny` entry.
#[derive(Debug, Clone, Deserialize)]
pub struct DenyRuleSpec {
    pub name: String,
    pub pattern: String,
}

/// A duration written as seconds (`60`) or Go-style text (`90s`, `2m`, `1m30s`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum DurationSpec {
    Seconds(u64),
    Text(String),
}

impl DurationSpec {
    fn to_duration(&self) -> Result<Duration, String> {
        match self {
            DurationSpec::Seconds(s) => Ok(Duration::from_secs(*s)),
            DurationSpec::Text(t) => parse_duration(t),
        }
    }
}

/// Parse `90`, `2.5`, `90s`, `2m`, `1m30s`, `500ms`: the same rules as a
/// call's `timeout` ([`crate::protocol::parse_timeout`]).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::protocol::parse_timeout(text).map_err(|e| e.to_string())
}

/// `validation:` section (toolsrv's own; ollie ignores it).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ValidationSpec {
    #[serde(deserialize_with = "nullable")]
    pub deny: Vec<DenyRuleSpec>,
    pub replace_defaults: bool,
    pub max_rejections: Option<u32>,
    pub window: Option<DurationSpec>,
    pub cooldown: Option<DurationSpec>,
}

/// A parsed sandbox profile.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Profile {
    #[serde(skip)]
    pub name: String,
    #[serde(skip)]
    pub path: PathBuf,
    #[serde(deserialize_with = "nullable")]
    pub general: General,
    #[serde(deserialize_with = "nullable")]
    pub filesystem: Filesystem,
    #[serde(deserialize_with = "nullable")]
    pub network: Network,
    #[serde(deserialize_with = "nullable")]
    pub env: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub advanced: Advanced,
    #[serde(deserialize_with = "nullable")]
    pub validation: ValidationSpec,
    #[serde(skip)]
    validator: Validator,
    #[serde(skip)]
    cooldown: CooldownConfig,
    /// Rulesets built from this profile, reused across calls.
    #[serde(skip)]
    pub(crate) rulesets: super::cache::RulesetCache,
}

const KNOWN_KEYS: &[(&str, &[&str])] = &[
    ("general", &["best_effort"]),
    ("filesystem", &["ro", "rox", "rw", "rwx"]),
    (
        "network",
        &["enabled", "unrestricted", "bind_tcp", "connect_tcp"],
    ),
    ("env", &[]),
    ("advanced", &["ldd", "add_exec"]),
    (
        "validation",
        &[
            "deny",
            "replace_defaults",
            "max_rejections",
            "window",
            "cooldown",
        ],
    ),
];

/// Keys we do not know (kept compatible with ollie, but worth a warning).
fn unknown_keys(text: &str) -> Vec<String> {
    let Ok(serde_json::Value::Object(top)) = serde_saphyr::from_str::<serde_json::Value>(text)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in &top {
        match KNOWN_KEYS.iter().find(|(name, _)| name == k) {
            None => out.push(k.clone()),
            Some((_, subs)) => {
                if let serde_json::Value::Object(m) = v {
                    out.extend(
                        m.keys()
                            .filter(|s| !subs.contains(&s.as_str()))
                            .map(|s| format!("{k}.{s}")),
                    );
                }
            }
        }
    }
    out
}

impl Profile {
    /// Parse profile text; `path` is used in error messages.
    pub fn parse(name: &str, path: &Path, text: &str) -> Result<Profile, SandboxError> {
        let mut p: Profile = if text.trim().is_empty() {
            Profile::default()
        } else {
            serde_saphyr::from_str(text).map_err(|e| SandboxError::Yaml {
                path: path.to_path_buf(),
                line: e.location().map(|l| l.line()),
                message: e.without_snippet().to_string(),
            })?
        };
        for key in unknown_keys(text) {
            tracing::warn!(profile = name, key = %key, "unknown key in sandbox profile ignored");
        }
        p.name = name.to_string();
        p.path = path.to_path_buf();
        let invalid = |message: String| SandboxError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let rules = p
            .validation
            .deny
            .iter()
            .map(|d| DenyRule::new(&d.name, &d.pattern))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        p.validator = Validator::new(rules, p.validation.replace_defaults);
        let mut cd = CooldownConfig::default();
        if let Some(n) = p.validation.max_rejections {
            if n == 0 {
                return Err(invalid(
                    "validation.max_rejections must be at least 1".into(),
                ));
            }
            cd.max_rejections = n;
        }
        if let Some(w) = &p.validation.window {
            cd.window = w
                .to_duration()
                .map_err(|e| invalid(format!("validation.window: {e}")))?;
        }
        if let Some(c) = &p.validation.cooldown {
            cd.cooldown = c
                .to_duration()
                .map_err(|e| invalid(format!("validation.cooldown: {e}")))?;
        }
        p.cooldown = cd;
        for name in &p.env {
            if name.is_empty() || name.contains('=') {
                return Err(invalid(format!("env: {name:?} is not a variable name")));
            }
        }
        Ok(p)
    }

    /// The command validator built from the built-in rules and `validation`.
    pub fn validator(&self) -> &Validator {
        &self.validator
    }

    /// Rejection rate limit from `validation` (defaults: 5 in 60 s → 60 s).
    pub fn cooldown_config(&self) -> CooldownConfig {
        self.cooldown
    }
}

/// The profiles directory: `<config>/ollie/sandbox`.
#[derive(Debug, Clone)]
pub struct Profiles {
    dir: PathBuf,
}

impl Profiles {
    /// Profiles read from (and the default written to) `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Profiles { dir: dir.into() }
    }

    /// `$XDG_CONFIG_HOME/ollie/sandbox`, or `~/.config/ollie/sandbox`.
    pub fn default_dir() -> Option<PathBuf> {
        Some(crate::dirs::config_home()?.join("ollie").join("sandbox"))
    }

    /// The directory these profiles live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write `default.yaml` if it does not exist. Returns whether it wrote it.
    pub fn ensure_default(&self) -> Result<bool, SandboxError> {
        let target = self.dir.join("default.yaml");
        if target.exists() {
            return Ok(false);
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SandboxError::Io { path, source }
        };
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        // Write aside, then hard-link into place: never clobbers a profile
        // someone else wrote meanwhile, never exposes a half-written file.
        let tmp = self
            .dir
            .join(format!(".default.yaml.{}.tmp", std::process::id()));
        std::fs::write(&tmp, DEFAULT_PROFILE_YAML).map_err(io(&tmp))?;
        let linked = std::fs::hard_link(&tmp, &target);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                tracing::info!(path = %target.display(), "wrote default sandbox profile");
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io(&target)(e)),
        }
    }

    /// Names of the existing profiles (writing the default first if needed).
    pub fn names(&self) -> Result<Vec<String>, SandboxError> {
        self.ensure_default()?;
        let rd = std::fs::read_dir(&self.dir).map_err(|source| SandboxError::Io {
            path: self.dir.clone(),
            source,
        })?;
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let n = e.file_name().into_string().ok()?;
                let stem = n.strip_suffix(".yaml")?;
                (!stem.starts_with('.') && !stem.is_empty()).then(|| stem.to_string())
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Load and check profile `name` (`<dir>/<name>.yaml`).
    pub fn load(&self, name: &str) -> Result<Profile, SandboxError> {
        let valid = !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(SandboxError::InvalidName {
                name: name.to_string(),
            });
        }
        if name == "default" {
            self.ensure_default()?;
        }
        let path = self.dir.join(format!("{name}.yaml"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SandboxError::UnknownProfile {
                    name: name.to_string(),
                    dir: self.dir.clone(),
                    existing: self.names().unwrap_or_default(),
                });
            }
            Err(source) => return Err(SandboxError::Io { path, source }),
        };
        Profile::parse(name, &path, &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_profile_parses_and_is_written_once() {
        let d = tempfile::tempdir().unwrap();
        let ps = Profiles::new(d.path().join("sandbox"));
        let p = ps.load("default").unwrap();
        assert!(p.general.best_effort);
        assert!(p.network.unrestricted);
        assert!(p.filesystem.rw.iter().any(|s| s == "{CWD}"));
        assert!(p.advanced.add_exec);
        assert_eq!(ps.names().unwrap(), vec!["default".to_string()]);
        std::fs::write(d.path().join("sandbox/default.yaml"), "env: [X]\n").unwrap();
        assert!(!ps.ensure_default().unwrap());
        assert_eq!(ps.load("default").unwrap().env, vec!["X".to_string()]);
    }

    #[test]
    fn yaml_error_names_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        let ps = Profiles::new(d.path());
        std::fs::write(
            d.path().join("bad.yaml"),
            "general:\n  best_effort: false\nnetwork:\n  enabled: [oops\n",
        )
        .unwrap();
        let err = ps.load("bad").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("bad.yaml:"), "{msg}");
        assert!(
            matches!(err, SandboxError::Yaml { line: Some(_), .. }),
            "{msg}"
        );

        std::fs::write(d.path().join("typed.yaml"), "network:\n  enabled: maybe\n").unwrap();
        let err = ps.load("typed").unwrap_err();
        assert!(
            matches!(&err, SandboxError::Yaml { line: Some(2), .. }),
            "{err}"
        );
    }

    #[test]
    fn unknown_profile_lists_existing() {
        let d = tempfile::tempdir().unwrap();
        let ps = Profiles::new(d.path());
        std::fs::write(d.path().join("web.yaml"), "network: {unrestricted: true}\n").unwrap();
        let msg = ps.load("nope").unwrap_err().to_string();
        assert!(msg.contains("\"nope\""), "{msg}");
        assert!(msg.contains("default, web"), "{msg}");
        assert!(ps.load("../etc/passwd").is_err());
    }

    #[test]
    fn nulls_and_validation_section() {
        let y = "filesystem:\n  ro:\n  rw: [/tmp]\nnetwork:\nenv:\nvalidation:\n  deny:\n    - name: curl\n      pattern: 'curl\\s'\n  max_rejections: 2\n  window: 1m30s\n  cooldown: 10\n";
        let p = Profile::parse("t", Path::new("t.yaml"), y).unwrap();
        assert!(p.filesystem.ro.is_empty());
        assert_eq!(p.filesystem.rw, vec!["/tmp".to_string()]);
        assert!(p.network.enabled && !p.network.unrestricted);
        let cd = p.cooldown_config();
        assert_eq!(cd.max_rejections, 2);
        assert_eq!(cd.window, Duration::from_secs(90));
        assert_eq!(cd.cooldown, Duration::from_secs(10));
        assert!(
            p.validator()
                .check("curl x", &serde_json::json!({}))
                .is_err()
        );
        let bad = "validation:\n  deny: [{name: x, pattern: '(('}]\n";
        let err = Profile::parse("t", Path::new("t.yaml"), bad).unwrap_err();
        assert!(err.to_string().contains("t.yaml"), "{err}");
    }

    #[test]
    fn unknown_keys_are_found() {
        let k = unknown_keys("netwrk: {}\ngeneral: {best_effort: true, bestefort: 1}\nenv: []\n");
        assert_eq!(
            k,
            vec!["general.bestefort".to_string(), "netwrk".to_string()]
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
        assert!(parse_duration("5 parsecs").is_err());
    }
}
