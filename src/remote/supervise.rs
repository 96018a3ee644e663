//! The SSH link: one `ssh -N -L` forwarder kept alive with backoff, and the
//! "start the remote server if it is not running" step run before each reconnect.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::Child;
use tokio::sync::{Mutex, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::RemoteError;
use super::ssh::Ssh;

/// First reconnect delay; doubled after each failure up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(200);
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A forward that stayed up this long resets the backoff.
const STABLE: Duration = Duration::from_secs(10);

/// Everything the forwarder and the local proxy share.
pub struct Link {
    pub ssh: Ssh,
    /// The remote server's socket.
    pub remote_socket: String,
    /// The local end of the OpenSSH forward (private; the proxy connects to it).
    pub fwd: PathBuf,
    /// The remote "start unless running" script.
    pub start_script: String,
    /// Whether the forward is up now.
    pub up: watch::Sender<bool>,
    /// Serialises start attempts.
    starting: Mutex<()>,
}

impl Link {
    pub fn new(ssh: Ssh, remote_socket: String, fwd: PathBuf, start_script: String) -> Link {
        Link {
            ssh,
            remote_socket,
            fwd,
            start_script,
            up: watch::channel(false).0,
            starting: Mutex::new(()),
        }
    }

    /// Start the remote server unless it runs; whether it had to be started.
    pub async fn ensure_started(&self) -> Result<bool, RemoteError> {
        let _g = self.starting.lock().await;
        let out = self
            .ssh
            .script("starting the remote server", &self.start_script)
            .await?;
        let started = out.trim() == "started";
        if started {
            tracing::info!(socket = %self.remote_socket, "remote server started");
        }
        Ok(started)
    }
}

/// Keep the forward up until `shutdown`. `ready` gets the outcome of the
/// first attempt: a first failure is final (it is a configuration problem,
/// the deployment over the same connection just worked); later ones retry.
pub async fn forward_loop(
    link: Arc<Link>,
    shutdown: CancellationToken,
    ready: oneshot::Sender<Result<(), RemoteError>>,
) {
    let mut ready = Some(ready);
    let mut backoff = MIN_BACKOFF;
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if let Err(e) = link.ensure_started().await {
                tracing::warn!(error = %e, retry_in = ?backoff, "cannot reach the remote");
                continue;
            }
        }
        first = false;
        let _ = std::fs::remove_file(&link.fwd);
        let mut child = match link.ssh.forward(&link.fwd, &link.remote_socket).spawn() {
            Ok(c) => c,
            Err(source) => {
                let e = RemoteError::Spawn {
                    what: "starting ssh".into(),
                    source,
                };
                if let Some(r) = ready.take() {
                    let _ = r.send(Err(e));
                    return;
                }
                tracing::warn!(error = %e, "cannot start the forwarder");
                continue;
            }
        };
        let came_up = loop {
            tokio::select! {
                st = child.wait() => break Err(st),
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    if link.fwd.exists() {
                        break Ok(());
                    }
                }
                _ = shutdown.cancelled() => {
                    stop(child).await;
                    return;
                }
            }
        };
        if let Err(st) = came_up {
            let st = st.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
            if let Some(r) = ready.take() {
                let _ = r.send(Err(RemoteError::Forward(st)));
                return;
            }
            tracing::warn!(status = %st, retry_in = ?backoff, "ssh forwarding failed");
            continue;
        }
        link.up.send_replace(true);
        match ready.take() {
            Some(r) => {
                let _ = r.send(Ok(()));
            }
            None => tracing::info!(local = %link.fwd.display(), "forwarding re-established"),
        }
        tracing::debug!(pid = ?child.id(), "ssh forwarder up");
        let since = Instant::now();
        tokio::select! {
            st = child.wait() => {
                link.up.send_replace(false);
                if since.elapsed() >= STABLE {
                    backoff = MIN_BACKOFF;
                }
                let st = st.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
                tracing::warn!(status = %st, retry_in = ?backoff, "ssh connection dropped; reconnecting");
            }
            _ = shutdown.cancelled() => {
                link.up.send_replace(false);
                stop(child).await;
                return;
            }
        }
    }
}

/// SIGTERM the forwarder, SIGKILL it after 2 s, and reap it.
async fn stop(mut child: Child) {
    if let Some(pid) = child
        .id()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32))
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        if tokio::time::timeout(Duration::from_secs(2), child.wait())
            .await
            .is_ok()
        {
            return;
        }
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}
