//! From a `proc/new` payload to a running process: token, agent registry,
//! argument coercion and validation, dispatch fields, environment, and the
//! bypass namespace (`bypass/pending`, `bypass/resolve`).

use std::path::PathBuf;
use std::sync::Arc;

use super::Server;
use crate::ninep::fs::FsError;
use crate::proc::{Planned, Proc, Request};
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
    ///
    /// A call that needs no approval is driven by this request's own future
    /// (no task of its own): dropping it, on flush or clunk, stops the process.
    pub(super) async fn call_sync(&self, written: &[u8]) -> Result<Arc<[u8]>, FsError> {
        let planned = match self.prepare(written, false)? {
            Ok(prepared) => prepared,
            Err(refusal) => return result_bytes(&refusal),
        };
        let fin = match planned {
            Planned::Ready {
                info,
                call,
                capability,
            } => {
                let (proc, run) = self.procs.start_inline(info, call);
                if let Some(c) = &capability {
                    c.set_proc(proc.id);
                }
                let fin = run.await;
                // The tool's bypass capability lives exactly as long as the call.
                drop(capability);
                fin
            }
            gated => {
                let proc = self.start(gated);
                let mut guard = CancelOnDrop(Some(proc.clone()));
                let fin = proc.wait().await;
                guard.0 = None;
                fin
            }
        };
        result_bytes(&fin.outcome.result)
    }

    /// `proc/new.bg`: start the call and answer its PID.
    pub(super) fn call_background(&self, written: &[u8]) -> Result<Arc<[u8]>, FsError> {
        let planned = self
            .prepare(written, true)?
            .map_err(|r| FsError(r.joined_text()))?;
        let proc = self.start(planned);
        Ok(format!("{}\n", proc.id).into_bytes().into())
    }

    /// Put a prepared call in the process table: at once, or behind the
    /// broker's gate. Its bypass capability lives until the process ends.
    fn start(&self, planned: Planned) -> Arc<Proc> {
        let (proc, capability) = match planned {
            Planned::Ready {
                info,
                call,
                capability,
            } => (self.procs.start(info, call), capability),
            Planned::Approval {
                info,
                plan,
                capability,
            } => {
                let broker = self.broker.clone();
                let cap = self.config.limits.output_cap;
                let proc = self
                    .procs
                    .start_gated(info, cap, true, move |id| broker.gate(plan, id));
                (proc, capability)
            }
        };
        if let Some(capability) = capability {
            capability.set_proc(proc.id);
            let p = proc.clone();
            tokio::spawn(async move {
                p.wait().await;
                drop(capability);
            });
        }
        proc
    }

    /// Parse and check a request. The outer error is a protocol refusal
    /// (`Rerror`); the inner one a tool-level refusal the model should see.
    fn prepare(
        &self,
        written: &[u8],
        background: bool,
    ) -> Result<Result<Planned, ToolResult>, FsError> {
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
    ) -> Result<Planned, ToolResult> {
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
        self.policy.plan(Request {
            tool,
            args,
            cwd,
            session: payload.session,
            agent,
            background,
        })
    }

    /// `bypass/pending`: the next request no other observer holds, as JSON;
    /// it stays with this fid (`claims`) until resolved or the fid is clunked.
    pub(super) async fn bypass_pending(
        &self,
        claims: &crate::bypass::Claims,
    ) -> Result<Arc<[u8]>, FsError> {
        let req = self.broker.next(claims).await;
        let mut v = serde_json::to_vec(&req).map_err(|e| FsError(e.to_string()))?;
        v.push(b'\n');
        Ok(v.into())
    }

    /// `bypass/resolve`: `{"id":N,"approve":bool}` (+ `"password"` for a
    /// credential request, `"approver"` naming who decided, `"reason"`).
    pub(super) fn bypass_resolve(&self, text: &str) -> Result<(), FsError> {
        self.broker
            .resolve(text)
            .map_err(|e| FsError(e.to_string()))
    }
}
