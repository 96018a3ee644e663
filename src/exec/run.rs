//! The executor loop of one call: spawn in a new process group, feed stdin,
//! drain both pipes, and end the group on timeout, cancel, or drop.

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::pin::pin;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use rustix::process::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;

use super::child::Child;
use super::group::{group_alive, signal_group};
use super::launch::{Spawned, spawn_forked};
use super::result::{Ending, build};
use super::spawn::spawn;
use super::{Call, ExitInfo, Outcome, Output, Stream};
use crate::meta::Command;
use crate::protocol::ToolResult;

/// Read size per pipe once output flows; a Linux pipe holds 64 KiB by default.
const READ_BUF: usize = 64 << 10;
/// First read size per pipe. Most calls print little: freeing two 64 KiB
/// blocks per call made glibc consolidate its heap each time (about 8% of
/// the server's CPU). A read that fills the buffer grows it to `READ_BUF`.
const FIRST_READ_BUF: usize = 4 << 10;
/// How long the pipes may stay open after the main process exited (a
/// backgrounded grandchild holding stdout) before the group is killed.
const EXIT_DRAIN_GRACE: Duration = Duration::from_millis(500);
/// Poll interval while waiting for a signalled group to disappear.
const GROUP_POLL: Duration = Duration::from_millis(10);
/// Upper bound on waiting for SIGKILLed members to vanish.
const KILL_SETTLE: Duration = Duration::from_secs(1);
/// Attempts when exec fails with ETXTBSY (a just-written executable whose
/// write descriptor leaked into a concurrently forked child).
const TXTBSY_RETRIES: u32 = 5;

/// What the single timer of the loop is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimerRole {
    Off,
    /// Main process exited but the pipes stay open: kill the group when it fires.
    Drain,
    /// SIGTERM was sent: SIGKILL when it fires.
    Kill,
    /// SIGKILL was sent: stop waiting for the pipes when it fires.
    GiveUp,
}

/// Kills the group if the `run` future is dropped before the call ended.
struct Guard {
    child: Option<Child>,
    pgid: u32,
    grace: Duration,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(child) = self.child.take() else {
            return;
        };
        signal_group(self.pgid, Signal::TERM);
        let (pgid, grace) = (self.pgid, self.grace);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(finish_abandoned(child, pgid, grace));
            }
            Err(_) => {
                // No runtime to wait in: kill now; dropping the child reaps it.
                signal_group(pgid, Signal::KILL);
                drop(child);
            }
        }
    }
}

/// Ends and reaps a call whose `run` future was dropped (SIGTERM already sent).
async fn finish_abandoned(mut child: Child, pgid: u32, grace: Duration) {
    let kill_at = Instant::now() + grace;
    let _ = tokio::time::timeout(grace, child.wait()).await;
    while Instant::now() < kill_at && group_alive(pgid) {
        sleep(GROUP_POLL).await;
    }
    if group_alive(pgid) {
        signal_group(pgid, Signal::KILL);
    }
    // The main process may have left the group; it must die and be reaped anyway.
    let _ = child.start_kill();
    let _ = child.wait().await;
    tracing::debug!(pgid, "abandoned call ended");
}

/// Writes what the spawn could not put in the pipe up front: `data[from..]`
/// to the (non-blocking) write end `fd`.
async fn feed_stdin(stdin: Option<(OwnedFd, usize)>, data: Vec<u8>) {
    let Some((fd, from)) = stdin else { return };
    let rest = data.get(from..).unwrap_or_default();
    let r = match pipe::Sender::from_owned_fd_unchecked(fd) {
        Ok(mut tx) => tx.write_all(rest).await,
        Err(e) => Err(e),
    };
    if let Err(e) = r
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        tracing::debug!(error = %e, "writing tool stdin");
    }
    // Dropping the sender closes it: the tool sees EOF.
}

/// A pipe's read end in the reactor; `None` (read as closed) if that fails.
/// Most a pipe is read before the reactor is involved (a tool still
/// writing is then read asynchronously, between other work).
const DRAIN_NOW_MAX: usize = 64 << 10;

/// Reads what `fd` (non-blocking) holds right now into `output`; `None`
/// once it is at end of file (or broken), else the fd to read on later.
fn drain_now(fd: OwnedFd, output: &Output, stream: Stream) -> Option<OwnedFd> {
    let mut buf = [0u8; 16 << 10];
    let mut taken = 0;
    while taken < DRAIN_NOW_MAX {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => return None,
            Ok(n) => {
                output.push(stream, &buf[..n]);
                taken += n;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => return Some(fd),
            Err(e) => {
                tracing::debug!(error = %e, ?stream, "reading a tool pipe");
                return None;
            }
        }
    }
    Some(fd)
}

