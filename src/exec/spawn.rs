//! Starting a tool's process: a vfork-style `clone` from the calling thread
//! whose child resets signals, joins its own group, confines itself, execs.
//!
//! [`spawn`] builds everything in the parent (C strings, pipes, the seccomp
//! program pointer), blocks all signals, and calls
//! `clone(CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD)` on a small stack
//! of its own. The child shares the parent's memory until it execs, so it
//! runs [`child_main`]: raw syscalls only, no allocation, no locks. The
//! calling thread is suspended until the child has exec'd or exited, which
//! makes the parent's stack data safe to read from the child and the
//! child's error report visible to the parent afterwards.
//!
//! [`spawn_forked`] is the path of a call with a `pre_exec` hook (the sudo
//! password pipe): std forks the process and runs the hook; the result has
//! the same shape.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicI32, Ordering};

use libc::{c_char, c_int, c_void};

use super::PreExec;
use crate::meta::Command;
use crate::sandbox::ChildPlan;

/// Usable stack of the clone child (the guard page comes on top). The child
/// makes a few libc syscall wrappers' worth of calls: a few KiB at most.
const CHILD_STACK: usize = 64 << 10;
/// Stdin data at most this long is written before the child starts: a write
/// of at most `PIPE_BUF` bytes into an empty pipe never blocks.
const SYNC_STDIN: usize = libc::PIPE_BUF;

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

/// Starts `command` in `cwd` with exactly `env`, in its own process group,
/// confined by `confine` when given, with `stdin_data` on its stdin.
///
/// An error that happened in the child before exec (chdir, confinement,
/// execve) comes back as its errno, e.g. `ETXTBSY`.
pub(crate) fn spawn(
    command: &Command,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    cwd: &Path,
    confine: Option<&ChildPlan>,
    stdin_data: &[u8],
) -> io::Result<Spawned> {
    let prog = Prog::new(command, env, cwd)?;
    let pipes = Pipes::new(stdin_data)?;

    let fprog = confine
        .and_then(|c| c.filter.as_ref())
        .map(|f| libc::sock_fprog {
            len: u16::try_from(f.len()).unwrap_or(u16::MAX),
            filter: f.as_ptr().cast_mut(),
        });
    let args = ChildArgs {
        path: prog.ptr(prog.path),
        argv: prog.ptrs.as_ptr(),
        envp: prog.ptrs[prog.env_at..].as_ptr(),
        cwd: prog.ptr(prog.cwd),
        fds: [
            pipes.child[0].as_raw_fd(),
            pipes.child[1].as_raw_fd(),
            pipes.child[2].as_raw_fd(),
        ],
        confine: confine.is_some(),
        ruleset: confine
            .and_then(|c| c.ruleset.as_ref())
            .map_or(-1, |fd| fd.as_raw_fd()),
        fprog: fprog
            .as_ref()
            .map_or(std::ptr::null(), |f| f as *const libc::sock_fprog),
        rt_reset: rt_not_default(),
        errno: AtomicI32::new(0),
    };

    let mut pidfd: c_int = -1;
    let pid = STACK.with(|cell| -> io::Result<c_int> {
        let mut slot = cell.borrow_mut();
        let stack = match slot.as_mut() {
            Some(s) => s,
            None => slot.insert(Stack::new()?),
        };
        let mask = BlockAll::new();
        // SAFETY: `child_main` only reads `args` (alive on this frame: with
        // CLONE_VFORK this thread is suspended until the child has exec'd or
        // exited) and runs on `stack`, which nothing else uses meanwhile
        // (thread-local, and this thread is suspended). All signals are
        // blocked, so no handler of ours can run on the child's side. The
        // kernel writes the pidfd into `pidfd` (CLONE_PIDFD uses the
        // parent_tid argument).
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
                (&args as *const ChildArgs).cast_mut().cast::<c_void>(),
                &mut pidfd as *mut c_int,
            )
        };
        let err = io::Error::last_os_error();
        drop(mask);
        if pid < 0 { Err(err) } else { Ok(pid) }
    })?;
    // SAFETY: clone succeeded with CLONE_PIDFD: `pidfd` is a new descriptor
    // (close-on-exec) that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // The child's ends now live in the child (or it is gone): close ours.
    drop(pipes.child);
    let errno = args.errno.load(Ordering::Acquire);
    if errno != 0 {
        reap_blocking(pid);
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(Spawned {
        pid: pid as u32,
        pidfd,
        stdin: pipes.stdin,
        stdout: pipes.stdout,
        stderr: pipes.stderr,
    })
}

