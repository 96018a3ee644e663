//! Command resolution for a tool `name` in tools directory D: the
//! co-located `D/name`, then `cmd` (absolute, bare name via PATH, or shell),
//! then `name` through PATH.

use std::path::Path;

use super::Command;
use super::Host;
use super::host::is_executable_file;

/// The result of resolving one tool on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// What to run; `None` when nothing could be found.
    pub command: Option<Command>,
    /// Why nothing could be found, or why `cmd` was not used.
    pub error: Option<String>,
}

/// Characters that make `cmd` a shell command rather than a file name.
fn is_shell_syntax(c: char) -> bool {
    c.is_whitespace() || c.is_control() || "|&;<>()$`\\\"'*?[]#~={}!%".contains(c)
}

/// How a `cmd` value is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdKind {
    /// `/usr/bin/rg`
    Absolute,
    /// `rg`
    BareName,
    /// Anything else: `rg --json`, `input=$(cat); …`, `./x`.
    Shell,
}

/// Classifies a `cmd` value.
pub fn cmd_kind(cmd: &str) -> CmdKind {
    if cmd.is_empty() || cmd.chars().any(is_shell_syntax) {
        CmdKind::Shell
    } else if cmd.starts_with('/') {
        CmdKind::Absolute
    } else if !cmd.contains('/') {
        CmdKind::BareName
    } else {
        CmdKind::Shell
    }
}

