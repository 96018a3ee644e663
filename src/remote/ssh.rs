//! The system OpenSSH client: `ssh` for remote shell scripts and for the
//! socket forwarding, `scp` for files — the user's config, agent and known hosts apply.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use super::RemoteError;

/// How to reach the remote: destination plus the options every `ssh` and
/// `scp` invocation gets.
#[derive(Debug, Clone)]
pub struct Ssh {
    dest: String,
    /// Options common to ssh and scp (`-F FILE`, `-o K=V`…), user's first so
    /// they win over our defaults (OpenSSH keeps the first value it sees).
    common: Vec<OsString>,
}

/// Quote `s` for a POSIX shell.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._/-+=:,@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What the user says about the SSH connection.
#[derive(Debug, Clone, Default)]
pub struct SshConfig {
    /// `[user@]host` (or a `Host` alias of the user's ssh config).
    pub dest: String,
    /// `-F FILE`.
    pub config_file: Option<PathBuf>,
    /// `K=V` options, each passed as `-o K=V`.
    pub options: Vec<String>,
    /// `-o Port=N`.
    pub port: Option<u16>,
}

impl Ssh {
    pub fn new(cfg: &SshConfig) -> Result<Ssh, RemoteError> {
        if cfg.dest.is_empty()
            || cfg.dest.starts_with('-')
            || cfg.dest.contains(char::is_whitespace)
        {
            return Err(RemoteError::BadDestination(cfg.dest.clone()));
        }
        let mut common: Vec<OsString> = Vec::new();
        if let Some(f) = &cfg.config_file {
            common.push("-F".into());
            common.push(f.into());
        }
        for o in &cfg.options {
            common.push("-o".into());
            common.push(o.into());
        }
        if let Some(p) = cfg.port {
            common.push("-o".into());
            common.push(format!("Port={p}").into());
        }
        for o in ["BatchMode=yes", "ConnectTimeout=15"] {
            common.push("-o".into());
            common.push(o.into());
        }
        Ok(Ssh {
            dest: cfg.dest.clone(),
            common,
        })
    }

    pub fn dest(&self) -> &str {
        &self.dest
    }

    /// Run `script` with `sh -c` on the remote; its stdout on success.
    pub async fn script(&self, what: &str, script: &str) -> Result<String, RemoteError> {
        let mut cmd = Command::new("ssh");
        cmd.args(&self.common)
            .arg("-T")
            .arg(&self.dest)
            .arg(format!("sh -c {}", sh_quote(script)));
        tracing::debug!(what, "ssh");
        output(what, cmd).await
    }

    /// Copy local `files` (modes kept) into the existing remote directory `dir`.
    pub async fn copy(&self, what: &str, files: &[PathBuf], dir: &str) -> Result<(), RemoteError> {
        if files.is_empty() {
            return Ok(());
        }
        let mut cmd = Command::new("scp");
        cmd.arg("-q")
            .arg("-p")
            .args(&self.common)
            .arg("--")
            .args(files)
            .arg(format!("{}:{}/", self.dest, dir));
        tracing::debug!(what, n = files.len(), "scp");
        output(what, cmd).await.map(|_| ())
    }

    /// `ssh -N -L local:remote`: OpenSSH forwards connections to `local` to
    /// the remote Unix socket `remote` until it exits.
    pub fn forward(&self, local: &Path, remote: &str) -> Command {
        let mut cmd = Command::new("ssh");
        // Our own connection, never a multiplexed one, so its life is ours.
        for o in ["ControlMaster=no", "ControlPath=none"] {
            cmd.arg("-o").arg(o);
        }
        cmd.args(&self.common);
        for o in [
            "ExitOnForwardFailure=yes",
            "StreamLocalBindUnlink=yes",
            "StreamLocalBindMask=0177",
            "ServerAliveInterval=5",
            "ServerAliveCountMax=3",
        ] {
            cmd.arg("-o").arg(o);
        }
        let mut spec = OsString::from(local.as_os_str());
        spec.push(":");
        spec.push(remote);
        cmd.arg("-N")
            .arg("-T")
            .arg("-L")
            .arg(spec)
            .arg(&self.dest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        // The forwarder must not outlive us, even when we are SIGKILLed.
        #[cfg(target_os = "linux")]
        // SAFETY: between fork and exec the child only makes the prctl system
        // call (async-signal-safe); it touches no memory shared with the parent.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))
                .map_err(std::io::Error::from)
            });
        }
        cmd
    }
}

async fn output(what: &str, mut cmd: Command) -> Result<String, RemoteError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = cmd.output().await.map_err(|source| RemoteError::Spawn {
        what: what.to_string(),
        source,
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(RemoteError::Failed {
            what: what.to_string(),
            status: out.status.code(),
            stderr: tail.join("\n"),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("/a/b-c.d"), "/a/b-c.d");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn destinations_that_look_like_options_are_refused() {
        let mut c = SshConfig {
            dest: "-oProxyCommand=x".into(),
            ..SshConfig::default()
        };
        assert!(Ssh::new(&c).is_err());
        c.dest = "user@host".into();
        assert!(Ssh::new(&c).is_ok());
    }

    #[test]
    fn forward_command_line() {
        let s = Ssh::new(&SshConfig {
            dest: "h".into(),
            options: vec!["Port=2222".into()],
            ..SshConfig::default()
        })
        .unwrap();
        let cmd = s.forward(Path::new("/l.sock"), "/r.sock");
        let args: Vec<String> = cmd
            .as_std()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let pos = |x: &str| args.iter().position(|a| a == x).unwrap();
        assert!(pos("Port=2222") < pos("BatchMode=yes"));
        assert_eq!(args[pos("-L") + 1], "/l.sock:/r.sock");
        assert_eq!(args.last().unwrap(), "h");
        assert!(args.contains(&"ExitOnForwardFailure=yes".to_string()));
    }
}