/// Starts `command` like [`spawn`] (unconfined) through std's fork, running
/// `hook` in the child before exec.
pub(crate) fn spawn_forked(
    command: &Command,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
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
        .envs(env.iter().map(|(k, v)| (k, v)))
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
fn reap_blocking(pid: c_int) {
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
struct Prog {
    bytes: Vec<u8>,
    path: usize,
    cwd: usize,
    /// argv, NULL, envp, NULL (pointers into `bytes`, which no longer grows).
    ptrs: Vec<*const c_char>,
    /// Where envp starts in `ptrs`.
    env_at: usize,
}

impl Prog {
    fn new(
        command: &Command,
        env: &[(std::ffi::OsString, std::ffi::OsString)],
        cwd: &Path,
    ) -> io::Result<Prog> {
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
            ptrs: Vec::with_capacity(argc + env.len() + 2),
            env_at: argc + 1,
        };
        let mut starts: Vec<usize> = Vec::with_capacity(argc + env.len());
        p.path = p.push(&[path.as_bytes()])?;
        p.cwd = p.push(&[cwd.as_os_str().as_bytes()])?;
        starts.push(p.path);
        for a in &args[..argc - 1] {
            starts.push(p.push(&[a.as_bytes()])?);
        }
        for (k, v) in env {
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

    fn ptr(&self, at: usize) -> *const c_char {
        self.bytes.as_ptr().wrapping_add(at).cast()
    }
}

/// The three pipes of a call: the child's ends (`child[0..3]`, to become its
/// fds 0, 1, 2) and the parent's (non-blocking).
struct Pipes {
    child: [OwnedFd; 3],
    stdin: Option<(OwnedFd, usize)>,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: pipe2 writes two descriptors into `fds` on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // A fresh pipe end has no other status flag: one F_SETFL, no F_GETFL.
    rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK).map_err(io::Error::from)
}

impl Pipes {
    /// Creates the pipes; `stdin_data` is written now when it fits (and the
    /// write end closed), else the write end is kept for the caller.
    fn new(stdin_data: &[u8]) -> io::Result<Pipes> {
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

/// What the child needs; lives on the parent's stack during the clone.
struct ChildArgs {
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    cwd: *const c_char,
    /// Become fds 0, 1, 2.
    fds: [RawFd; 3],
    confine: bool,
    /// Landlock ruleset fd, -1 for none.
    ruleset: RawFd,
    /// Seccomp program, null for none.
    fprog: *const libc::sock_fprog,
    /// Real-time signals (bit `n - 32` for signal `n`) to reset as well.
    rt_reset: u64,
    /// The errno of the step that failed (0: exec succeeded).
    errno: AtomicI32,
}

/// The kernel's `struct sigaction` all zeros: `SIG_DFL`, no flags, empty
/// mask, whatever the architecture's field order.
type KernelSigaction = [u64; 4];

/// Real-time signals whose disposition is not the default in this process,
/// looked at once: it installs no real-time handler and ignores none, so
/// only what it inherited at exec (a parent's `SIG_IGN`, e.g. glibc's
/// `posix_spawn` ignores its internal signal 32 in children) can be there,
/// and ignored signals would stay ignored in the tool.
fn rt_not_default() -> u64 {
    static MASK: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MASK.get_or_init(|| {
        let mut mask = 0u64;
        for sig in 32..=64 {
            let mut old: KernelSigaction = [0; 4];
            // SAFETY: rt_sigaction that only reads the disposition into
            // `old` (large enough for the kernel struct); 8 is the kernel's
            // sigset size.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    std::ptr::null::<KernelSigaction>(),
                    &mut old as *mut KernelSigaction,
                    8usize,
                )
            };
            if rc == 0 && old != [0; 4] {
                mask |= 1 << (sig - 32);
            }
        }
        mask
    })
}

/// Blocks every signal of the calling thread (glibc's internal ones too:
/// raw syscall) until dropped, when the previous mask comes back.
struct BlockAll(u64);

impl BlockAll {
    fn new() -> BlockAll {
        let all: u64 = !0;
        let mut old: u64 = 0;
        // SAFETY: rt_sigprocmask with valid pointers to two 8-byte sets
        // (the kernel's sigset size on Linux).
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &all as *const u64,
                &mut old as *mut u64,
                8usize,
            );
        }
        BlockAll(old)
    }
}

impl Drop for BlockAll {
    fn drop(&mut self) {
        // SAFETY: as in `new`; restores the saved mask.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &self.0 as *const u64,
                std::ptr::null_mut::<u64>(),
                8usize,
            );
        }
    }
}

