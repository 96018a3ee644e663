//! What a spawn needs, built in the parent before the clone: the C strings
//! of the command and environment, the pipes; and the forked path for hooks.
//!
//! [`spawn_forked`] is the path of a call with a `pre_exec` hook (the sudo
//! password pipe): std forks the process and runs the hook; its result has
//! the same shape as [`super::spawn::spawn`]'s.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use libc::{c_char, c_int};

use super::{Env, PreExec};
use crate::meta::Command;

/// /// Stdin data at most this long is written before the child starts: a write
/// of at most `PIPE_BUF` bytes into an empty pipe never blocks.
pub(super) const SYNC_STDIN: usize = libc::PIPE_BUF;

/// A started process: its pid (also its process group id), a pidfd, and
/// the parent's ends of its pipes (non-blocking).
#[derive(Debug)]
pub(crate) struct Spawned {
    pub pid: u32,
    pub pidfd: OwnedFd,
    /// The write end of stdin when the data did not fit the pipe up front:
    /// the caller writes `data[written..]` and closes it.
    pub stdin: Option<(OwnedFd, usize)>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Starts `command` like [`spawn`] (unconfined) through std's fork, running
/// `hook` in the child before exec.
pub(crate) fn spawn_forked(
    command: &Command,
    env: &Env,
    cwd: &Path,
    hook: &mut Option<PreExec>,
    stdin_data: &[u8],
) -> io::Result<Spawned> {
    let mut cmd = match command {
        Command::Exec(path) => std::process::Command::new(path),
        Command::Shell(script) => {
            let mut c = std::process::Command::new("/bin/sh");
            c.arg("-c").arg(script);
            c
        }
    };
    let pipes = Pipes::new(stdin_data)?;
    let [i, o, e] = pipes.child;
    cmd.env_clear()
        .envs(env.iter())
        .current_dir(cwd)
        .stdin(Stdio::from(i))
        .stdout(Stdio::from(o))
        .stderr(Stdio::from(e))
        .process_group(0);
    if let Some(hook) = hook.take() {
        // SAFETY: the hook runs in the forked child between fork and exec
        // (after setpgid); `PreExec` documents that it must be
        // async-signal-safe, and its providers hold to that.
        unsafe {
            cmd.pre_exec(hook);
        }
    }
    let child = cmd.spawn()?;
    let pid = child.id();
    // std does not reap or kill on drop: the pidfd now owns the process.
    drop(child);
    drop(cmd);
    let pidfd = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| io::Error::other("no process id"))
        .and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                .map_err(io::Error::from)
        });
    let pidfd = match pidfd {
        Ok(fd) => fd,
        Err(e) => {
            let _ = rustix::process::Pid::from_raw(pid as i32)
                .map(|p| rustix::process::kill_process(p, rustix::process::Signal::KILL));
            reap_blocking(pid as i32);
            return Err(e);
        }
    };
    Ok(Spawned {
        pid,
        pidfd,
        stdin: pipes.stdin,
        stdout: pipes.stdout,
        stderr: pipes.stderr,
    })
}

/// Waits for `pid` (our child, already exited or about to) and discards its status.
pub(super) fn reap_blocking(pid: c_int) {
    let Some(p) = rustix::process::Pid::from_raw(pid) else {
        return;
    };
    loop {
        match rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty()) {
            Err(rustix::io::Errno::INTR) => continue,
            _ => return,
        }
    }
}

/// Path, working directory, argv and envp as C strings in one buffer.
pub(super) struct Prog {
    pub(super) bytes: Vec<u8>,
    pub(super) path: usize,
    pub(super) cwd: usize,
    /// argv, NULL, envp, NULL (pointers into `bytes`, which no longer grows).
    pub(super) ptrs: Vec<*const c_char>,
    /// Where envp starts in `ptrs`.
    pub(super) env_at: usize,
}

