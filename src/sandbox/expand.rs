//! Path templates in profiles: `{CWD}`, `{HOME}`, `{TMPDIR}`, XDG variables,
//! `{OLLIE_CFG_PATH}`, `{OLLIE_DATA_PATH}`, any `{ENVVAR}` and a leading `~`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What path templates expand against, plus test-only knobs.
#[derive(Debug, Clone)]
pub struct ExpandContext {
    /// The tool's working directory (`{CWD}`; relative paths are joined to it).
    pub cwd: PathBuf,
    /// `{HOME}` and `~`; `None` makes templates using it skip their path.
    pub home: Option<PathBuf>,
    /// `{TMPDIR}`; `None` falls back to `$TMPDIR`, then `/tmp`.
    pub tmpdir: Option<PathBuf>,
    /// Environment used for XDG variables and any other `{ENVVAR}` (shared:
    /// [`ExpandContext::with_cwd`] copies a context cheaply).
    pub env: Arc<HashMap<String, OsString>>,
    /// Pretend the kernel offers at most this Landlock ABI (tests; 0 = none).
    pub max_abi: Option<u32>,
}

impl ExpandContext {
    /// A context from an explicit environment; `HOME`/`TMPDIR` are taken from it.
    pub fn new(
        cwd: impl Into<PathBuf>,
        env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Self {
        let env: HashMap<String, OsString> = env
            .into_iter()
            .filter_map(|(k, v)| k.into_string().ok().map(|k| (k, v)))
            .collect();
        let nonempty = |k: &str| env.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        ExpandContext {
            cwd: cwd.into(),
            home: nonempty("HOME"),
            tmpdir: nonempty("TMPDIR"),
            env: Arc::new(env),
            max_abi: None,
        }
    }

    /// A context from this process's environment.
    pub fn from_process(cwd: impl Into<PathBuf>) -> Self {
        Self::new(cwd, std::env::vars_os())
    }

    /// The same context for another working directory (shares the environment).
    pub fn with_cwd(&self, cwd: impl Into<PathBuf>) -> Self {
        ExpandContext {
            cwd: cwd.into(),
            ..self.clone()
        }
    }

    /// Pretend the kernel offers at most Landlock ABI `abi` (0 = no Landlock).
    pub fn with_max_abi(mut self, abi: u32) -> Self {
        self.max_abi = Some(abi);
        self
    }

    fn env_path(&self, name: &str) -> Option<PathBuf> {
        self.env
            .get(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    fn home_join(&self, rel: &str) -> Option<PathBuf> {
        self.home.as_ref().map(|h| h.join(rel))
    }

    /// The value of one template variable, `None` when it has none.
    pub fn var(&self, name: &str) -> Option<PathBuf> {
        match name {
            "CWD" => Some(self.cwd.clone()),
            "HOME" => self.home.clone(),
            "TMPDIR" => self
                .tmpdir
                .clone()
                .or_else(|| self.env_path("TMPDIR"))
                .or_else(|| Some(PathBuf::from("/tmp"))),
            "XDG_CONFIG_HOME" => self.env_path(name).or_else(|| self.home_join(".config")),
            "XDG_DATA_HOME" => self
                .env_path(name)
                .or_else(|| self.home_join(".local/share")),
            "XDG_CACHE_HOME" => self.env_path(name).or_else(|| self.home_join(".cache")),
            "XDG_STATE_HOME" => self
                .env_path(name)
                .or_else(|| self.home_join(".local/state")),
            "OLLIE_CFG_PATH" => self.var("XDG_CONFIG_HOME").map(|p| p.join("ollie")),
            "OLLIE_DATA_PATH" => self.var("XDG_DATA_HOME").map(|p| p.join("ollie")),
            other => self.env_path(other),
        }
    }

    /// Expand one template. `Ok(None)`: a variable it uses has no value, so the
    /// path is skipped. `Err`: the template itself is malformed.
    pub fn expand(&self, template: &str) -> Result<Option<PathBuf>, String> {
        let mut out = String::new();
        let mut rest = template;
        if let Some(after) = rest.strip_prefix('~') {
            if !(after.is_empty() || after.starts_with('/')) {
                return Err(format!(
                    "{template:?}: only `~` or `~/…` is supported, not `~user`"
                ));
            }
            let Some(home) = &self.home else {
                return Ok(None);
            };
            out.push_str(&home.to_string_lossy());
            rest = after;
        }
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after
                .find('}')
                .ok_or_else(|| format!("{template:?}: unterminated `{{`"))?;
            let name = &after[..close];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("{template:?}: bad variable name {name:?}"));
            }
            match self.var(name) {
                Some(v) => out.push_str(&v.to_string_lossy()),
                None => return Ok(None),
            }
            rest = &after[close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("{template:?}: stray `}}`"));
        }
        out.push_str(rest);
        if out.is_empty() {
            return Err("empty path".to_string());
        }
        let p = Path::new(&out);
        Ok(Some(if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.cwd.join(p)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ExpandContext {
        ExpandContext::new(
            "/work",
            [
                ("HOME".into(), "/home/u".into()),
                ("FOO".into(), "/opt/foo".into()),
                ("XDG_DATA_HOME".into(), "/data".into()),
            ],
        )
    }

    #[test]
    fn expands_variables() {
        let c = ctx();
        let e = |t: &str| c.expand(t).unwrap().map(|p| p.display().to_string());
        assert_eq!(e("{CWD}").as_deref(), Some("/work"));
        assert_eq!(e("{HOME}/.cargo").as_deref(), Some("/home/u/.cargo"));
        assert_eq!(e("~").as_deref(), Some("/home/u"));
        assert_eq!(e("~/x").as_deref(), Some("/home/u/x"));
        assert_eq!(e("{XDG_CONFIG_HOME}").as_deref(), Some("/home/u/.config"));
        assert_eq!(
            e("{OLLIE_CFG_PATH}/tools").as_deref(),
            Some("/home/u/.config/ollie/tools")
        );
        assert_eq!(e("{OLLIE_DATA_PATH}").as_deref(), Some("/data/ollie"));
        assert_eq!(e("{XDG_CACHE_HOME}").as_deref(), Some("/home/u/.cache"));
        assert_eq!(
            e("{XDG_STATE_HOME}").as_deref(),
            Some("/home/u/.local/state")
        );
        assert_eq!(e("{FOO}/bin").as_deref(), Some("/opt/foo/bin"));
        assert_eq!(e("{TMPDIR}").as_deref(), Some("/tmp"));
        assert_eq!(e("rel/dir").as_deref(), Some("/work/rel/dir"));
        assert_eq!(e("{XDG_RUNTIME_DIR}"), None);
        assert_eq!(e("{NOPE}/x"), None);
    }

    #[test]
    fn rejects_malformed() {
        let c = ctx();
        assert!(c.expand("{HOME").is_err());
        assert!(c.expand("{HO ME}").is_err());
        assert!(c.expand("~other/x").is_err());
        assert!(c.expand("a}").is_err());
    }
}
