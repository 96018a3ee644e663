//! Completion messages: when a background process of a known session and
//! agent exits, write a system message to that agent's prompt file.

use std::path::PathBuf;
use std::time::Duration;

use crate::ninep::client::Client;
use crate::ninep::fs::OWRITE;

/// Where completion messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A 9P server on a Unix socket (`unix!/path/to/socket`).
    NineP(PathBuf),
    /// A directory where the agent namespace is mounted.
    Dir(PathBuf),
}

/// Why a `--notify` target was not understood.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error(
        "--notify {0:?}: use unix!/path/to/socket or a directory where the namespace is mounted"
    )]
    BadTarget(String),
    #[error("--notify-path {0:?} must contain {{session}} and {{agent}}")]
    BadTemplate(String),
}

impl std::str::FromStr for Target {
    type Err = NotifyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix!") {
            if path.is_empty() {
                return Err(NotifyError::BadTarget(s.to_string()));
            }
            return Ok(Target::NineP(PathBuf::from(path)));
        }
        if s.is_empty() || s.contains('!') {
            return Err(NotifyError::BadTarget(s.to_string()));
        }
        Ok(Target::Dir(PathBuf::from(s)))
    }
}

/// What one message says about a finished process.
#[derive(Debug, Clone)]
pub struct Completion {
    pub pid: u64,
    pub tool: String,
    pub session: String,
    pub agent: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub runtime: Duration,
    pub truncated: bool,
}

impl Completion {
    /// The one-paragraph system message.
    pub fn message(&self) -> String {
        let how = match (self.exit_code, self.signal) {
            (Some(c), _) => format!("exited with code {c}"),
            (None, Some(s)) => format!("was killed by signal {s}"),
            (None, None) => "ended".to_string(),
        };
        let secs = self.runtime.as_secs_f64();
        let trunc = if self.truncated {
            " Its output was longer than the capture limit and was truncated."
        } else {
            ""
        };
        format!(
            "[system] Background process {pid} ({tool}) {how} after {secs:.1} s.{trunc} \
             Read its output from proc/{pid}/out and its status from proc/{pid}/stat on toolsrv; \
             write `dismiss` to proc/{pid}/ctl when done.\n",
            pid = self.pid,
            tool = self.tool,
        )
    }
}

/// Delivers completion messages, retrying a few times; never panics or blocks callers.
#[derive(Debug, Clone)]
pub struct Notifier {
    target: Target,
    template: String,
    attempts: u32,
    backoff: Duration,
}

/// The default prompt path template.
pub const DEFAULT_TEMPLATE: &str = "session/{session}/agent/{agent}/prompt";

impl Notifier {
    pub fn new(target: Target, template: String) -> Result<Self, NotifyError> {
        if !template.contains("{session}") || !template.contains("{agent}") {
            return Err(NotifyError::BadTemplate(template));
        }
        Ok(Notifier {
            target,
            template,
            attempts: 4,
            backoff: Duration::from_millis(200),
        })
    }

    fn path(&self, c: &Completion) -> Option<String> {
        // Session and agent IDs become path elements: refuse anything that could walk elsewhere.
        let ok = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains('/');
        if !ok(&c.session) || !ok(&c.agent) {
            return None;
        }
        Some(
            self.template
                .replace("{session}", &c.session)
                .replace("{agent}", &c.agent),
        )
    }

    fn deliver_once(&self, path: &str, msg: &[u8]) -> Result<(), String> {
        match &self.target {
            Target::Dir(dir) => {
                use std::io::Write;
                let p = dir.join(path);
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map_err(|e| format!("{}: {e}", p.display()))?;
                f.write_all(msg)
                    .map_err(|e| format!("{}: {e}", p.display()))
            }
            Target::NineP(socket) => {
                let (mut c, _) = Client::open_session(socket, "toolsrv", "", None)
                    .map_err(|e| format!("{}: {e}", socket.display()))?;
                let fid = c
                    .walk_open(path, OWRITE)
                    .map_err(|e| format!("{path}: {e}"))?;
                let r = c.write(fid, msg).map_err(|e| format!("{path}: {e}"));
                let _ = c.clunk(fid);
                r.map(|_| ())
            }
        }
    }

    /// Deliver one message on a blocking thread, retrying with backoff; the
    /// outcome is only logged.
    pub fn notify(&self, c: Completion) {
        let Some(path) = self.path(&c) else {
            tracing::warn!(
                pid = c.pid,
                "not notifying: session or agent ID is not a plain name"
            );
            return;
        };
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("toolsrv-notify".into())
            .spawn(move || {
                let msg = c.message();
                let mut delay = me.backoff;
                for attempt in 1..=me.attempts {
                    match me.deliver_once(&path, msg.as_bytes()) {
                        Ok(()) => {
                            tracing::info!(pid = c.pid, path, "completion message delivered");
                            return;
                        }
                        Err(e) if attempt < me.attempts => {
                            tracing::debug!(pid = c.pid, attempt, error = %e, "completion message not delivered; retrying");
                            std::thread::sleep(delay);
                            delay *= 2;
                        }
                        Err(e) => {
                            tracing::warn!(pid = c.pid, path, error = %e, attempts = me.attempts, "completion message could not be delivered; giving up");
                        }
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a thread to deliver a completion message");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(
            "unix!/run/x.sock".parse::<Target>().unwrap(),
            Target::NineP("/run/x.sock".into())
        );
        assert_eq!(
            "/mnt/ollie".parse::<Target>().unwrap(),
            Target::Dir("/mnt/ollie".into())
        );
        assert!("unix!".parse::<Target>().is_err());
        assert!("tcp!host!564".parse::<Target>().is_err());
        assert!(Notifier::new(Target::Dir("/x".into()), "prompt".into()).is_err());
    }

    #[test]
    fn message_and_path() {
        let n = Notifier::new(Target::Dir("/x".into()), DEFAULT_TEMPLATE.into()).unwrap();
        let mut c = Completion {
            pid: 7,
            tool: "build".into(),
            session: "s1".into(),
            agent: "a1".into(),
            exit_code: Some(2),
            signal: None,
            runtime: Duration::from_millis(1500),
            truncated: false,
        };
        assert_eq!(n.path(&c).unwrap(), "session/s1/agent/a1/prompt");
        let m = c.message();
        assert!(
            m.contains("process 7 (build) exited with code 2 after 1.5 s"),
            "{m}"
        );
        assert!(m.contains("proc/7/out"));
        c.agent = "../etc".into();
        assert!(n.path(&c).is_none());
    }
}
