//! The tool-facing bypass socket: per-call capabilities, the line-JSON
//! protocol (docs/bypass.md), and running an approved command unconfined.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use super::{AskedBy, Broker, BypassError, Kind, Request};
use crate::exec::Limits;

/// Longest request line accepted.
const MAX_REQUEST: u64 = 256 << 10;
/// Time a client has to send its request line.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The call a capability belongs to.
pub struct CallIdentity {
    pub tool: String,
    pub agent: String,
    pub session: Option<String>,
    /// Default working directory of requested commands.
    pub cwd: PathBuf,
    /// The environment requested commands get (unfiltered, like an approved call).
    pub env: crate::exec::Env,
    /// The toolsrv PID once the call is in the process table (0 before).
    proc: AtomicU64,
}

impl CallIdentity {
    pub fn new(
        tool: String,
        agent: String,
        session: Option<String>,
        cwd: PathBuf,
        env: crate::exec::Env,
    ) -> Self {
        CallIdentity {
            tool,
            agent,
            session,
            cwd,
            env,
            proc: AtomicU64::new(0),
        }
    }
}

struct CapEntry {
    token: String,
    ident: Arc<CallIdentity>,
    live: CancellationToken,
}

/// The capabilities of the live calls, and where the socket is.
pub struct Capabilities {
    pub socket: PathBuf,
    next: AtomicU64,
    entries: Mutex<HashMap<u64, CapEntry>>,
}

/// Keeps a capability valid; dropping it (the call ended) revokes it and
/// withdraws the requests made with it.
pub struct CapabilityGuard {
    caps: Arc<Capabilities>,
    serial: u64,
    ident: Arc<CallIdentity>,
}

impl CapabilityGuard {
    /// Record the toolsrv PID of the call.
    pub fn set_proc(&self, id: u64) {
        self.ident.proc.store(id, Ordering::Release);
    }
}

impl Drop for CapabilityGuard {
    fn drop(&mut self) {
        if let Some(e) = self.caps.lock().remove(&self.serial) {
            e.live.cancel();
        }
    }
}

