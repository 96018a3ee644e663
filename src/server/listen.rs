//! The listener: socket set-up and removal, accepting connections, signals,
//! the idle monitor, process garbage collection and shutdown.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use super::{Config, Server};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("another server is already listening on {0}; stop it or choose another --listen path")]
    Live(PathBuf),
    #[error(
        "no configuration directory for sandbox profiles: set XDG_CONFIG_HOME or HOME, or pass --profiles-dir"
    )]
    NoConfigDir,
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::SandboxError),
    #[error(transparent)]
    Bypass(#[from] crate::bypass::BypassError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ServeError + 'a {
    move |source| ServeError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Create the socket directory (0700 when we create it), remove a stale
/// socket, refuse a live one, and bind with mode 0600.
fn bind(path: &Path) -> Result<UnixListener, ServeError> {
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        {
            std::fs::create_dir_all(dir).map_err(io_err("cannot create socket directory", dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io_err("cannot restrict socket directory", dir))?;
        }
    }
    if path.exists() {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(ServeError::Live(path.to_path_buf())),
            Err(_) => {
                tracing::info!(socket = %path.display(), "removing stale socket");
                std::fs::remove_file(path).map_err(io_err("cannot remove stale socket", path))?;
            }
        }
    }
    let listener = UnixListener::bind(path).map_err(io_err("cannot listen on", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io_err("cannot set mode 0600 on", path))?;
    Ok(listener)
}

/// Why the accept loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Signal,
    Idle,
}

/// Run the server until SIGINT/SIGTERM or the idle monitor ends it.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    if config.yolo {
        tracing::warn!("--yolo: SANDBOX ENFORCEMENT IS DISABLED; tools run unconfined");
    }
    let server = Arc::new(Server::new(config.clone())?);
    // Full rechecks of the tools directories happen on their own thread,
    // which also warms the catalog before the first request.
    if let Err(e) = server.discoverer.spawn_refresher() {
        tracing::warn!(error = %e, "cannot start the discovery thread; discovering on requests");
    }
    let listener = bind(&config.listen)?;
    let bypass_socket = crate::bypass::socket::listen(
        &server.caps.socket,
        server.broker.clone(),
        server.caps.clone(),
        config.limits.clone(),
    )?;
    tracing::info!(socket = %config.listen.display(), tools = ?config.tools_dirs, "listening");

    let (stop_tx, mut stop_rx) = watch::channel(None::<Stop>);
    let live = Arc::new(AtomicUsize::new(0));
    let (conn_tx, conn_rx) = watch::channel(0usize);

    // Signals.
    let mut sigint = signal(SignalKind::interrupt()).map_err(io_err("signal", &config.listen))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(io_err("signal", &config.listen))?;
    let tx = stop_tx.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
        }
        tracing::info!("signal received; shutting down");
        let _ = tx.send(Some(Stop::Signal));
    });

    // Idle monitor.
    if let Some(idle) = config.idle_timeout {
        tokio::spawn(idle_monitor(
            idle,
            config.idle_grace,
            conn_rx,
            stop_tx.clone(),
        ));
    }

    // Garbage collection of finished processes.
    let procs = server.procs.clone();
    let gc_age = config.gc_age;
    tokio::spawn(async move {
        let period = (gc_age / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        loop {
            tokio::time::sleep(period).await;
            let n = procs.gc(gc_age);
            if n > 0 {
                tracing::debug!(removed = n, "garbage-collected finished processes");
            }
        }
    });

    let reason = loop {
        tokio::select! {
            changed = stop_rx.changed() => {
                if changed.is_err() { break Stop::Signal; }
                if let Some(r) = *stop_rx.borrow() { break r; }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let n = live.fetch_add(1, Ordering::AcqRel) + 1;
                    conn_tx.send_replace(n);
                    let server = server.clone();
                    let live = live.clone();
                    let conn_tx = conn_tx.clone();
                    tokio::spawn(async move {
                        crate::ninep::serve_conn(server, stream, crate::ninep::wire::MAX_MSIZE).await;
                        let n = live.fetch_sub(1, Ordering::AcqRel) - 1;
                        conn_tx.send_replace(n);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    };

    tracing::info!(reason = ?reason, "stopping: killing processes and removing the socket");
    drop(listener);
    drop(bypass_socket);
    server.procs.kill_all().await;
    if let Err(e) = std::fs::remove_file(&config.listen) {
        tracing::warn!(error = %e, socket = %config.listen.display(), "cannot remove socket");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Stop after `grace` if nobody ever connected, or `idle` after the last
/// connection closed.
async fn idle_monitor(
    idle: Duration,
    grace: Duration,
    mut conns: watch::Receiver<usize>,
    stop: watch::Sender<Option<Stop>>,
) {
    // Start-up grace: wait for a first connection.
    let connected = matches!(
        tokio::time::timeout(grace, conns.wait_for(|n| *n > 0)).await,
        Ok(Ok(_))
    );
    if !connected {
        tracing::info!(grace = ?grace, "nobody connected during the start-up grace; exiting");
        let _ = stop.send(Some(Stop::Idle));
        return;
    }
    loop {
        if conns.wait_for(|n| *n == 0).await.is_err() {
            return;
        }
        let woke = tokio::time::timeout(idle, conns.wait_for(|n| *n > 0))
            .await
            .map(|r| r.is_ok());
        match woke {
            Ok(true) => continue,
            Ok(false) => return,
            Err(_) => {
                tracing::info!(idle = ?idle, "idle timeout with no connections; exiting");
                let _ = stop.send(Some(Stop::Idle));
                return;
            }
        }
    }
}
