//! Deployment steps on the remote: probe it, install the binary, copy tool
//! directories and sandbox profiles, and the scripts that start and stop its server.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::RemoteError;
use super::platform;
use super::ssh::{Ssh, sh_quote};

/// This binary's version, as `toolsrv --version` prints it.
pub fn version_line() -> String {
    format!("toolsrv {}", env!("CARGO_PKG_VERSION"))
}

/// Where things live under the remote directory (an absolute path there).
#[derive(Debug, Clone)]
pub struct Layout {
    pub dir: String,
}

impl Layout {
    pub fn bin(&self) -> String {
        format!("{}/bin/toolsrv-{}", self.dir, env!("CARGO_PKG_VERSION"))
    }
    pub fn tools(&self, i: usize) -> String {
        format!("{}/tools/{i}", self.dir)
    }
    pub fn sandbox(&self) -> String {
        format!("{}/sandbox", self.dir)
    }
    pub fn socket(&self) -> String {
        format!("{}/run/toolsrv.sock", self.dir)
    }
    pub fn pid_file(&self) -> String {
        format!("{}/run/toolsrv.pid", self.dir)
    }
    pub fn log(&self) -> String {
        format!("{}/serve.log", self.dir)
    }
}

/// What the probe learnt about the remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// GOOS/GOARCH names.
    pub os: String,
    pub arch: String,
    /// The remote directory, absolute.
    pub dir: String,
    /// `--version` of an installed binary of our version, if any.
    pub version: Option<String>,
    /// Its size in bytes.
    pub size: Option<u64>,
}

/// A shell expression for the remote directory as the user wrote it:
/// `~`, `~/x` and relative paths are taken from the remote's `$HOME`.
pub fn dir_expr(dir: &str) -> String {
    let rest = if dir == "~" {
        ""
    } else if let Some(r) = dir.strip_prefix("~/") {
        r
    } else if dir.starts_with('/') {
        return sh_quote(dir);
    } else {
        dir
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() {
        "\"$HOME\"".to_string()
    } else {
        format!("\"$HOME\"/{}", sh_quote(rest))
    }
}

/// Whether a remote path is plain enough for every scp mode (SFTP or the
/// legacy protocol, where the remote shell sees it).
fn plain_path(p: &str) -> bool {
    !p.is_empty()
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-+=:,@%~".contains(&b))
}

/// Parse the probe's `key=value` lines.
pub fn parse_probe(out: &str) -> Option<Probe> {
    let get = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    Some(Probe {
        os: platform::go_os(get("os")?),
        arch: platform::go_arch(get("arch")?),
        dir: get("dir")?.to_string(),
        version: get("version").map(str::to_string),
        size: get("size").and_then(|s| s.parse().ok()),
    })
}

/// Ask the remote for its platform, create the remote directory and look
/// at the binary installed there.
pub async fn probe(ssh: &Ssh, remote_dir: &str) -> Result<Probe, RemoteError> {
    let bin_name = format!("toolsrv-{}", env!("CARGO_PKG_VERSION"));
    let script = format!(
        r#"d={dir}
mkdir -p "$d" && cd "$d" || exit 1
echo "os=$(uname -s)"
echo "arch=$(uname -m)"
echo "dir=$(pwd)"
b="$d/bin/{bin_name}"
if [ -x "$b" ]; then
  echo "version=$("$b" --version 2>/dev/null)"
  echo "size=$(wc -c <"$b" | tr -d ' ')"
fi
"#,
        dir = dir_expr(remote_dir),
    );
    let out = ssh.script("probing the remote", &script).await?;
    let p = parse_probe(&out).ok_or_else(|| RemoteError::Probe(out.clone()))?;
    if !plain_path(&p.dir) {
        return Err(RemoteError::BadRemoteDir(p.dir));
    }
    // Unix socket paths are limited to ~104 bytes on every platform.
    let sock = Layout { dir: p.dir.clone() }.socket();
    if sock.len() > 100 {
        return Err(RemoteError::SocketPathTooLong(sock));
    }
    Ok(p)
}

/// Install `binary` as the remote's toolsrv unless the same version of the
/// same size is there already. Refuses a binary built for another platform
/// unless the user gave it (`explicit`). Returns whether it copied.
pub async fn install_binary(
    ssh: &Ssh,
    layout: &Layout,
    probe: &Probe,
    binary: &Path,
    explicit: bool,
) -> Result<bool, RemoteError> {
    let remote = format!("{}/{}", probe.os, probe.arch);
    if !explicit && remote != platform::local() {
        return Err(RemoteError::Platform {
            remote,
            local: platform::local(),
        });
    }
    let size = std::fs::metadata(binary)
        .map_err(|source| RemoteError::Local {
            path: binary.to_path_buf(),
            source,
        })?
        .len();
    let want = version_line();
    if probe.version.as_deref() == Some(want.as_str()) && probe.size == Some(size) {
        tracing::info!(bin = %layout.bin(), "remote toolsrv is up to date");
        return Ok(false);
    }
    tracing::info!(bin = %layout.bin(), size, "installing toolsrv on the remote");
    let bin_dir = format!("{}/bin", layout.dir);
    ssh.script(
        "creating the remote bin directory",
        &format!("mkdir -p {}", sh_quote(&bin_dir)),
    )
    .await?;
    // Copy under a temporary name (scp names the file after the source) and rename.
    let tmp_local_name = binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "toolsrv".into());
    let part = format!("{bin_dir}/.part-{}", std::process::id());
    ssh.script(
        "preparing the upload",
        &format!("rm -rf {p} && mkdir -m 700 {p}", p = sh_quote(&part)),
    )
    .await?;
    ssh.copy("copying the toolsrv binary", &[binary.to_path_buf()], &part)
        .await?;
    let script = format!(
        r#"t={part}/{name}; b={bin}
chmod 755 "$t" && mv -f "$t" "$b" && rmdir {part} && "$b" --version"#,
        part = sh_quote(&part),
        name = sh_quote(&tmp_local_name),
        bin = sh_quote(&layout.bin()),
    );
    let got = ssh.script("installing the toolsrv binary", &script).await?;
    if got.trim() != want {
        return Err(RemoteError::VersionMismatch {
            want,
            got: got.trim().to_string(),
        });
    }
    Ok(true)
}

