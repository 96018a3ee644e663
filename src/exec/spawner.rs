//! Spawning from a dedicated thread that restricted itself first: children
//! inherit that thread's `no_new_privs`, Landlock domain and seccomp filter.
//!
//! A `pre_exec` hook makes std fork the whole (large, multi-threaded) server
//! for every child. Landlock domains, `no_new_privs` and seccomp filters
//! (without TSYNC) belong to one thread and are inherited by the children it
//! creates, so a thread that confines itself once can start any number of
//! confined children with `posix_spawn` (a vfork-style clone), and no hook.
//! The restriction stays on that thread: the rest of the process is untouched.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;

use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Stack of a spawner thread: it only runs `Command::spawn`.
const STACK: usize = 256 << 10;

/// What a spawn gives back: the command (to retry it, `None` if it was lost
/// with the thread) and the child or the error.
pub type Spawned = (Option<Command>, io::Result<Child>);

struct Job {
    cmd: Command,
    handle: Handle,
    reply: oneshot::Sender<Spawned>,
}

/// A thread that restricted itself once and spawns commands on request.
///
/// The thread ends when the last clone of the `Arc<Spawner>` is dropped and
/// the jobs already sent are done.
pub struct Spawner {
    tx: mpsc::Sender<Job>,
    /// The thread's kernel id, once it runs (0 before).
    tid: Arc<AtomicI32>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner").field("tid", &self.tid()).finish()
    }
}

/// The error every job gets when the thread could not restrict itself.
#[derive(Debug, Clone)]
struct SetupError {
    errno: Option<i32>,
    message: String,
}

impl SetupError {
    fn to_io(&self) -> io::Error {
        match self.errno {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::other(self.message.clone()),
        }
    }
}

impl Spawner {
    /// Starts the thread `name`; it runs `setup` on itself (e.g. applies a
    /// sandbox), then serves spawns. When `setup` fails, every spawn fails
    /// with its error and nothing is started.
    pub fn start(
        name: &str,
        setup: impl FnOnce() -> io::Result<()> + Send + 'static,
    ) -> io::Result<Spawner> {
        let (tx, rx) = mpsc::channel::<Job>();
        let tid = Arc::new(AtomicI32::new(0));
        let tid_out = tid.clone();
        // `start` returns once the thread has run `setup`, so `tid` is set
        // and the first spawn does not race the confinement.
        let (ready_tx, ready_rx) = mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name(name.to_string())
            .stack_size(STACK)
            .spawn(move || {
                tid_out.store(
                    rustix::thread::gettid().as_raw_nonzero().get(),
                    Ordering::Release,
                );
                let failed = setup().err().map(|e| SetupError {
                    errno: e.raw_os_error(),
                    message: e.to_string(),
                });
                let _ = ready_tx.send(());
                serve(rx, failed);
            })?;
        let _ = ready_rx.recv();
        Ok(Spawner { tx, tid })
    }

    /// Spawns `cmd` on the thread, registering the child with the current
    /// tokio runtime. Cancel-safe: a child whose caller went away is killed.
    pub async fn spawn(&self, cmd: Command) -> Spawned {
        let handle = match Handle::try_current() {
            Ok(h) => h,
            Err(e) => return (Some(cmd), Err(io::Error::other(e))),
        };
        let (reply, rx) = oneshot::channel();
        if let Err(mpsc::SendError(job)) = self.tx.send(Job { cmd, handle, reply }) {
            return (
                Some(job.cmd),
                Err(io::Error::other("the spawner thread has ended")),
            );
        }
        match rx.await {
            Ok(spawned) => spawned,
            Err(_) => (None, Err(io::Error::other("the spawner thread has ended"))),
        }
    }

    /// The kernel thread id of the spawner thread.
    pub fn tid(&self) -> i32 {
        self.tid.load(Ordering::Acquire)
    }
}

/// The thread's loop: one spawn per job until every sender is gone.
fn serve(rx: mpsc::Receiver<Job>, failed: Option<SetupError>) {
    for Job {
        mut cmd,
        handle,
        reply,
    } in rx
    {
        let _runtime = handle.enter();
        let child = match &failed {
            Some(e) => Err(e.to_io()),
            None => cmd.spawn(),
        };
        if let Err((_, Ok(mut child))) = reply.send((Some(cmd), child)) {
            // The caller went away: this child must not run unsupervised.
            let _ = child.start_kill();
        }
    }
}
