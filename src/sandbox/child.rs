//! The code that confines the calling thread: `no_new_privs`,
//! `landlock_restrict_self`, seccomp. Raw syscalls only, no allocation, no locks.
//!
//! [`ChildPlan`] is applied by the tool's own child before exec (the
//! spawn in `exec`), or through [`ChildPlan::into_pre_exec`] in a forked one.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// The closure type run between fork and exec.
pub type PreExec = Box<dyn FnMut() -> io::Result<()> + Send + Sync>;

/// Everything the child needs to confine itself, built by the parent:
/// `no_new_privs`, then the Landlock ruleset, then the seccomp filter.
#[derive(Clone)]
pub struct ChildPlan {
    /// A created and filled Landlock ruleset (`O_CLOEXEC`), if any; shared
    /// with the profile's ruleset cache and other calls.
    pub ruleset: Option<Arc<OwnedFd>>,
    /// A compiled seccomp program, if any (built once per mode).
    pub filter: Option<Arc<Vec<libc::sock_filter>>>,
}

impl std::fmt::Debug for ChildPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildPlan")
            .field("landlock", &self.ruleset.is_some())
            .field("seccomp", &self.filter.is_some())
            .finish()
    }
}

impl ChildPlan {
    pub(crate) fn into_pre_exec(self) -> PreExec {
        let ChildPlan { ruleset, filter } = self;
        // The fd and the filter are owned by the closure: they live until the
        // caller drops the closure after spawning (closing the parent's fd).
        let fprog_len: Option<u16> = filter
            .as_ref()
            .map(|f| u16::try_from(f.len()).unwrap_or(u16::MAX));
        Box::new(move || {
            // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes only integer arguments
            // and is async-signal-safe. Required by landlock_restrict_self and
            // seccomp for an unprivileged caller; also stops setuid programs
            // from regaining privileges inside the sandbox.
            if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = &ruleset {
                // SAFETY: a plain syscall on an fd this closure owns (still open:
                // the closure is alive while it runs); flags 0. No memory is
                // passed, nothing allocated.
                let rc = unsafe {
                    libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32)
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let (Some(prog), Some(len)) = (&filter, fprog_len) {
                let fprog = libc::sock_fprog {
                    len,
                    filter: prog.as_ptr().cast_mut(),
                };
                // SAFETY: `fprog` points at `len` valid instructions owned by the
                // closure; the kernel copies the program during the call and does
                // not write through the pointer. Stack-only, no allocation.
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        0u32,
                        &fprog as *const libc::sock_fprog,
                    )
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        })
    }
}
