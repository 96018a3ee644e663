//! The local socket clients use: each connection is relayed to the OpenSSH
//! forward; a connection the remote drops unanswered restarts the remote server and is replayed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use super::RemoteError;
use super::supervise::Link;

/// How long a client connection waits for the link to come (back) up.
const PATIENCE: Duration = Duration::from_secs(60);
/// What a client may send before the first answer and still be replayed.
const MAX_REPLAY: usize = 1 << 20;

/// Bind the local socket: its directory is created 0700 if missing, a stale
/// socket is replaced, a live one is an error; the socket is made 0600.
pub fn bind(path: &Path) -> Result<UnixListener, RemoteError> {
    let err = |source| RemoteError::LocalSocket {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(err)?;
    }
    if std::fs::symlink_metadata(path).is_ok() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(RemoteError::SocketInUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    let l = UnixListener::bind(path).map_err(err)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(l)
}

/// Accept clients until `shutdown`.
pub async fn serve(listener: UnixListener, link: Arc<Link>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            c = listener.accept() => match c {
                Ok((conn, _)) => {
                    let link = link.clone();
                    let stop = shutdown.clone();
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = relay(conn, link) => {}
                            _ = stop.cancelled() => {}
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = shutdown.cancelled() => return,
        }
    }
}

enum First {
    /// The remote answered; relay the rest as it comes.
    Answered,
    /// The client left before an answer.
    ClientGone,
    /// The remote closed without a byte: its server is not there.
    RemoteGone,
}

async fn relay(mut client: UnixStream, link: Arc<Link>) {
    let deadline = Instant::now() + PATIENCE;
    let mut sent = Vec::new();
    let mut up = link.up.subscribe();
    // Unanswered connections while the remote server runs: the forward
    // itself is refused (sshd policy) or the server is stuck.
    let mut refused = 0u32;
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        if tokio::time::timeout(left, up.wait_for(|u| *u))
            .await
            .is_err()
        {
            break;
        }
        let mut remote = match UnixStream::connect(&link.fwd).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "forward not accepting yet");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match first_answer(&mut client, &mut remote, &mut sent).await {
            First::Answered => {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut remote).await;
                return;
            }
            First::ClientGone => return,
            First::RemoteGone if sent.len() > MAX_REPLAY => break,
            First::RemoteGone => {
                tracing::info!("the remote server did not answer; making sure it runs");
                match link.ensure_started().await {
                    Ok(true) => refused = 0,
                    Ok(false) => {
                        refused += 1;
                        if refused >= 3 {
                            tracing::warn!(
                                "the remote server runs but connections to it are closed \
                                 unanswered; does sshd allow forwarding (AllowStreamLocalForwarding, AllowTcpForwarding)?"
                            );
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(200) * refused).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the remote server");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        }
    }
    tracing::warn!("gave up on a client: the remote stayed unreachable");
}

/// Relay until the remote's first bytes, recording what the client sent so
/// that it can be replayed on a new connection.
async fn first_answer(
    client: &mut UnixStream,
    remote: &mut UnixStream,
    sent: &mut Vec<u8>,
) -> First {
    if !sent.is_empty() && remote.write_all(sent).await.is_err() {
        return First::RemoteGone;
    }
    let mut cbuf = vec![0u8; 16 << 10];
    let mut rbuf = vec![0u8; 16 << 10];
    loop {
        tokio::select! {
            r = client.read(&mut cbuf) => match r {
                Ok(0) | Err(_) => return First::ClientGone,
                Ok(n) => {
                    if sent.len() <= MAX_REPLAY {
                        sent.extend_from_slice(&cbuf[..n]);
                    }
                    if remote.write_all(&cbuf[..n]).await.is_err() {
                        return First::RemoteGone;
                    }
                }
            },
            r = remote.read(&mut rbuf) => match r {
                Ok(0) | Err(_) => return First::RemoteGone,
                Ok(n) => {
                    return if client.write_all(&rbuf[..n]).await.is_ok() {
                        First::Answered
                    } else {
                        First::ClientGone
                    };
                }
            },
        }
    }
}

/// The private forward socket next to the public one: `.<name>.fwd`.
pub fn fwd_path(local: &Path) -> PathBuf {
    let name = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "toolsrv.sock".into());
    local.with_file_name(format!(".{name}.fwd"))
}
