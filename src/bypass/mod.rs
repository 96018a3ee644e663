//! The bypass broker: approval requests, the credential gate for `sudo`
//! and the tool-facing bypass socket.
//!
//! A call that must leave the sandbox (its `.meta` says `bypass`/`elevated`/
//! `sudo`, or the call carries `bypass: true`) becomes a [`Plan`]; the
//! server runs [`Broker::gate`] inside the process task, which files a
//! pending [`Request`], waits for an observer to resolve it through
//! `bypass/pending` + `bypass/resolve` (or for it to expire), then, for
//! `sudo`, passes the credential gate ([`sudo`]). Tools inside the sandbox can
//! ask for single commands through the bypass socket ([`socket`]) with their
//! call's capability. Every decision goes to the JSON-lines [`Audit`] log.

mod audit;
mod broker;
mod gate;
pub mod socket;
pub mod sudo;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

pub use audit::{Audit, default_audit_path};
pub use broker::{Broker, Claims, Decision, ResolveError, Ticket};
pub use gate::Plan;
pub use socket::{Capabilities, CapabilityGuard, SocketHandle};

/// How long a pending request waits for a decision when nothing else is set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Server settings of the bypass path.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A pending request not resolved within this time is rejected.
    pub timeout: Duration,
    /// The JSON-lines audit log (`None`: [`default_audit_path`]).
    pub audit_log: Option<PathBuf>,
    /// The user `sudo` tools run as (`sudo -u`).
    pub sudo_user: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            timeout: DEFAULT_TIMEOUT,
            audit_log: None,
            sudo_user: "root".to_string(),
        }
    }
}

/// Why the bypass path could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BypassError {
    #[error("no place for the audit log: set XDG_STATE_HOME or HOME, or pass --audit-log PATH")]
    NoAuditPath,
    #[error("audit log {path}: {source}")]
    Audit {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bypass socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another server is already listening on {0}; stop it or choose another --listen path")]
    SocketLive(PathBuf),
}

/// What a pending request is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Approve running outside the sandbox.
    Bypass,
    /// A `sudo` password (resolve with `"password"`).
    Credential,
}

/// Which call asked, and from where.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AskedBy {
    /// `call` (the dispatcher, for a call that needs approval) or `tool`
    /// (a running tool through the bypass socket).
    pub origin: &'static str,
    /// The toolsrv PID of the call (`proc/<pid>`), once it has one.
    pub proc: Option<u64>,
    /// The OS process that connected to the bypass socket.
    pub os_pid: Option<u32>,
    pub uid: Option<u32>,
    pub tool: String,
    pub agent: String,
}

/// A request as observers read it from `bypass/pending`.
#[derive(Debug, Clone, Serialize)]
pub struct Request {
    /// Set by the broker when the request is filed.
    pub id: u64,
    pub kind: Kind,
    pub tool: String,
    pub agent: String,
    pub session: Option<String>,
    /// The command as shown to people.
    pub command: String,
    pub cwd: String,
    /// The environment the command gets (secret-looking values redacted).
    pub env: BTreeMap<String, String>,
    /// For `sudo` calls: the user the tool will run as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sudo_user: Option<String>,
    /// What the observer is asked.
    pub prompt: String,
    pub asked_by: AskedBy,
    /// Milliseconds left before the request expires, when it was read.
    pub expires_in_ms: u64,
}

#[cfg(test)]
impl Request {
    /// A request of `kind` for tool `t` of agent `a` running `/bin/t` in `/`.
    pub(crate) fn sample(kind: Kind) -> Request {
        Request {
            id: 0,
            kind,
            tool: "t".into(),
            agent: "a".into(),
            session: None,
            command: "/bin/t".into(),
            cwd: "/".into(),
            env: Default::default(),
            sudo_user: None,
            prompt: "p".into(),
            asked_by: AskedBy::default(),
            expires_in_ms: 0,
        }
    }
}

/// Names whose values are never shown to observers.
fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    [
        "SECRET",
        "TOKEN",
        "PASSWORD",
        "PASSWD",
        "KEY",
        "CREDENTIAL",
        "COOKIE",
        "CAPABILITY",
    ]
    .iter()
    .any(|s| n.contains(s))
}

/// The environment as shown in a request.
pub fn shown_env(env: &crate::exec::Env) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| {
            let k = k.to_string_lossy().into_owned();
            let v = if secret_name(&k) {
                "<redacted>".to_string()
            } else {
                v.to_string_lossy().into_owned()
            };
            (k, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn secret_values_are_redacted() {
        let env = vec![
            (OsString::from("PATH"), OsString::from("/bin")),
            (OsString::from("GITHUB_TOKEN"), OsString::from("ghp_x")),
            (OsString::from("toolsrv_secret"), OsString::from("s")),
            (
                OsString::from("OLLIE_BYPASS_CAPABILITY"),
                OsString::from("c"),
            ),
        ];
        let shown = shown_env(&env.into());
        assert_eq!(shown["PATH"], "/bin");
        assert_eq!(shown["GITHUB_TOKEN"], "<redacted>");
        assert_eq!(shown["toolsrv_secret"], "<redacted>");
        assert_eq!(shown["OLLIE_BYPASS_CAPABILITY"], "<redacted>");
    }
}
