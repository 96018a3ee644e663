//! A started tool process seen from the async side: its pidfd in the
//! reactor (readable once it exits), reaping, killing, and no zombies.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use rustix::process::{Pid, Signal, WaitOptions, pidfd_send_signal, waitpid};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A child process of ours, reaped by [`Child::wait`] or, if dropped before
/// that, killed and reaped in the background.
#[derive(Debug)]
pub(crate) struct Child {
    pid: Pid,
    /// `None` only while being dropped.
    pidfd: Option<PidFd>,
    status: Option<ExitStatus>,
}

/// The pidfd, put in the reactor only when something has to wait for it
/// (a short tool has often exited before anyone looks).
#[derive(Debug)]
enum PidFd {
    Plain(OwnedFd),
    Registered(AsyncFd<OwnedFd>),
}

impl PidFd {
    fn fd(&self) -> &OwnedFd {
        match self {
            PidFd::Plain(fd) => fd,
            PidFd::Registered(a) => a.get_ref(),
        }
    }
}

/// Puts a pidfd in the reactor (readable once the process exits).
fn register(pidfd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` is a valid open descriptor that stays the same
    // until the `AsyncFd` (its owner) is dropped.
    unsafe { AsyncFd::register_with_interest(pidfd, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

impl Child {
    /// Takes ownership of child `pid` through its `pidfd`. On error the
    /// process is killed and reaped before returning.
    pub(crate) fn new(pid: u32, pidfd: OwnedFd) -> io::Result<Child> {
        let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            let _ = pidfd_send_signal(&pidfd, Signal::KILL);
            return Err(io::Error::other("invalid process id"));
        };
        Ok(Child {
            pid,
            pidfd: Some(PidFd::Plain(pidfd)),
            status: None,
        })
    }

    /// The process id (also its process group id).
    pub(crate) fn id(&self) -> u32 {
        self.pid.as_raw_nonzero().get() as u32
    }

    /// Collects the status if the process has exited, without blocking.
    pub(crate) fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        loop {
            match waitpid(Some(self.pid), WaitOptions::NOHANG) {
                Ok(Some((_, st))) => {
                    let s = ExitStatus::from_raw(st.as_raw());
                    self.status = Some(s);
                    return Ok(Some(s));
                }
                Ok(None) => return Ok(None),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits for the process to exit and reaps it. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.try_reap()? {
                return Ok(s);
            }
            let fd = match self.pidfd.take() {
                Some(PidFd::Plain(fd)) => register(fd)?,
                Some(PidFd::Registered(fd)) => fd,
                None => return Err(io::Error::other("the process is being dropped")),
            };
            let fd = &*self.pidfd.insert(PidFd::Registered(fd));
            let PidFd::Registered(fd) = fd else {
                return Err(io::Error::other("the pidfd was not registered"));
            };
            // A pidfd is readable once the process exited. Readiness is
            // cleared before the next look, so an exit after it wakes us.
            fd.readable().await?.clear_ready();
        }
    }

    /// Sends SIGKILL (nothing once reaped: the pidfd never names another process).
    pub(crate) fn start_kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        match self.pidfd.as_ref() {
            Some(fd) => match pidfd_send_signal(fd.fd(), Signal::KILL) {
                Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
                Err(e) => Err(e.into()),
            },
            None => Ok(()),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let _ = self.start_kill();
        if let Ok(Some(_)) = self.try_reap() {
            return;
        }
        let Some(fd) = self.pidfd.take() else { return };
        let pid = self.pid;
        let handle = tokio::runtime::Handle::try_current().ok();
        let fd = match (fd, &handle) {
            (PidFd::Registered(a), Some(_)) => Some(a),
            (PidFd::Plain(fd), Some(_)) => register(fd).ok(),
            _ => None,
        };
        match (handle, fd) {
            (Some(h), Some(fd)) => {
                h.spawn(reap_later(pid, fd));
            }
            _ => {
                // No runtime: SIGKILL was sent, so the wait is short.
                let _ = std::thread::Builder::new()
                    .name("toolsrv-reap".into())
                    .spawn(move || super::launch::reap_blocking(pid.as_raw_nonzero().get()));
            }
        }
    }
}

/// Reaps a killed child once its pidfd says it exited.
async fn reap_later(pid: Pid, fd: AsyncFd<OwnedFd>) {
    loop {
        match waitpid(Some(pid), WaitOptions::NOHANG) {
            Ok(Some(_)) | Err(rustix::io::Errno::CHILD) => return,
            Ok(None) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                tracing::warn!(pid = pid.as_raw_nonzero().get(), error = %e, "reaping a dropped tool process");
                return;
            }
        }
        match fd.readable().await {
            Ok(mut ready) => ready.clear_ready(),
            Err(_) => return,
        }
    }
}
