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
//! The command's C strings and the pipes come from `launch`, which also
//! has the forked path of calls with a `pre_exec` hook.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use libc::{c_char, c_int, c_void};

use super::Env;
use super::launch::{Pipes, Prog, Spawned, reap_blocking};
use crate::meta::Command;
use crate::sandbox::ChildPlan;

/// Usable stack of the clone child (the guard page comes on top). The child
/// makes a few libc syscall wrappers' worth of calls: a few KiB at most.
const CHILD_STACK: usize = 64 << 10;

/// Starts `command` in `cwd` with exactly `env`, in its own process group,
/// confined by `confine` when given, with `stdin_data` on its stdin.
///
/// An error that happened in the child before exec (chdir, confinement,
/// execve) comes back as its errno, e.g. `ETXTBSY`.
pub(crate) fn spawn(
    command: &Command,
    env: &Env,
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