/// Resolves tool `name` from directory `dir` with optional `cmd`.
pub fn resolve(name: &str, dir: &Path, cmd: Option<&str>, host: &Host) -> Resolved {
    let found = |c: Command| Resolved {
        command: Some(c),
        error: None,
    };
    // 1. A co-located executable always wins.
    let local = dir.join(name);
    if is_executable_file(&local) {
        return found(Command::Exec(local));
    }
    // 2. `cmd`.
    let mut missing_cmd = None;
    if let Some(cmd) = cmd.map(str::trim).filter(|c| !c.is_empty()) {
        match cmd_kind(cmd) {
            CmdKind::Absolute => {
                let p = Path::new(cmd);
                if is_executable_file(p) {
                    return found(Command::Exec(p.to_path_buf()));
                }
                let why = if p.exists() {
                    "is not an executable file"
                } else {
                    "does not exist"
                };
                return Resolved {
                    command: None,
                    error: Some(format!("`cmd` {cmd} {why}")),
                };
            }
            CmdKind::BareName => match host.which(cmd) {
                Some(p) => return found(Command::Exec(p)),
                None => missing_cmd = Some(cmd),
            },
            CmdKind::Shell => return found(Command::Shell(cmd.to_string())),
        }
    }
    // 3. `name` through PATH.
    if let Some(p) = host.which(name) {
        return found(Command::Exec(p));
    }
    let error = match missing_cmd {
        Some(cmd) => format!(
            "nothing to run: `cmd` \"{cmd}\" is not in PATH, there is no executable {} and `{name}` is not in PATH either",
            local.display()
        ),
        None => format!(
            "nothing to run: no executable {}, no `cmd`, and `{name}` is not in PATH; add one of them",
            local.display()
        ),
    };
    Resolved {
        command: None,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    fn exe(p: &Path) -> PathBuf {
        std::fs::write(p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.to_path_buf()
    }

    struct Fx {
        _t: tempfile::TempDir,
        tools: PathBuf,
        host: Host,
        bin: PathBuf,
    }

    fn fx() -> Fx {
        let t = tempfile::tempdir().unwrap();
        let tools = t.path().join("tools");
        let bin = t.path().join("bin");
        std::fs::create_dir_all(&tools).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        let host = Host::new("linux", "amd64", vec![bin.clone()]);
        Fx {
            _t: t,
            tools,
            host,
            bin,
        }
    }

    #[test]
    fn classify() {
        assert_eq!(cmd_kind("/usr/bin/rg"), CmdKind::Absolute);
        assert_eq!(cmd_kind("rg"), CmdKind::BareName);
        assert_eq!(cmd_kind("clang-format"), CmdKind::BareName);
        assert_eq!(cmd_kind("rg --json"), CmdKind::Shell);
        assert_eq!(cmd_kind("/usr/bin/rg --json"), CmdKind::Shell);
        assert_eq!(cmd_kind("input=$(cat); echo"), CmdKind::Shell);
        assert_eq!(cmd_kind("a|b"), CmdKind::Shell);
        assert_eq!(cmd_kind("./x"), CmdKind::Shell);
    }

    #[test]
    fn co_located_beats_cmd_beats_path() {
        let f = fx();
        let in_path = exe(&f.bin.join("t"));
        let other = exe(&f.bin.join("other"));
        // Only PATH: step 3.
        let r = resolve("t", &f.tools, None, &f.host);
        assert_eq!(r.command, Some(Command::Exec(in_path.clone())));
        // cmd beats PATH: step 2.
        let r = resolve("t", &f.tools, Some("other"), &f.host);
        assert_eq!(r.command, Some(Command::Exec(other.clone())));
        // Co-located beats cmd: step 1.
        let local = exe(&f.tools.join("t"));
        let r = resolve("t", &f.tools, Some("other"), &f.host);
        assert_eq!(r.command, Some(Command::Exec(local)));
        let r = resolve("t", &f.tools, Some("echo hi"), &f.host);
        assert!(matches!(r.command, Some(Command::Exec(_))));
    }

    #[test]
    fn non_executable_co_located_file_is_ignored() {
        let f = fx();
        std::fs::write(f.tools.join("t"), "data").unwrap();
        std::fs::create_dir(f.tools.join("d")).unwrap();
        let r = resolve("t", &f.tools, Some("echo"), &f.host);
        assert!(r.command.is_none(), "echo is not in this PATH: {r:?}");
        assert!(resolve("d", &f.tools, None, &f.host).command.is_none());
    }

    #[test]
    fn absolute_cmd() {
        let f = fx();
        let abs = exe(&f.bin.join("real"));
        let r = resolve("t", &f.tools, Some(abs.to_str().unwrap()), &f.host);
        assert_eq!(r.command, Some(Command::Exec(abs)));
        let r = resolve("t", &f.tools, Some("/nonexistent/rg"), &f.host);
        assert_eq!(r.command, None);
        assert!(r.error.unwrap().contains("does not exist"));
        std::fs::write(f.bin.join("plain"), "x").unwrap();
        let plain = f.bin.join("plain");
        let r = resolve("t", &f.tools, Some(plain.to_str().unwrap()), &f.host);
        assert!(r.error.unwrap().contains("not an executable"));
    }

    #[test]
    fn bare_name_via_path_and_fall_through() {
        let f = fx();
        let r = resolve("t", &f.tools, Some("rg"), &f.host);
        assert_eq!(r.command, None);
        let e = r.error.unwrap();
        assert!(e.contains("\"rg\" is not in PATH"), "{e}");
        let rg = exe(&f.bin.join("rg"));
        assert_eq!(
            resolve("t", &f.tools, Some("rg"), &f.host).command,
            Some(Command::Exec(rg))
        );
        // Bare cmd missing, but the tool name is in PATH: step 3 applies.
        let t = exe(&f.bin.join("t"));
        let r = resolve("t", &f.tools, Some("missing"), &f.host);
        assert_eq!(r.command, Some(Command::Exec(t)));
    }

    #[test]
    fn shell_cmd_and_nothing_to_run() {
        let f = fx();
        let cmd = "input=$(cat); echo \"$input\"";
        let r = resolve("t", &f.tools, Some(cmd), &f.host);
        assert_eq!(r.command, Some(Command::Shell(cmd.into())));
        let r = resolve("t", &f.tools, None, &f.host);
        assert_eq!(r.command, None);
        assert!(r.error.unwrap().starts_with("nothing to run"));
    }
}