impl Capabilities {
    pub fn new(socket: PathBuf) -> Arc<Capabilities> {
        Arc::new(Capabilities {
            socket,
            next: AtomicU64::new(1),
            entries: Mutex::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, CapEntry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh random capability for one call.
    pub fn mint(
        self: &Arc<Self>,
        ident: CallIdentity,
    ) -> std::io::Result<(String, CapabilityGuard)> {
        let token = crate::protocol::random_token()?;
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        let ident = Arc::new(ident);
        self.lock().insert(
            serial,
            CapEntry {
                token: token.clone(),
                ident: ident.clone(),
                live: CancellationToken::new(),
            },
        );
        let guard = CapabilityGuard {
            caps: self.clone(),
            serial,
            ident,
        };
        Ok((token, guard))
    }

    /// The live call holding `token` (compared in constant time).
    fn find(&self, token: &str) -> Option<(Arc<CallIdentity>, CancellationToken)> {
        let mut found = None;
        for e in self.lock().values() {
            if bool::from(e.token.as_bytes().ct_eq(token.as_bytes())) {
                found = Some((e.ident.clone(), e.live.clone()));
            }
        }
        found
    }

    /// How many calls hold a capability now.
    pub fn live(&self) -> usize {
        self.lock().len()
    }
}

/// The listening socket; dropping it stops accepting and removes the file.
pub struct SocketHandle {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SocketHandle {
    fn drop(&mut self) {
        self.task.abort();
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(error = %e, socket = %self.path.display(), "cannot remove the bypass socket");
        }
    }
}

/// The bypass socket that belongs to the 9P socket `listen`.
pub fn socket_path(listen: &Path) -> PathBuf {
    let mut name = listen
        .file_name()
        .map_or_else(OsString::new, |n| n.to_owned());
    name.push(".bypass");
    listen.with_file_name(name)
}

/// Bind the bypass socket (mode 0600; a stale one is replaced) and serve it.
pub fn listen(
    path: &Path,
    broker: Arc<Broker>,
    caps: Arc<Capabilities>,
    limits: Limits,
) -> Result<SocketHandle, BypassError> {
    let err = |source| BypassError::Socket {
        path: path.to_path_buf(),
        source,
    };
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(BypassError::SocketLive(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let listener = UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    tracing::info!(socket = %path.display(), "bypass socket listening");
    let task = tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(handle(stream, broker.clone(), caps.clone(), limits.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "bypass socket: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
    Ok(SocketHandle {
        path: path.to_path_buf(),
        task,
    })
}

/// The command of a request: an argument vector or a shell string.
#[derive(Deserialize)]
#[serde(untagged)]
enum CommandSpec {
    Argv(Vec<String>),
    Shell(String),
}

impl CommandSpec {
    fn shown(&self) -> String {
        match self {
            CommandSpec::Argv(v) => v
                .iter()
                .map(|a| {
                    if a.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
                        && !a.is_empty()
                    {
                        a.clone()
                    } else {
                        super::sudo::sh_quote(a)
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
            CommandSpec::Shell(s) => s.clone(),
        }
    }
}

#[derive(Deserialize)]
struct ToolRequest {
    capability: String,
    command: CommandSpec,
    #[serde(default)]
    cwd: Option<PathBuf>,
}

async fn respond(w: &mut (impl AsyncWriteExt + Unpin), v: Value) {
    let mut line = v.to_string();
    line.push('\n');
    if let Err(e) = w.write_all(line.as_bytes()).await {
        tracing::debug!(error = %e, "bypass socket: cannot answer");
    }
    let _ = w.shutdown().await;
}

fn refusal(reason: impl Into<String>) -> Value {
    json!({"approved": false, "reason": reason.into()})
}

async fn handle(stream: UnixStream, broker: Arc<Broker>, caps: Arc<Capabilities>, limits: Limits) {
    let cred = stream.peer_cred().ok();
    let (peer_pid, peer_uid) = (
        cred.and_then(|c| c.pid())
            .and_then(|p| u32::try_from(p).ok()),
        cred.map(|c| c.uid()),
    );
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd.take(MAX_REQUEST));
    let mut line = String::new();
    match tokio::time::timeout(READ_TIMEOUT, rd.read_line(&mut line)).await {
        Ok(Ok(n)) if n > 0 => {}
        Ok(Ok(_)) => return,
        Ok(Err(e)) => {
            return respond(&mut wr, refusal(format!("cannot read the request: {e}"))).await;
        }
        Err(_) => {
            return respond(&mut wr, refusal("no request line within 10 s")).await;
        }
    }
    let req: ToolRequest = match serde_json::from_str(line.trim()) {
        Ok(r) => r,
        Err(e) => {
            return respond(
                &mut wr,
                refusal(format!(
                    "bad request: {e}; send one line {{\"capability\":…,\"command\":[…] or \"…\",\"cwd\":…}}"
                )),
            )
            .await;
        }
    };
    let Some((ident, live)) = caps.find(&req.capability) else {
        tracing::warn!(
            peer_pid,
            peer_uid,
            "bypass socket: request with an invalid or expired capability refused"
        );
        return respond(
            &mut wr,
            refusal("invalid or expired capability: only a running tool call may ask, with its OLLIE_BYPASS_CAPABILITY"),
        )
        .await;
    };
    let proc = ident.proc.load(Ordering::Acquire);
    tracing::info!(peer_pid, peer_uid, tool = %ident.tool, agent = %ident.agent, proc, "bypass socket: request from a tool call");
    let cwd = req.cwd.clone().unwrap_or_else(|| ident.cwd.clone());
    let request = Request {
        id: 0,
        kind: Kind::Bypass,
        tool: ident.tool.clone(),
        agent: ident.agent.clone(),
        session: ident.session.clone(),
        command: req.command.shown(),
        cwd: cwd.display().to_string(),
        env: super::shown_env(&ident.env),
        sudo_user: None,
        prompt: format!(
            "Tool `{}` (agent {}, process {}) asks to run a command outside the sandbox",
            ident.tool,
            ident.agent,
            peer_pid.map_or_else(|| "?".to_string(), |p| p.to_string())
        ),
        asked_by: AskedBy {
            origin: "tool",
            proc: (proc != 0).then_some(proc),
            os_pid: peer_pid,
            uid: peer_uid,
            tool: ident.tool.clone(),
            agent: ident.agent.clone(),
        },
        expires_in_ms: 0,
    };
    let mut ticket = broker.submit(request);
    let mut probe = [0u8; 1];
    let decision = tokio::select! {
        d = ticket.wait() => d,
        () = live.cancelled() => {
            return respond(&mut wr, refusal("the tool call that asked has ended")).await;
        }
        // The client hung up (or half-closed): the request is withdrawn.
        _ = rd.read(&mut probe) => {
            tracing::info!(peer_pid, "bypass socket: client went away; request withdrawn");
            return;
        }
    };
    drop(ticket);
    if let Some(why) = decision.rejection_text() {
        return respond(&mut wr, refusal(why)).await;
    }
    let answer = run_unconfined(&req.command, &cwd, &ident.env, &limits).await;
    respond(&mut wr, answer).await;
}

/// Kills the command's process group if the run is abandoned.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pid) = self
            .0
            .take()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

async fn read_capped(r: Option<impl AsyncRead + Unpin>, cap: usize) -> Vec<u8> {
    let Some(mut r) = r else { return Vec::new() };
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let room = cap.saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Run an approved command outside the sandbox and describe how it ended.
async fn run_unconfined(
    spec: &CommandSpec,
    cwd: &Path,
    env: &crate::exec::Env,
    limits: &Limits,
) -> Value {
    let mut cmd = match spec {
        CommandSpec::Argv(v) if !v.is_empty() => {
            let mut c = tokio::process::Command::new(&v[0]);
            c.args(&v[1..]);
            c
        }
        CommandSpec::Argv(_) => {
            return json!({"approved": true, "error": "the command is empty"});
        }
        CommandSpec::Shell(s) => {
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c").arg(s);
            c
        }
    };
    cmd.env_clear()
        .envs(env.iter())
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return json!({"approved": true, "error": format!("cannot start the command in {}: {e}", cwd.display())});
        }
    };
    let mut guard = GroupGuard(child.id());
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let cap = limits.output_cap;
    let work = async {
        let (out, err, status) = tokio::join!(
            read_capped(stdout, cap),
            read_capped(stderr, cap),
            child.wait()
        );
        (out, err, status)
    };
    match tokio::time::timeout(limits.default_timeout, work).await {
        Ok((out, err, status)) => {
            guard.0 = None;
            let status = status.ok();
            json!({
                "approved": true,
                "exit_code": status.and_then(|s| s.code()),
                "signal": status.and_then(|s| s.signal()),
                "stdout": String::from_utf8_lossy(&out),
                "stderr": String::from_utf8_lossy(&err),
            })
        }
        Err(_) => json!({
            "approved": true,
            "error": format!("the command did not finish within {} s and was killed", limits.default_timeout.as_secs()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_per_call_and_revoked_on_drop() {
        let caps = Capabilities::new(PathBuf::from("/x"));
        let ident =
            || CallIdentity::new("t".into(), "a".into(), None, "/".into(), Default::default());
        let (t1, g1) = caps.mint(ident()).unwrap();
        let (t2, g2) = caps.mint(ident()).unwrap();
        assert_ne!(t1, t2);
        assert_eq!(t1.len(), 64);
        assert!(caps.find(&t1).is_some());
        assert!(caps.find("forged").is_none());
        let (_, live) = caps.find(&t2).unwrap();
        drop(g2);
        assert!(live.is_cancelled());
        assert!(caps.find(&t2).is_none());
        assert!(caps.find(&t1).is_some());
        drop(g1);
        assert_eq!(caps.live(), 0);
    }

    #[test]
    fn socket_path_is_beside_the_9p_socket() {
        assert_eq!(
            socket_path(Path::new("/run/x/toolsrv.sock")),
            PathBuf::from("/run/x/toolsrv.sock.bypass")
        );
    }

    #[test]
    fn shown_commands() {
        let a = CommandSpec::Argv(vec!["ls".into(), "-l".into(), "a b".into()]);
        assert_eq!(a.shown(), "ls -l 'a b'");
    }
}