/// The files of a tool directory that are deployed: `.meta` files and
/// executables (not dotfiles, not subdirectories).
pub fn tool_files(dir: &Path) -> Result<Vec<PathBuf>, RemoteError> {
    select_files(dir, |name, mode| {
        name.ends_with(".meta") || mode & 0o111 != 0
    })
}

/// The sandbox profiles of a directory (`*.yaml`, `*.yml`).
pub fn profile_files(dir: &Path) -> Result<Vec<PathBuf>, RemoteError> {
    select_files(dir, |name, _| {
        name.ends_with(".yaml") || name.ends_with(".yml")
    })
}

fn select_files(dir: &Path, keep: impl Fn(&str, u32) -> bool) -> Result<Vec<PathBuf>, RemoteError> {
    let err = |source| RemoteError::Local {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(err)? {
        let e = e.map_err(err)?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let Ok(md) = std::fs::metadata(e.path()) else {
            continue; // a dangling link
        };
        if md.is_file() && keep(&name, md.permissions().mode()) {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Replace the remote tool directories and profiles with the local ones.
pub async fn copy_config(
    ssh: &Ssh,
    layout: &Layout,
    tools: &[PathBuf],
    sandbox: Option<&Path>,
) -> Result<(), RemoteError> {
    let mut files = Vec::new();
    for d in tools {
        files.push(tool_files(d)?);
    }
    let profiles = sandbox.map(profile_files).transpose()?;
    let mut script = format!(
        "rm -rf {t} {s} && mkdir -p {t}",
        t = sh_quote(&format!("{}/tools", layout.dir)),
        s = sh_quote(&layout.sandbox()),
    );
    for i in 0..tools.len() {
        script.push_str(&format!(" && mkdir -p {}", sh_quote(&layout.tools(i))));
    }
    if profiles.is_some() {
        script.push_str(&format!(
            " && mkdir -m 700 -p {}",
            sh_quote(&layout.sandbox())
        ));
    }
    ssh.script("preparing the remote tool directories", &script)
        .await?;
    for (i, f) in files.iter().enumerate() {
        ssh.copy(
            &format!("copying tools from {}", tools[i].display()),
            f,
            &layout.tools(i),
        )
        .await?;
    }
    if let Some(p) = profiles {
        ssh.copy("copying sandbox profiles", &p, &layout.sandbox())
            .await?;
    }
    Ok(())
}

/// How the remote server is started.
#[derive(Debug, Clone)]
pub struct ServeSpec {
    /// How many `--tools` directories were deployed (0: the remote's own default).
    pub tool_dirs: usize,
    /// Whether profiles were deployed (then `--profiles-dir` points at them).
    pub profiles: bool,
    pub idle_timeout: String,
    /// `K=V` set in the server's environment.
    pub env: Vec<String>,
    /// More `serve` arguments.
    pub extra: Vec<String>,
}

/// A shell function `ours PID`: the process lives, is no zombie and (where
/// /proc exists) is the server of this socket — never kill a recycled PID.
fn prelude(layout: &Layout) -> String {
    format!(
        r#"s={s}; p={p}; l={l}
ours() {{
  kill -0 "$1" 2>/dev/null || return 1
  if [ -r "/proc/$1/status" ]; then
    grep -q '^State:[[:space:]]*Z' "/proc/$1/status" && return 1
    tr '\000' ' ' <"/proc/$1/cmdline" | grep -qF -- "$s" || return 1
  fi
  return 0
}}
"#,
        s = sh_quote(&layout.socket()),
        p = sh_quote(&layout.pid_file()),
        l = sh_quote(&layout.log()),
    )
}

/// Start the remote server unless it is running; prints `running` or `started`.
pub fn start_script(layout: &Layout, spec: &ServeSpec) -> String {
    let mut cmd = String::from("env");
    for kv in &spec.env {
        cmd.push(' ');
        cmd.push_str(&sh_quote(kv));
    }
    cmd.push_str(&format!(
        r#" "$@" nohup {bin} serve --listen "$s" --cwd "$HOME" --idle-timeout {idle}"#,
        bin = sh_quote(&layout.bin()),
        idle = sh_quote(&spec.idle_timeout),
    ));
    for i in 0..spec.tool_dirs {
        cmd.push_str(&format!(" --tools {}", sh_quote(&layout.tools(i))));
    }
    if spec.profiles {
        cmd.push_str(&format!(" --profiles-dir {}", sh_quote(&layout.sandbox())));
    }
    for a in &spec.extra {
        cmd.push(' ');
        cmd.push_str(&sh_quote(a));
    }
    format!(
        r#"{prelude}
if [ -f "$p" ] && ours "$(cat "$p")" && [ -S "$s" ]; then echo running; exit 0; fi
mkdir -p "$(dirname "$s")" && chmod 700 "$(dirname "$s")" || exit 1
rm -f "$s" "$p"
if command -v setsid >/dev/null 2>&1; then set -- setsid; else set --; fi
{cmd} </dev/null >>"$l" 2>&1 &
pid=$!
echo "$pid" >"$p"
i=0
# Only a process that is gone (or a zombie) counts as exited here: until the
# background shell has exec'd the server, its command line is not ours yet.
gone() {{
  if [ -r "/proc/$1/status" ]; then
    grep -q '^State:[[:space:]]*Z' "/proc/$1/status"
  else
    ! kill -0 "$1" 2>/dev/null
  fi
}}
while [ ! -S "$s" ]; do
  if gone "$pid"; then
    echo "the remote toolsrv serve exited; the end of $l:" >&2; tail -n 20 "$l" >&2
    rm -f "$p"; exit 1
  fi
  i=$((i+1))
  if [ "$i" -ge 150 ]; then
    echo "the remote toolsrv serve made no socket $s in 15 s; the end of $l:" >&2
    tail -n 20 "$l" >&2; exit 1
  fi
  sleep 0.1
done
echo started
"#,
        prelude = prelude(layout),
    )
}

/// Stop the remote server (TERM, KILL after 5 s) and remove its socket.
pub fn stop_script(layout: &Layout) -> String {
    format!(
        r#"{prelude}
if [ -f "$p" ]; then
  pid=$(cat "$p")
  if ours "$pid"; then
    kill "$pid" 2>/dev/null
    i=0
    while ours "$pid" && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i+1)); done
    if ours "$pid"; then kill -9 "$pid" 2>/dev/null; fi
  fi
fi
rm -f "$p" "$s"
echo stopped
"#,
        prelude = prelude(layout),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_dir_expressions() {
        assert_eq!(dir_expr("~"), "\"$HOME\"");
        assert_eq!(dir_expr("~/.cache/toolsrv"), "\"$HOME\"/.cache/toolsrv");
        assert_eq!(dir_expr("rel/x/"), "\"$HOME\"/rel/x");
        assert_eq!(dir_expr("/abs/a b"), "'/abs/a b'");
    }

    #[test]
    fn probe_output_is_parsed() {
        let p = parse_probe(
            "os=Linux\narch=aarch64\ndir=/home/u/.cache/toolsrv\nversion=toolsrv 0.1.0\nsize=123\n",
        )
        .unwrap();
        assert_eq!(p.os, "linux");
        assert_eq!(p.arch, "arm64");
        assert_eq!(p.dir, "/home/u/.cache/toolsrv");
        assert_eq!(p.version.as_deref(), Some("toolsrv 0.1.0"));
        assert_eq!(p.size, Some(123));
        let p = parse_probe("os=Linux\narch=x86_64\ndir=/d\n").unwrap();
        assert_eq!((p.version, p.size), (None, None));
        assert!(parse_probe("garbage").is_none());
        assert!(!plain_path("/a b"));
        assert!(plain_path("/root/.cache/toolsrv"));
    }

    #[test]
    fn deployed_files_are_metas_and_executables() {
        let d = tempfile::tempdir().unwrap();
        let w = |n: &str, mode: u32| {
            let p = d.path().join(n);
            std::fs::write(&p, "x").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        w("a.meta", 0o644);
        w("a", 0o755);
        w("README", 0o644);
        w(".hidden", 0o755);
        w("p.yaml", 0o600);
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(tool_files(d.path()).unwrap()), ["a", "a.meta"]);
        assert_eq!(names(profile_files(d.path()).unwrap()), ["p.yaml"]);
        assert!(tool_files(&d.path().join("missing")).is_err());
    }

    #[test]
    fn another_platform_is_refused_without_an_explicit_binary() {
        let ssh = Ssh::new(&super::super::SshConfig {
            dest: "unused.invalid".into(),
            ..Default::default()
        })
        .unwrap();
        let layout = Layout { dir: "/r".into() };
        let other = if crate::meta::go_arch() == "arm64" {
            "amd64"
        } else {
            "arm64"
        };
        let probe = Probe {
            os: crate::meta::go_os().into(),
            arch: other.into(),
            dir: "/r".into(),
            version: None,
            size: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let exe = std::env::current_exe().unwrap();
        let e = rt
            .block_on(install_binary(&ssh, &layout, &probe, &exe, false))
            .unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, RemoteError::Platform { .. }), "{msg}");
        assert!(
            msg.contains(&format!("{}/{other}", crate::meta::go_os())) && msg.contains("--binary"),
            "{msg}"
        );
    }

    #[test]
    fn the_start_script_passes_everything_to_serve() {
        let l = Layout { dir: "/r".into() };
        let s = start_script(
            &l,
            &ServeSpec {
                tool_dirs: 2,
                profiles: true,
                idle_timeout: "10m".into(),
                env: vec!["K=a b".into()],
                extra: vec!["--yolo".into()],
            },
        );
        assert!(s.contains("env 'K=a b' \"$@\" nohup /r/bin/toolsrv-"));
        assert!(
            s.contains("--tools /r/tools/0 --tools /r/tools/1 --profiles-dir /r/sandbox --yolo")
        );
        assert!(s.contains("--idle-timeout 10m"));
    }
}
