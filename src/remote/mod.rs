//! `toolsrv remote`: deploy toolsrv to a host over the system's OpenSSH, run
//! its server there and serve it on a local Unix socket, reconnecting as needed.
//!
//! Steps: [`deploy::probe`] the remote (platform, remote directory, installed
//! binary), [`deploy::install_binary`], [`deploy::copy_config`] (tool
//! directories and sandbox profiles), start the server with the
//! [`deploy::start_script`], then [`supervise::forward_loop`] keeps an
//! `ssh -N -L` forward up while [`proxy`] relays clients of the local socket to
//! it. Teardown stops the forwarder, the remote server and both sockets.

pub mod deploy;
pub mod platform;
pub mod proxy;
pub mod ssh;
pub mod supervise;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

pub use ssh::SshConfig;

/// Why `toolsrv remote` failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{0:?} is not an SSH destination (want [USER@]HOST)")]
    BadDestination(String),
    #[error("{what}: cannot run: {source} (is OpenSSH's ssh/scp installed?)")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} failed (exit {}){}", status.map_or("signal".into(), |s| s.to_string()), if stderr.is_empty() { String::new() } else { format!(":\n{stderr}") })]
    Failed {
        what: String,
        status: Option<i32>,
        stderr: String,
    },
    #[error("the remote's answer to the probe is not understood:\n{0}")]
    Probe(String),
    #[error(
        "remote directory {0:?} has characters scp may mangle; choose a plain path with --remote-dir"
    )]
    BadRemoteDir(String),
    #[error(
        "the remote socket path {0} is too long for a Unix socket; choose a shorter --remote-dir"
    )]
    SocketPathTooLong(String),
    #[error(
        "the remote is {remote} but this toolsrv is built for {local}: build toolsrv for {remote} and give it with --binary PATH"
    )]
    Platform { remote: String, local: String },
    #[error("the installed remote binary says {got:?}, expected {want:?}")]
    VersionMismatch { want: String, got: String },
    #[error("{}: {source}", path.display())]
    Local {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("local socket {}: {source}", path.display())]
    LocalSocket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("local socket {} is in use by a live server; stop it or choose --local-socket", .0.display())]
    SocketInUse(PathBuf),
    #[error(
        "ssh forwarding failed ({0}); does the remote sshd allow Unix socket forwarding (AllowStreamLocalForwarding, AllowTcpForwarding, DisableForwarding)?"
    )]
    Forward(String),
}

/// Everything `toolsrv remote` is told.
#[derive(Debug, Clone)]
pub struct Options {
    pub ssh: SshConfig,
    /// Local tool directories to deploy (none: the remote's own default).
    pub tools: Vec<PathBuf>,
    /// Local sandbox profile directory to deploy.
    pub sandbox: Option<PathBuf>,
    /// The socket local clients use.
    pub local_socket: PathBuf,
    /// The remote directory (`~`-relative allowed).
    pub remote_dir: String,
    /// The remote server's `--idle-timeout`.
    pub idle_timeout: String,
    /// A toolsrv binary for the remote (default: this executable).
    pub binary: Option<PathBuf>,
    /// `K=V` for the remote server's environment.
    pub remote_env: Vec<String>,
    /// More arguments for the remote `toolsrv serve`.
    pub serve_args: Vec<String>,
}

/// The default remote directory.
pub const DEFAULT_REMOTE_DIR: &str = "~/.cache/toolsrv";

/// The default local socket for a destination: `remote-<dest>.sock` next to
/// [`crate::client::default_socket`].
pub fn default_local_socket(dest: &str) -> PathBuf {
    let name: String = dest
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = crate::client::default_socket();
    base.with_file_name(format!("remote-{name}.sock"))
}

/// Deploy, start and forward; call `on_ready` once the local socket works;
/// run until `shutdown`; then tear everything down (also after an error
/// once the remote server may have been started).
pub async fn run(
    opts: Options,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(&Path),
) -> Result<(), RemoteError> {
    let ssh = ssh::Ssh::new(&opts.ssh)?;
    let listener = proxy::bind(&opts.local_socket)?;
    let fwd = proxy::fwd_path(&opts.local_socket);
    let cleanup_local = || {
        let _ = std::fs::remove_file(&opts.local_socket);
        let _ = std::fs::remove_file(&fwd);
    };

    let probe = tokio::select! {
        p = deploy::probe(&ssh, &opts.remote_dir) => p,
        _ = shutdown.cancelled() => { cleanup_local(); return Ok(()); }
    };
    let probe = match probe {
        Ok(p) => p,
        Err(e) => {
            cleanup_local();
            return Err(e);
        }
    };
    let layout = deploy::Layout {
        dir: probe.dir.clone(),
    };
    tracing::info!(host = ssh.dest(), os = %probe.os, arch = %probe.arch, dir = %layout.dir, "remote");
    let spec = deploy::ServeSpec {
        tool_dirs: opts.tools.len(),
        profiles: opts.sandbox.is_some(),
        idle_timeout: opts.idle_timeout.clone(),
        env: opts.remote_env.clone(),
        extra: opts.serve_args.clone(),
    };
    let link = Arc::new(supervise::Link::new(
        ssh.clone(),
        layout.socket(),
        fwd.clone(),
        deploy::start_script(&layout, &spec),
    ));

    let deploy = async {
        // A server left from an earlier session may run other tools or flags.
        ssh.script(
            "stopping an earlier remote server",
            &deploy::stop_script(&layout),
        )
        .await?;
        let exe = match &opts.binary {
            Some(b) => b.clone(),
            None => std::env::current_exe().map_err(|source| RemoteError::Local {
                path: "current executable".into(),
                source,
            })?,
        };
        deploy::install_binary(&ssh, &layout, &probe, &exe, opts.binary.is_some()).await?;
        deploy::copy_config(&ssh, &layout, &opts.tools, opts.sandbox.as_deref()).await?;
        link.ensure_started().await?;
        let (tx, rx) = oneshot::channel();
        let fwd_task = tokio::spawn(supervise::forward_loop(link.clone(), shutdown.clone(), tx));
        match rx.await {
            Ok(Ok(())) => Ok(fwd_task),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(RemoteError::Forward("the forwarder stopped".into())),
        }
    };
    let outcome = tokio::select! {
        r = deploy => Some(r),
        _ = shutdown.cancelled() => None,
    };
    let result = match outcome {
        Some(Ok(fwd_task)) => {
            tracing::info!(local = %opts.local_socket.display(), remote = %layout.socket(), "ready");
            on_ready(&opts.local_socket);
            let proxy_task = tokio::spawn(proxy::serve(listener, link.clone(), shutdown.clone()));
            shutdown.cancelled().await;
            let _ = fwd_task.await;
            let _ = proxy_task.await;
            Ok(())
        }
        Some(Err(e)) => Err(e),
        None => Ok(()),
    };
    teardown(&ssh, &layout).await;
    cleanup_local();
    result
}

/// Stop the remote server and remove its socket (bounded in time).
async fn teardown(ssh: &ssh::Ssh, layout: &deploy::Layout) {
    tracing::info!(host = ssh.dest(), "stopping the remote server");
    let script = deploy::stop_script(layout);
    let stop = ssh.script("stopping the remote server", &script);
    match tokio::time::timeout(Duration::from_secs(30), stop).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "the remote server may still run"),
        Err(_) => tracing::warn!("the remote did not answer the stop request in 30 s"),
    }
}
