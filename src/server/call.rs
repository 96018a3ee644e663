//! From a `proc/new` payload to a running process: token, agent registry,
//! argument coercion and validation, dispatch fields, environment.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use super::Server;
use crate::exec::Call;
use crate::ninep::fs::FsError;
use crate::proc::{Proc, ProcInfo, Request};
use crate::protocol::{self, ToolResult};

/// Cancels a process when the request waiting for it goes away (flush or clunk).
struct CancelOnDrop(Option<Arc<Proc>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take().filter(|p| p.finished().is_none()) {
            tracing::info!(pid = p.id, tool = %p.info.tool, "request cancelled; stopping process");
            p.cancel();
        }
    }
}

fn result_bytes(r: &ToolResult) -> Result<Arc<[u8]>, FsError> {
    let mut v = serde_json::to_vec(r).map_err(|e| FsError(e.to_string()))?;
    v.push(b'\n');
    Ok(v.into())
}

impl Server {
    /// `proc/new`: run the call and answer its `ToolResult`.
    pub(super) async fn call_sync(&self, written: &[u8]) -> Result<Arc<[u8]>, FsError> {
        let (info, call) = match self.prepare(written, false)? {
            Ok(prepared) => prepared,
            Err(refusal) => return result_bytes(&refusal),
        };
        let proc = self.procs.start(info, call);
        let mut guard = CancelOnDrop(Some(proc.clone()));
        let fin = proc.wait().await;
        guard.0 = None;
        result_bytes(&fin.outcome.result)
    }

    /// `proc/new.bg`: start the call and answer its PID.
    pub(super) fn call_background(&self, written: &[u8]) -> Result<Arc<[u8]>, FsError> {
        let (info, call) = self
            .prepare(written, true)?
            .map_err(|r| FsError(r.joined_text()))?;
        let proc = self.procs.start(info, call);
        Ok(format!("{}\n", proc.id).into_bytes().into())
    }

    /// Parse and check a request. The outer error is a protocol refusal
    /// (`Rerror`); the inner one a tool-level refusal the model should see.
    fn prepare(
        &self,
        written: &[u8],
        background: bool,
    ) -> Result<Result<(ProcInfo, Call), ToolResult>, FsError> {
        let text = std::str::from_utf8(written)
            .map_err(|_| FsError::new("request payload is not UTF-8"))?;
        let payload = protocol::parse_payload(text)
            .map_err(|e| FsError(format!("bad request payload: {e}")))?;
        self.auth
            .check_token(payload.token.as_deref())
            .map_err(|e| FsError(e.to_string()))?;
        let tool_name = payload
            .tool
            .clone()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| FsError::new("bad request payload: tool=<name> is missing"))?;
        let agent = payload
            .agent
            .clone()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| FsError::new("bad request payload: agent=<id> is missing"))?;
        Ok(self.prepare_call(payload, tool_name, agent, background))
    }

    fn prepare_call(
        &self,
        payload: protocol::Payload,
        tool_name: String,
        agent: String,
        background: bool,
    ) -> Result<(ProcInfo, Call), ToolResult> {
        let tool = self.registry.lookup(&agent, &tool_name).map_err(|e| {
            ToolResult::error(format!(
                "{e}: write `load {agent} {tool_name}` to ctl first"
            ))
        })?;
        let args = payload
            .arguments(|k| tool.arg_type(k).map(str::to_string))
            .map_err(|e| ToolResult::error(format!("{tool_name}: {e}")))?;
        let cwd = payload
            .cwd
            .as_deref()
            .filter(|c| !c.is_empty())
            .map(PathBuf::from);
        self.policy.prepare(Request {
            tool,
            args,
            cwd,
            session: payload.session,
            agent,
            background,
        })
    }

    /// `bypass/pending`: the broker comes with the bypass work; until then
    /// nothing is ever pending and the read blocks until cancelled.
    pub(super) async fn bypass_pending(&self) -> Result<Arc<[u8]>, FsError> {
        std::future::pending().await
    }

    /// `bypass/resolve`: rejects every ID, since nothing is pending.
    pub(super) fn bypass_resolve(&self, text: &str) -> Result<(), FsError> {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            FsError(format!(
                "resolve: expected {{\"id\":…,\"approve\":true|false}}: {e}"
            ))
        })?;
        let id = v.get("id").map(|i| i.to_string()).unwrap_or_default();
        Err(FsError(format!("resolve: no pending request with id {id}")))
    }
}
