//! The host a tool is resolved for: Go-style os/arch names, environment and
//! PATH, injected as a [`Host`] value so matching never reads globals.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `runtime.GOOS` for the host this binary was built for.
pub fn go_os() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    }
}

/// `runtime.GOARCH` for the host this binary was built for.
pub fn go_arch() -> &'static str {
    let little = cfg!(target_endian = "little");
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "arm" => "arm",
        "riscv64" => "riscv64",
        "loongarch64" => "loong64",
        "powerpc64" if little => "ppc64le",
        "powerpc64" => "ppc64",
        "powerpc" => "ppc",
        "mips" if little => "mipsle",
        "mips64" if little => "mips64le",
        "wasm32" => "wasm",
        other => other,
    }
}

/// Everything variant matching and command resolution ask about the host.
/// Files and PATH entries are checked on the real filesystem; os, arch,
/// environment and the PATH list itself are values, so tests can set them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Go's GOOS name (`linux`, `darwin`, …).
    pub os: String,
    /// Go's GOARCH name (`amd64`, `arm64`, …).
    pub arch: String,
    /// Environment variables (for `env`/`nenv`).
    pub env: BTreeMap<String, String>,
    /// `$PATH`, split; relative entries are ignored by lookups.
    pub path: Vec<PathBuf>,
    /// Listings of the PATH directories, when taken (see [`Host::indexed`]).
    index: Option<Arc<PathIndex>>,
}

/// For each file name, the PATH entries (by position) that contain it.
#[derive(Debug, Default, PartialEq, Eq)]
struct PathIndex(HashMap<String, Vec<usize>>);

impl Host {
    /// This process's host: real os/arch, a snapshot of the environment.
    pub fn current() -> Host {
        let env: BTreeMap<String, String> = std::env::vars_os()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect();
        let path = env.get("PATH").map(|p| split_path(p)).unwrap_or_default();
        Host {
            os: go_os().to_string(),
            arch: go_arch().to_string(),
            env,
            path,
            index: None,
        }
    }

    /// A host with the given os/arch, no environment and the given PATH.
    pub fn new(os: &str, arch: &str, path: Vec<PathBuf>) -> Host {
        Host {
            os: os.to_string(),
            arch: arch.to_string(),
            env: BTreeMap::new(),
            path,
            index: None,
        }
    }

    /// A copy that answers PATH lookups from one listing of each PATH
    /// directory, taken now: many lookups then cost one `stat` per hit.
    pub fn indexed(&self) -> Host {
        let mut idx: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, dir) in self
            .path
            .iter()
            .enumerate()
            .filter(|(_, d)| d.is_absolute())
        {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.filter_map(Result::ok) {
                if let Ok(name) = e.file_name().into_string() {
                    idx.entry(name).or_default().push(i);
                }
            }
        }
        Host {
            index: Some(Arc::new(PathIndex(idx))),
            ..self.clone()
        }
    }

    /// Sets an environment variable (builder style, for tests and remotes).
    pub fn with_env(mut self, key: &str, value: &str) -> Host {
        self.env.insert(key.to_string(), value.to_string());
        self
    }

    /// True when `name` is set to a non-empty value.
    pub fn env_nonempty(&self, name: &str) -> bool {
        self.env.get(name).is_some_and(|v| !v.is_empty())
    }

    /// Finds an executable by bare name in PATH (absolute entries only).
    pub fn which(&self, name: &str) -> Option<PathBuf> {
        if name.is_empty() || name.contains('/') {
            return None;
        }
        if let Some(PathIndex(idx)) = self.index.as_deref() {
            return idx
                .get(name)?
                .iter()
                .map(|&i| self.path[i].join(name))
                .find(|p| is_executable_file(p));
        }
        self.path
            .iter()
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .find(|p| is_executable_file(p))
    }

    /// `binary` match: an absolute path that is an executable file, or a
    /// bare name found in PATH.
    pub fn has_binary(&self, name: &str) -> bool {
        if Path::new(name).is_absolute() {
            is_executable_file(Path::new(name))
        } else {
            self.which(name).is_some()
        }
    }

    /// `file` match: a file or directory exists (symlinks followed).
    pub fn file_exists(&self, path: &str) -> bool {
        !path.is_empty() && Path::new(path).exists()
    }
}

/// Splits a `PATH`-style value.
pub fn split_path(p: &str) -> Vec<PathBuf> {
    p.split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// A regular file (after following symlinks) with an execute bit set.
pub fn is_executable_file(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_names_never_leak_rust_names() {
        assert!(!["x86_64", "aarch64", "macos"].contains(&go_arch()));
        assert!(!["x86_64", "aarch64", "macos"].contains(&go_os()));
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        assert_eq!((go_os(), go_arch()), ("linux", "amd64"));
    }

    #[test]
    fn which_and_binary() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "x").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let host = Host::new(
            "linux",
            "amd64",
            vec![PathBuf::from("rel"), dir.path().into()],
        );
        assert_eq!(host.which("tool"), Some(exe.clone()));
        assert_eq!(host.which("plain"), None);
        let indexed = host.indexed();
        assert_eq!(indexed.which("tool"), Some(exe.clone()));
        assert_eq!(indexed.which("plain"), None);
        assert_eq!(indexed.which("missing"), None);
        assert!(host.has_binary(exe.to_str().unwrap()));
        assert!(!host.has_binary(plain.to_str().unwrap()));
        assert!(host.file_exists(plain.to_str().unwrap()));
        assert!(!host.file_exists(""));
        let host = host.with_env("A", "1").with_env("B", "");
        assert!(host.env_nonempty("A"));
        assert!(!host.env_nonempty("B"));
        assert!(!host.env_nonempty("C"));
    }
}