fn receiver(fd: OwnedFd) -> Option<pipe::Receiver> {
    pipe::Receiver::from_owned_fd_unchecked(fd)
        .inspect_err(|e| tracing::warn!(error = %e, "registering a tool pipe"))
        .ok()
}

/// After a read of `n` bytes: a read that filled `buf` means more is
/// flowing, so the next reads take up to [`READ_BUF`].
fn grow_if_full(buf: &mut Vec<u8>, n: usize) {
    if n >= buf.capacity() && buf.capacity() < READ_BUF {
        buf.clear();
        buf.reserve_exact(READ_BUF);
    }
}

fn exit_info(status: Option<ExitStatus>) -> ExitInfo {
    match status {
        Some(s) => ExitInfo {
            code: s.code(),
            signal: s.signal(),
        },
        None => ExitInfo::default(),
    }
}

fn early_outcome(result: ToolResult, output: &Output, start: Instant) -> Outcome {
    Outcome::without_process(result, output, false, start.elapsed())
}

/// Runs one tool call to its end and builds its result.
///
/// `on_spawn` receives the OS pid (also the process group id) as soon as the
/// child exists. Output goes to `output` as it arrives; `output` is marked
/// finished when this returns. Cancelling `cancel` or dropping the returned
/// future ends the whole process group (SIGTERM, SIGKILL after
/// `limits.kill_grace`). Spawn failures are an error result, not a panic.
pub async fn run(
    call: Call,
    output: Arc<Output>,
    cancel: CancellationToken,
    on_spawn: impl FnOnce(u32),
) -> Outcome {
    let start = Instant::now();
    let Call {
        tool,
        command,
        args,
        cwd,
        env,
        timeout,
        limits,
        pre_exec,
        confine,
    } = call;
    let timeout = timeout.unwrap_or(limits.default_timeout);

    if cancel.is_cancelled() {
        let mut o = early_outcome(
            ToolResult::error(format!("tool `{tool}` was cancelled")),
            &output,
            start,
        );
        o.cancelled = true;
        return o;
    }

    let mut data = serde_json::to_vec(&args).unwrap_or_else(|_| b"{}".to_vec());
    data.push(b'\n');

    // A `pre_exec` hook needs a forked copy of the process (std's spawn);
    // everything else starts with a vfork-style clone from this thread.
    let mut hook = pre_exec;
    let forked = hook.is_some();
    let mut attempt = 0;
    let spawned = loop {
        let r = if forked {
            spawn_forked(&command, &env, &cwd, &mut hook, &data)
        } else {
            spawn(&command, &env, &cwd, confine.as_ref(), &data)
        };
        match r {
            Err(e)
                if e.raw_os_error() == Some(libc::ETXTBSY)
                    && attempt < TXTBSY_RETRIES
                    && !forked =>
            {
                attempt += 1;
                sleep(Duration::from_millis(5 << attempt)).await;
            }
            other => break other,
        }
    };
    drop(hook);
    let spawned = spawned.and_then(|s| {
        let Spawned {
            pid,
            pidfd,
            stdin,
            stdout,
            stderr,
        } = s;
        Ok((Child::new(pid, pidfd)?, stdin, stdout, stderr))
    });
    let (child, stdin, stdout, stderr) = match spawned {
        Ok(c) => c,
        Err(e) => {
            let what = match &command {
                Command::Exec(p) => p.display().to_string(),
                Command::Shell(_) => "/bin/sh -c …".to_string(),
            };
            tracing::debug!(tool = %tool, error = %e, "spawn failed");
            return early_outcome(
                ToolResult::error(format!(
                    "cannot start tool `{tool}` ({what}, in {}): {e}",
                    cwd.display()
                )),
                &output,
                start,
            );
        }
    };
    let pid = child.id();
    on_spawn(pid);
    tracing::debug!(tool = %tool, pid, "tool started");

    let mut guard = Guard {
        child: Some(child),
        pgid: pid,
        grace: limits.kill_grace,
    };
    // A short tool has often finished by the time the clone returns (it
    // ran on this CPU while we were suspended): take what its pipes hold and
    // its status now. Only what is still open goes to the reactor.
    let stdout = drain_now(stdout, &output, Stream::Stdout).and_then(receiver);
    let stderr = drain_now(stderr, &output, Stream::Stderr).and_then(receiver);

    let mut stdin_fut = pin!(feed_stdin(stdin, data));
    let mut stdin_done = false;

    let (mut out_open, mut err_open) = (stdout.is_some(), stderr.is_some());
    let mut stdout = stdout;
    let mut stderr = stderr;
    // Filled by `read_buf` into spare capacity: never zeroed, cleared after each chunk.
    let mut out_buf: Vec<u8> = Vec::with_capacity(FIRST_READ_BUF);
    let mut err_buf: Vec<u8> = Vec::with_capacity(FIRST_READ_BUF);

    let mut status: Option<Option<ExitStatus>> = None;
    if stdout.is_none()
        && stderr.is_none()
        && let Some(child) = guard.child.as_mut()
        && let Ok(Some(s)) = child.try_reap()
    {
        status = Some(Some(s));
    }
    let mut timed_out = false;
    let mut cancelled = false;
    let mut killed = false;
    let mut deadline = pin!(sleep(timeout));
    let mut timer = pin!(sleep(Duration::ZERO));
    let mut role = TimerRole::Off;
    let mut kill_at = Instant::now();

    loop {
        if status.is_some() && !out_open && !err_open {
            break;
        }
        let Some(child) = guard.child.as_mut() else {
            break;
        };
        let stopping = timed_out || cancelled || killed;
        tokio::select! {
            biased;
            r = async {
                out_buf.clear();
                match stdout.as_mut() {
                    Some(s) => s.read_buf(&mut out_buf).await,
                    None => Ok(0),
                }
            }, if out_open => match r {
                Ok(n) if n > 0 => {
                    output.push(Stream::Stdout, &out_buf[..n]);
                    grow_if_full(&mut out_buf, n);
                }
                _ => out_open = false,
            },
            r = async {
                err_buf.clear();
                match stderr.as_mut() {
                    Some(s) => s.read_buf(&mut err_buf).await,
                    None => Ok(0),
                }
            }, if err_open => match r {
                Ok(n) if n > 0 => {
                    output.push(Stream::Stderr, &err_buf[..n]);
                    grow_if_full(&mut err_buf, n);
                }
                _ => err_open = false,
            },
            () = &mut stdin_fut, if !stdin_done => stdin_done = true,
            r = child.wait(), if status.is_none() => {
                match r {
                    Ok(s) => status = Some(Some(s)),
                    Err(e) => {
                        tracing::warn!(tool = %tool, pid, error = %e, "waiting for tool");
                        status = Some(None);
                    }
                }
                if (out_open || err_open) && role == TimerRole::Off {
                    timer.as_mut().reset(Instant::now() + EXIT_DRAIN_GRACE);
                    role = TimerRole::Drain;
                }
            }
            () = &mut deadline, if !stopping => {
                tracing::debug!(tool = %tool, pid, "timeout: terminating process group");
                timed_out = true;
                signal_group(pid, Signal::TERM);
                kill_at = Instant::now() + limits.kill_grace;
                timer.as_mut().reset(kill_at);
                role = TimerRole::Kill;
            }
            () = cancel.cancelled(), if !stopping => {
                tracing::debug!(tool = %tool, pid, "cancelled: terminating process group");
                cancelled = true;
                signal_group(pid, Signal::TERM);
                kill_at = Instant::now() + limits.kill_grace;
                timer.as_mut().reset(kill_at);
                role = TimerRole::Kill;
            }
            () = &mut timer, if role != TimerRole::Off => match role {
                TimerRole::Drain | TimerRole::Kill => {
                    tracing::debug!(tool = %tool, pid, ?role, "killing process group");
                    signal_group(pid, Signal::KILL);
                    killed = true;
                    timer.as_mut().reset(Instant::now() + limits.kill_grace);
                    role = TimerRole::GiveUp;
                }
                TimerRole::GiveUp | TimerRole::Off => {
                    // Something outside the group holds the pipes; stop reading.
                    out_open = false;
                    err_open = false;
                    if status.is_none() {
                        let _ = child.start_kill();
                    }
                    role = TimerRole::Off;
                }
            },
        }
    }
    drop(stdout);
    drop(stderr);

    // Ended by timeout or cancel while members that ignore SIGTERM and do
    // not hold the pipes may remain: give them the grace, then SIGKILL.
    if (timed_out || cancelled) && !killed {
        while Instant::now() < kill_at && group_alive(pid) {
            sleep(GROUP_POLL).await;
        }
        if group_alive(pid) {
            signal_group(pid, Signal::KILL);
            killed = true;
        }
    }
    if killed {
        let settle = Instant::now() + KILL_SETTLE;
        while Instant::now() < settle && group_alive(pid) {
            sleep_until((Instant::now() + GROUP_POLL).min(settle)).await;
        }
    }
    // Normal end: the child has been reaped; nothing left for the guard.
    guard.child = None;

    let status = exit_info(status.flatten());
    let end = Ending {
        tool: &tool,
        status,
        timed_out,
        timeout,
        cancelled,
    };
    let result = build(&end, &output, &limits);
    output.finish();
    let duration = start.elapsed();
    tracing::debug!(tool = %tool, pid, ?status, timed_out, cancelled, ?duration, "tool ended");
    Outcome {
        result,
        status,
        timed_out,
        cancelled,
        truncated: output.truncated(),
        duration,
    }
}
