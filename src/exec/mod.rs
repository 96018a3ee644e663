//! One tool call: JSON on stdin, output capture with limits, timeout and
//! cancellation of the whole process group, and the `ToolResult`.
//!
//! [`run`] spawns the tool in its own process group with a cleared
//! environment, writes the arguments to its stdin, drains stdout and stderr
//! into a shared [`Output`], and ends the whole group on timeout, on
//! cancellation, or when the `run` future is dropped (SIGTERM, then SIGKILL
//! after [`Limits::kill_grace`]). The child is always reaped.

mod child;
mod env;
mod group;
mod launch;
mod output;
mod result;
mod run;
mod spawn;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::meta::Command;
use crate::protocol::ToolResult;
use crate::sandbox::ChildPlan;

pub use env::{Env, Vars};
pub use group::group_alive;
pub use output::{Output, Stream};
pub use result::cut_utf8;
pub use run::run;

/// Hook run in the child between fork and exec, after the child has been put
/// in its own process group (the sandbox applies its ruleset here).
///
/// It runs in a forked copy of a multi-threaded process: it must not
/// allocate, lock, or do anything else that is not async-signal-safe. Only
/// the errno of an error it returns reaches the caller.
pub type PreExec = Box<dyn FnMut() -> std::io::Result<()> + Send + Sync>;

/// Output, time and termination limits of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of output kept per call (stdout+stderr, and stdout alone).
    pub output_cap: usize,
    /// Bytes of text the model sees in the result.
    pub model_text: usize,
    /// Time between SIGTERM and SIGKILL when a call is ended.
    pub kill_grace: Duration,
    /// Timeout of a call that does not ask for one.
    pub default_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            output_cap: 4 << 20,
            model_text: 32 << 10,
            kill_grace: Duration::from_secs(2),
            default_timeout: Duration::from_secs(120),
        }
    }
}

/// Everything needed to run one tool call.
pub struct Call {
    /// Tool name, for messages.
    pub tool: String,
    /// What to run.
    pub command: Command,
    /// The JSON object written to the tool's stdin.
    pub args: serde_json::Value,
    /// Working directory of the child.
    pub cwd: PathBuf,
    /// The child's whole environment (nothing else is inherited).
    pub env: Env,
    /// Call timeout; `None` means `limits.default_timeout`.
    pub timeout: Option<Duration>,
    pub limits: Limits,
    /// Run in the child before exec. Makes std fork the whole process
    /// instead of the vfork-style spawn: use `confine` for the sandbox.
    pub pre_exec: Option<PreExec>,
    /// The sandbox the child applies to itself before exec (Landlock
    /// ruleset, seccomp program, `no_new_privs`); `None` runs unconfined.
    pub confine: Option<ChildPlan>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Arguments and environment may hold secrets: not shown.
        f.debug_struct("Call")
            .field("tool", &self.tool)
            .field("command", &self.command)
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .field("limits", &self.limits)
            .field("pre_exec", &self.pre_exec.is_some())
            .field("confine", &self.confine.is_some())
            .finish_non_exhaustive()
    }
}

/// How the tool's main process ended. Both `None` when it never ran or its
/// status could not be collected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    /// Exited with status 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// What a finished call produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub result: ToolResult,
    pub status: ExitInfo,
    /// Ended because its timeout passed.
    pub timed_out: bool,
    /// Ended because it was cancelled.
    pub cancelled: bool,
    /// Output went past `output_cap` and some of it was dropped.
    pub truncated: bool,
    /// Wall time from spawn request to the end of the call.
    pub duration: Duration,
}

impl Outcome {
    /// A call that ended without a process of its own (refused, not
    /// started, or abandoned): `output` is marked finished.
    pub fn without_process(
        result: ToolResult,
        output: &Output,
        cancelled: bool,
        duration: Duration,
    ) -> Outcome {
        output.finish();
        Outcome {
            result,
            status: ExitInfo::default(),
            timed_out: false,
            cancelled,
            truncated: output.truncated(),
            duration,
        }
    }
}

/// The environment of a tool: `base` (shared, not copied) plus
/// `OLLIE_TOOLS_PATH`, `PWD`, and `OLLIE_SESSION_ID` / `OLLIE_AGENT_ID` when
/// given (these replace any value `base` has for them).
pub fn tool_env(
    base: &Vars,
    tools_path: &str,
    cwd: &Path,
    session: Option<&str>,
    agent: Option<&str>,
) -> Env {
    let mut env = Env::new(base.clone());
    env.set("OLLIE_TOOLS_PATH", tools_path);
    env.set("PWD", cwd.as_os_str());
    if let Some(s) = session {
        env.set("OLLIE_SESSION_ID", s);
    }
    if let Some(a) = agent {
        env.set("OLLIE_AGENT_ID", a);
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn tool_env_sets_and_replaces() {
        let base: Vars = vec![
            (OsString::from("PATH"), OsString::from("/bin")),
            (OsString::from("PWD"), OsString::from("/old")),
            (OsString::from("OLLIE_AGENT_ID"), OsString::from("stale")),
        ]
        .into();
        let env = tool_env(&base, "/t1:/t2", Path::new("/work"), Some("s1"), None);
        let get = |k: &str| {
            let v: Vec<_> = env.iter().filter(|(n, _)| *n == k).collect();
            assert!(v.len() <= 1, "{k} duplicated");
            v.first().map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("PATH").as_deref(), Some("/bin"));
        assert_eq!(get("PWD").as_deref(), Some("/work"));
        assert_eq!(get("OLLIE_TOOLS_PATH").as_deref(), Some("/t1:/t2"));
        assert_eq!(get("OLLIE_SESSION_ID").as_deref(), Some("s1"));
        assert_eq!(get("OLLIE_AGENT_ID").as_deref(), Some("stale"));
    }

    #[test]
    fn default_limits() {
        let l = Limits::default();
        assert_eq!(l.output_cap, 4 * 1024 * 1024);
        assert_eq!(l.model_text, 32 * 1024);
        assert_eq!(l.default_timeout, Duration::from_secs(120));
    }
}