/// A mapped stack for clone children with a guard page below it; one per
/// thread, reused (the thread is suspended while its child uses it).
struct Stack {
    base: *mut c_void,
    len: usize,
}

thread_local! {
    static STACK: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

impl Stack {
    fn new() -> io::Result<Stack> {
        let page = 4096;
        let len = CHILD_STACK + page;
        // SAFETY: a fresh anonymous private mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the lowest page of the mapping just made: an overflow
        // faults instead of running into other memory.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The initial stack pointer (stacks grow down; page-aligned).
    fn top(&mut self) -> *mut c_void {
        self.base.wrapping_byte_add(self.len)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, no longer used.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// Records the current errno for the parent and exits the child.
fn fail(a: &ChildArgs) -> ! {
    // SAFETY: __errno_location returns this thread's errno slot (the TLS of
    // the suspended parent thread, shared under CLONE_VM: only this child
    // uses it now).
    let e = unsafe { *libc::__errno_location() };
    a.errno
        .store(if e == 0 { libc::EIO } else { e }, Ordering::Release);
    // SAFETY: _exit is async-signal-safe and ends only this child (it is
    // its own thread group: no CLONE_THREAD).
    unsafe { libc::_exit(127) }
}

/// The clone child: runs on the parent's memory until execve replaces it.
/// Raw syscalls only: no allocation, no locks, nothing that unwinds.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `ChildArgs` of `spawn`, alive and unchanged while
    // the parent is suspended (CLONE_VFORK).
    let a = unsafe { &*arg.cast::<ChildArgs>() };
    // SAFETY (all blocks below): plain syscalls through libc's
    // async-signal-safe wrappers, on pointers to data in `a` (valid
    // NUL-terminated strings and NULL-terminated arrays built by `Prog`) or
    // on this stack. They change only this new task: its signal
    // dispositions and fd table are its own copies (no CLONE_SIGHAND, no
    // CLONE_FILES), and no_new_privs, Landlock domains and seccomp filters
    // are per task, so the parent sharing the memory stays unconfined.
    unsafe {
        // 1. Every signal back to its default action (raw rt_sigaction:
        //    glibc's wrapper refuses its internal signals 32 and 33).
        //    Handlers would be reset by exec anyway, but ignored signals
        //    (Rust ignores SIGPIPE) would stay ignored in the tool.
        //    Real-time signals: this process installs no handler for them,
        //    so only those found not default at startup are reset.
        let dfl: KernelSigaction = [0; 4];
        for sig in 1..=64 {
            let wanted = if sig < 32 {
                sig != libc::SIGKILL && sig != libc::SIGSTOP
            } else {
                a.rt_reset & (1 << (sig - 32)) != 0
            };
            if wanted {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &dfl as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8usize,
                );
            }
        }
        // 2. Own process group: cancellation signals the whole group.
        if libc::setpgid(0, 0) != 0 {
            fail(a);
        }
        // 3. The pipes onto 0, 1, 2. A source already below 3 but not on
        //    its own target is first moved up, so no dup2 clobbers another
        //    source; one already on its target only loses close-on-exec.
        //    Every other descriptor becomes close-on-exec, including any a
        //    parent of ours left inheritable (still usable until exec: the
        //    Landlock ruleset fd is). Old kernels without close_range rely
        //    on our own descriptors being close-on-exec.
        let mut fds = a.fds;
        for (target, fd) in fds.iter_mut().enumerate() {
            if *fd < 3 && *fd != target as c_int {
                *fd = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 3);
                if *fd < 0 {
                    fail(a);
                }
            }
        }
        for (target, &fd) in fds.iter().enumerate() {
            let ok = if fd == target as c_int {
                libc::fcntl(fd, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(fd, target as c_int) == target as c_int
            };
            if !ok {
                fail(a);
            }
        }
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        // 4. Working directory.
        if libc::chdir(a.cwd) != 0 {
            fail(a);
        }
        // 5. Confinement, in the order of `ChildPlan::into_pre_exec`.
        if a.confine {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                fail(a);
            }
            if a.ruleset >= 0
                && libc::syscall(libc::SYS_landlock_restrict_self, a.ruleset, 0u32) != 0
            {
                fail(a);
            }
            if !a.fprog.is_null()
                && libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0u32,
                    a.fprog,
                ) != 0
            {
                fail(a);
            }
        }
        // 6. Empty signal mask (as std gives its children), then exec.
        let none: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &none as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
        libc::execve(a.path, a.argv, a.envp);
        fail(a)
    }
}

#[cfg(test)]
#[path = "spawn_tests.rs"]
mod tests;