impl Prog {
    pub(super) fn new(command: &Command, env: &Env, cwd: &Path) -> io::Result<Prog> {
        let abs;
        let (path, args): (&OsStr, [&OsStr; 2]) = match command {
            Command::Exec(p) if p.is_absolute() => (p.as_os_str(), [OsStr::new(""); 2]),
            Command::Exec(p) => {
                // Commands are absolute after discovery; a relative one is
                // taken against our directory, not the child's.
                abs = std::path::absolute(p)?;
                (abs.as_os_str(), [OsStr::new(""); 2])
            }
            Command::Shell(s) => (
                OsStr::new("/bin/sh"),
                [OsStr::new("-c"), OsStr::new(s.as_str())],
            ),
        };
        let argc = if matches!(command, Command::Shell(_)) {
            3
        } else {
            1
        };
        let size = path.len()
            + cwd.as_os_str().len()
            + args.iter().map(|a| a.len() + 1).sum::<usize>()
            + env
                .iter()
                .map(|(k, v)| k.len() + v.len() + 2)
                .sum::<usize>()
            + 2;
        let mut p = Prog {
            bytes: Vec::with_capacity(size),
            path: 0,
            cwd: 0,
            ptrs: Vec::with_capacity(argc + env.len_hint() + 2),
            env_at: argc + 1,
        };
        let mut starts: Vec<usize> = Vec::with_capacity(argc + env.len_hint());
        p.path = p.push(&[path.as_bytes()])?;
        p.cwd = p.push(&[cwd.as_os_str().as_bytes()])?;
        starts.push(p.path);
        for a in &args[..argc - 1] {
            starts.push(p.push(&[a.as_bytes()])?);
        }
        for (k, v) in env.iter() {
            if k.as_bytes().contains(&b'=') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "environment variable name contains '='",
                ));
            }
            starts.push(p.push(&[k.as_bytes(), b"=", v.as_bytes()])?);
        }
        let base = p.bytes.as_ptr();
        let ptr = |at: usize| base.wrapping_add(at).cast::<c_char>();
        p.ptrs.extend(starts[..argc].iter().map(|&s| ptr(s)));
        p.ptrs.push(std::ptr::null());
        p.ptrs.extend(starts[argc..].iter().map(|&s| ptr(s)));
        p.ptrs.push(std::ptr::null());
        Ok(p)
    }

    /// Appends `parts` as one NUL-terminated string; returns where it starts.
    fn push(&mut self, parts: &[&[u8]]) -> io::Result<usize> {
        let at = self.bytes.len();
        for part in parts {
            if part.contains(&0) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "nul byte found in the command, directory or environment",
                ));
            }
            self.bytes.extend_from_slice(part);
        }
        self.bytes.push(0);
        Ok(at)
    }

    pub(super) fn ptr(&self, at: usize) -> *const c_char {
        self.bytes.as_ptr().wrapping_add(at).cast()
    }
}

/// The three pipes of a call: the child's ends (`child[0..3]`, to become its
/// fds 0, 1, 2) and the parent's (non-blocking).
pub(super) struct Pipes {
    pub(super) child: [OwnedFd; 3],
    pub(super) stdin: Option<(OwnedFd, usize)>,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
}

/// A pipe, both ends close-on-exec (`pipe2(O_CLOEXEC)`).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = std::io::pipe()?;
    Ok((r.into(), w.into()))
}

fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // A fresh pipe end has no other status flag: one F_SETFL, no F_GETFL.
    rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK).map_err(io::Error::from)
}

impl Pipes {
    /// Creates the pipes; `stdin_data` is written now when it fits (and the
    /// write end closed), else the write end is kept for the caller.
    pub(super) fn new(stdin_data: &[u8]) -> io::Result<Pipes> {
        let (in_r, in_w) = pipe()?;
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let stdin = if stdin_data.len() <= SYNC_STDIN {
            // Blocking write into an empty pipe of at least one page, and we
            // hold the read end: it cannot block or fail with EPIPE.
            let mut left = stdin_data;
            while !left.is_empty() {
                match rustix::io::write(&in_w, left) {
                    Ok(n) => left = &left[n..],
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            None
        } else {
            nonblocking(&in_w)?;
            let n = match rustix::io::write(&in_w, stdin_data) {
                Ok(n) => n,
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => 0,
                Err(e) => return Err(e.into()),
            };
            Some((in_w, n))
        };
        nonblocking(&out_r)?;
        nonblocking(&err_r)?;
        Ok(Pipes {
            child: [in_r, out_w, err_w],
            stdin,
            stdout: out_r,
            stderr: err_r,
        })
    }
}
