//! Tool metadata: `.meta` parsing, variants, merging, command resolution and
//! discovery over `OLLIE_TOOLS_PATH`.
//!
//! The flow is: [`Discoverer`] lists the tools directories and reads each
//! `<name>.meta` through [`parse_meta`] (syntax and field types) and the
//! linter (schemas, variants, tiers); the result is cached per file. For this
//! host ([`Host`]) the first matching variant is merged over the top-level
//! fields and the command is resolved, giving a [`Tool`]. Everything wrong
//! along the way becomes a [`Problem`]; nothing stops the other tools.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

mod discover;
mod host;
mod lint;
mod locate;
mod raw;
mod resolve;
mod tool;
mod variant;

pub use discover::{Catalog, DiscoverStats, Discoverer, FileReport, check_file};
pub use host::{Host, go_arch, go_os};
pub use lint::{GO_ARCHES, GO_OSES};
pub use raw::{MatchValue, RawFields, RawMeta, RawVariant, parse_meta};
pub use tool::{ArgsError, Tool};

/// What running a tool means once resolution is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// An executable file, run directly.
    Exec(PathBuf),
    /// A shell command from `cmd`, run with `sh -c`.
    Shell(String),
}

/// Context retention tier of a tool (`hot` by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Always kept in context.
    #[default]
    Hot,
    /// Kept for a while.
    Warm,
    /// Dropped first.
    Cold,
}

impl Tier {
    /// Parses `hot`, `warm` or `cold`; the empty string means the default.
    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "" | "hot" => Some(Tier::Hot),
            "warm" => Some(Tier::Warm),
            "cold" => Some(Tier::Cold),
            _ => None,
        }
    }

    /// The `.meta` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Hot => "hot",
            Tier::Warm => "warm",
            Tier::Cold => "cold",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How bad a [`Problem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Must be fixed: the file, a variant or the command is broken.
    Error,
    /// Probably a mistake, the tool still works.
    Warning,
    /// For information (e.g. a tool shadowed by an earlier directory).
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

/// Something wrong with a `.meta` file or a tool, with a position when known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The `.meta` file (or directory) concerned.
    pub path: PathBuf,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// What is wrong, and where possible what to do.
    pub message: String,
    /// How bad it is.
    pub severity: Severity,
}

impl Problem {
    /// A problem without a position.
    pub fn new(path: &Path, severity: Severity, message: impl Into<String>) -> Problem {
        Problem {
            path: path.to_path_buf(),
            line: None,
            column: None,
            message: message.into(),
            severity,
        }
    }

    /// An error without a position.
    pub fn error(path: &Path, message: impl Into<String>) -> Problem {
        Problem::new(path, Severity::Error, message)
    }

    /// A warning without a position.
    pub fn warning(path: &Path, message: impl Into<String>) -> Problem {
        Problem::new(path, Severity::Warning, message)
    }

    /// Sets the position.
    pub fn at(mut self, pos: Option<(usize, usize)>) -> Problem {
        if let Some((line, column)) = pos {
            self.line = Some(line);
            self.column = Some(column);
        }
        self
    }
}

impl fmt::Display for Problem {
    /// `path:line:col: severity: message`, like compilers print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        write!(f, ": {}: {}", self.severity, self.message)
    }
}

/// The tools directories: `OLLIE_TOOLS_PATH` (colon-separated), else
/// `$XDG_CONFIG_HOME/ollie/tools`, else `~/.config/ollie/tools`.
pub fn tools_path_from_env() -> Vec<PathBuf> {
    let get = |k: &str| std::env::var(k).ok();
    tools_path_from(
        get("OLLIE_TOOLS_PATH").as_deref(),
        get("XDG_CONFIG_HOME").as_deref(),
        get("HOME").as_deref(),
    )
}

/// [`tools_path_from_env`] with the variables given explicitly.
pub fn tools_path_from(
    ollie_tools_path: Option<&str>,
    xdg_config_home: Option<&str>,
    home: Option<&str>,
) -> Vec<PathBuf> {
    if let Some(list) = ollie_tools_path.filter(|s| !s.is_empty()) {
        return list
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
    }
    let config = match xdg_config_home.filter(|s| Path::new(s).is_absolute()) {
        Some(xdg) => PathBuf::from(xdg),
        None => PathBuf::from(home.unwrap_or("/")).join(".config"),
    };
    vec![config.join("ollie").join("tools")]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_path_precedence() {
        assert_eq!(
            tools_path_from(Some("/a::/b"), Some("/x"), Some("/h")),
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(
            tools_path_from(None, Some("/x"), Some("/h")),
            vec![PathBuf::from("/x/ollie/tools")]
        );
        assert_eq!(
            tools_path_from(Some(""), Some("relative"), Some("/h")),
            vec![PathBuf::from("/h/.config/ollie/tools")]
        );
    }

    #[test]
    fn tier_parse() {
        assert_eq!(Tier::parse("warm"), Some(Tier::Warm));
        assert_eq!(Tier::parse(""), Some(Tier::Hot));
        assert_eq!(Tier::parse("lukewarm"), None);
    }

    #[test]
    fn problem_display() {
        let p = Problem::error(Path::new("/t/x.meta"), "bad").at(Some((3, 7)));
        assert_eq!(p.to_string(), "/t/x.meta:3:7: error: bad");
        let p = Problem::warning(Path::new("/t/x.meta"), "meh");
        assert_eq!(p.to_string(), "/t/x.meta: warning: meh");
    }
}
