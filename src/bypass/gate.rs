//! The two gates a call that leaves the sandbox goes through: approval of
//! the bypass, then (for `sudo` tools) the credential gate.

use std::sync::Arc;

use super::{AskedBy, Broker, Decision, Kind, Request, sudo};
use crate::exec::Call;
use crate::protocol::ToolResult;

/// A call that runs only once approved: `call` is already unconfined (no
/// sandbox hook, unfiltered environment).
pub struct Plan {
    pub call: Call,
    /// The tool declares `sudo: true`.
    pub sudo: bool,
    pub agent: String,
    pub session: Option<String>,
    /// The command as shown to people.
    pub command: String,
}

impl Plan {
    fn request(&self, kind: Kind, proc: u64, sudo_user: Option<&str>) -> Request {
        let tool = &self.call.tool;
        let prompt = match (kind, sudo_user) {
            (Kind::Bypass, Some(u)) => format!(
                "Allow tool `{tool}` (agent {}) to run outside the sandbox, then as {u} through sudo?",
                self.agent
            ),
            (Kind::Bypass, None) => format!(
                "Allow tool `{tool}` (agent {}) to run outside the sandbox?",
                self.agent
            ),
            (Kind::Credential, u) => format!(
                "sudo password of {} to run tool `{tool}` as {}",
                server_user(),
                u.unwrap_or("root")
            ),
        };
        Request {
            id: 0,
            kind,
            tool: tool.clone(),
            agent: self.agent.clone(),
            session: self.session.clone(),
            command: self.command.clone(),
            cwd: self.call.cwd.display().to_string(),
            env: super::shown_env(&self.call.env),
            sudo_user: sudo_user.map(str::to_string),
            prompt,
            asked_by: AskedBy {
                origin: "call",
                proc: Some(proc),
                os_pid: None,
                uid: Some(rustix::process::getuid().as_raw()),
                tool: tool.clone(),
                agent: self.agent.clone(),
            },
            expires_in_ms: 0,
        }
    }
}

/// The user the server runs as (whose password `sudo` asks for).
fn server_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| format!("uid {}", rustix::process::getuid().as_raw()))
}

impl Broker {
    /// Run `plan` through the gates; the call to run, or the result the
    /// model sees. Dropping the future cancels whatever request is pending.
    pub async fn gate(self: Arc<Self>, plan: Plan, proc: u64) -> Result<Call, ToolResult> {
        let tool = plan.call.tool.clone();
        let refuse = |msg: String| ToolResult::error(format!("tool `{tool}`: {msg}"));
        let sudo_user = plan.sudo.then(|| self.settings.sudo_user.clone());
        let sudo_path = match &sudo_user {
            Some(_) => Some(sudo::find_sudo().ok_or_else(|| {
                refuse("it declares `sudo: true` but `sudo` is not installed on this host (not found in PATH)".into())
            })?),
            None => None,
        };

        // Gate 1: leave the sandbox.
        let mut ticket = self.submit(plan.request(Kind::Bypass, proc, sudo_user.as_deref()));
        let decision = ticket.wait().await;
        if let Some(why) = decision.rejection_text() {
            return Err(refuse(format!(
                "the request to run outside the sandbox was {why}; the tool did not run"
            )));
        }
        let (Some(user), Some(sudo_path)) = (sudo_user, sudo_path) else {
            tracing::info!(tool, proc, "bypass approved: running outside the sandbox");
            return Ok(plan.call);
        };

        // Gate 2: credentials, unless sudo needs none.
        let nopasswd = sudo::nopasswd(&sudo_path, &user)
            .await
            .map_err(|e| refuse(format!("the sudo check failed: {e}")))?;
        let mut call = plan.call;
        if nopasswd {
            tracing::info!(tool, proc, user, "sudo needs no password");
            call.command = sudo::wrap_nopasswd(&sudo_path, &user, &call.command);
            return Ok(call);
        }
        let req = Plan { call, ..plan };
        let mut ticket = self.submit(req.request(Kind::Credential, proc, Some(&user)));
        let decision = ticket.wait().await;
        let mut call = req.call;
        match decision {
            Decision::Approved {
                password: Some(password),
                approver,
            } => {
                let (command, hook) =
                    sudo::wrap_with_password(&sudo_path, &user, &call.command, &password)
                        .map_err(|e| refuse(format!("cannot pass the password to sudo: {e}")))?;
                drop(password);
                tracing::info!(
                    tool,
                    proc,
                    user,
                    approver,
                    "credentials supplied; running through sudo -S"
                );
                call.command = command;
                call.pre_exec = Some(hook);
                Ok(call)
            }
            d => Err(refuse(format!(
                "the sudo credential request was {}; the tool did not run",
                d.rejection_text()
                    .unwrap_or_else(|| "approved without a password".into())
            ))),
        }
    }
}
