//! The process table: synchronous and background calls, their output,
//! wait/stat/ctl, and garbage collection of finished processes.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::exec::{self, Call, Outcome, Output};
use crate::protocol::ToolResult;

mod prepare;

pub use prepare::{DEFAULT_PROFILE, Planned, Policy, Request};

/// Why a process-control request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcError {
    #[error("no process {0}")]
    NotFound(u64),
    #[error("process {0} is still running: signal it first or wait for it")]
    StillRunning(u64),
    #[error("process {0} has already exited")]
    Exited(u64),
    #[error("cannot signal process {id}: {reason}")]
    Signal { id: u64, reason: String },
}

/// Who asked for a process and what it runs.
#[derive(Debug, Clone, Default)]
pub struct ProcInfo {
    pub tool: String,
    pub agent: String,
    pub session: Option<String>,
    /// The command as shown to people (`stat`, `list`).
    pub command: String,
    pub background: bool,
}

/// How a process ended.
#[derive(Debug)]
pub struct Finished {
    pub outcome: Outcome,
    pub ended: SystemTime,
    ended_at: Instant,
}

impl Finished {
    /// The exit code as `wait` reports it: the status, or -1 when a signal ended it.
    pub fn code(&self) -> i32 {
        self.outcome.status.code.unwrap_or(-1)
    }
}

/// One tracked process.
pub struct Proc {
    pub id: u64,
    pub info: ProcInfo,
    started: SystemTime,
    started_at: Instant,
    pub output: Arc<Output>,
    cancel: CancellationToken,
    os_pid: AtomicU32,
    /// Waiting at the bypass broker's gate (`stat` says `pending-approval`).
    gated: AtomicBool,
    done: watch::Sender<Option<Arc<Finished>>>,
}

/// What `stat` and `proc/list` show of a process.
#[derive(Debug, Serialize)]
pub struct ProcStat<'a> {
    pub pid: u64,
    pub os_pid: Option<u32>,
    pub state: &'static str,
    pub tool: &'a str,
    pub agent: &'a str,
    pub session: Option<&'a str>,
    pub command: &'a str,
    pub background: bool,
    pub started: u64,
    pub runtime_ms: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub truncated: bool,
    pub output_bytes: u64,
}

impl Proc {
    /// The result once the process has ended, without waiting.
    pub fn finished(&self) -> Option<Arc<Finished>> {
        self.done.borrow().clone()
    }

    /// Wait for the process to end.
    pub async fn wait(&self) -> Arc<Finished> {
        let mut rx = self.done.subscribe();
        loop {
            if let Some(f) = rx.borrow_and_update().clone() {
                return f;
            }
            if rx.changed().await.is_err() {
                // The sender lives as long as `self`; unreachable in practice,
                // but never spin: report whatever is there.
                if let Some(f) = self.done.borrow().clone() {
                    return f;
                }
                std::future::pending::<()>().await;
            }
        }
    }

    /// Record how the process ended, wake its waiters and run the exit hook.
    fn finish(&self, outcome: Outcome, on_exit: Option<&OnExit>) -> Arc<Finished> {
        let fin = Arc::new(Finished {
            outcome,
            ended: SystemTime::now(),
            ended_at: Instant::now(),
        });
        self.done.send_replace(Some(fin.clone()));
        if let Some(hook) = on_exit {
            hook(self, &fin);
        }
        fin
    }

    /// Ask the process to stop (its group gets TERM, then KILL after a grace).
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Deliver signal `sig` to the process's group.
    pub fn signal(&self, sig: i32) -> Result<(), ProcError> {
        if self.finished().is_some() {
            return Err(ProcError::Exited(self.id));
        }
        let signal = rustix::process::Signal::from_named_raw(sig).ok_or(ProcError::Signal {
            id: self.id,
            reason: format!("{sig} is not a signal number"),
        })?;
        let pid = self.os_pid.load(Ordering::Acquire);
        if pid == 0 {
            // Still waiting for approval (or about to spawn): a terminating
            // signal cancels the call, which then never runs.
            if matches!(sig, 1 | 2 | 9 | 15) {
                tracing::info!(pid = self.id, sig, "cancelled before it started");
                self.cancel();
                return Ok(());
            }
            return Err(ProcError::Signal {
                id: self.id,
                reason: "it has not started yet; only HUP, INT, KILL or TERM cancel it now".into(),
            });
        }
        let pgid = rustix::process::Pid::from_raw(pid as i32).ok_or(ProcError::Signal {
            id: self.id,
            reason: "bad pid".into(),
        })?;
        rustix::process::kill_process_group(pgid, signal).map_err(|e| ProcError::Signal {
            id: self.id,
            reason: e.to_string(),
        })
    }

    pub fn stat(&self) -> ProcStat<'_> {
        let fin = self.finished();
        let (runtime, state) = match &fin {
            Some(f) => (f.ended_at.duration_since(self.started_at), "exited"),
            None if self.gated.load(Ordering::Acquire) => {
                (self.started_at.elapsed(), "pending-approval")
            }
            None => (self.started_at.elapsed(), "running"),
        };
        let o = fin.as_ref().map(|f| &f.outcome);
        ProcStat {
            pid: self.id,
            os_pid: match self.os_pid.load(Ordering::Acquire) {
                0 => None,
                p => Some(p),
            },
            state,
            tool: &self.info.tool,
            agent: &self.info.agent,
            session: self.info.session.as_deref(),
            command: &self.info.command,
            background: self.info.background,
            started: self
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            runtime_ms: runtime.as_millis() as u64,
            exit_code: o.and_then(|o| o.status.code),
            signal: o.and_then(|o| o.status.signal),
            timed_out: o.is_some_and(|o| o.timed_out),
            cancelled: o.is_some_and(|o| o.cancelled),
            truncated: self.output.truncated(),
            output_bytes: self.output.total_bytes(),
        }
    }
}

/// Runs a started process's call to its end.
async fn run_call(p: &Proc, call: Call, output: Arc<Output>) -> Outcome {
    let outcome = exec::run(call, output, p.cancel.clone(), |pid| {
        p.os_pid.store(pid, Ordering::Release);
    })
    .await;
    tracing::debug!(pid = p.id, tool = %p.info.tool, code = ?outcome.status.code, "process ended");
    outcome
}

/// Records a process driven in its caller's task as cancelled when that
/// task drops it before the end (`exec::run` stops the group on drop).
struct FinishOnDrop {
    proc: Option<Arc<Proc>>,
    on_exit: Arc<std::sync::OnceLock<OnExit>>,
}

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        let Some(p) = self.proc.take().filter(|p| p.finished().is_none()) else {
            return;
        };
        tracing::info!(pid = p.id, tool = %p.info.tool, "request cancelled; stopping process");
        let outcome = Outcome::without_process(
            ToolResult::error(format!("tool `{}` was cancelled", p.info.tool)),
            &p.output,
            true,
            p.started_at.elapsed(),
        );
        p.finish(outcome, self.on_exit.get());
    }
}

/// Called once for every process that ends (for completion messages).
pub type OnExit = Box<dyn Fn(&Proc, &Finished) + Send + Sync>;

/// Every process the server tracks, by toolsrv PID.
#[derive(Default)]
pub struct ProcTable {
    next: AtomicU64,
    procs: Mutex<BTreeMap<u64, Arc<Proc>>>,
    on_exit: Arc<std::sync::OnceLock<OnExit>>,
}

impl ProcTable {
    pub fn new() -> Arc<Self> {
        Arc::new(ProcTable {
            next: AtomicU64::new(1),
            procs: Mutex::default(),
            on_exit: Arc::default(),
        })
    }

    /// Set the hook run when a process ends (only the first call takes effect).
    pub fn set_on_exit(&self, hook: OnExit) {
        let _ = self.on_exit.set(hook);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Proc>>> {
        // Every update is one insert or remove: a poisoned map is still consistent.
        self.procs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start `call` as a new tracked process; it runs until it ends or is cancelled.
    pub fn start(&self, info: ProcInfo, call: Call) -> Arc<Proc> {
        let cap = call.limits.output_cap;
        self.start_gated(info, cap, false, |_| async move { Ok(call) })
    }

    /// Start `call` as a tracked process driven by the returned future, in
    /// the caller's task: a synchronous request runs its call itself, with
    /// no task of its own and no hand-off on the way back. The process is
    /// visible to `stat`, `list`, `ctl` and `wait` like any other. Dropping
    /// the future before it ends stops the process group and records the
    /// call as cancelled.
    pub fn start_inline(
        &self,
        info: ProcInfo,
        call: Call,
    ) -> (
        Arc<Proc>,
        impl Future<Output = Arc<Finished>> + Send + 'static,
    ) {
        let (p, output) = self.insert(info, call.limits.output_cap, false);
        let mut guard = FinishOnDrop {
            proc: Some(p.clone()),
            on_exit: self.on_exit.clone(),
        };
        let proc = p.clone();
        let run = async move {
            let outcome = run_call(&proc, call, output).await;
            guard.proc = None;
            proc.finish(outcome, guard.on_exit.get())
        };
        (p, run)
    }

    /// A new process in the table, not started yet.
    fn insert(&self, info: ProcInfo, output_cap: usize, gated: bool) -> (Arc<Proc>, Arc<Output>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let output = Arc::new(Output::new(output_cap));
        let proc = Arc::new(Proc {
            id,
            info,
            started: SystemTime::now(),
            started_at: Instant::now(),
            output: output.clone(),
            cancel: CancellationToken::new(),
            os_pid: AtomicU32::new(0),
            gated: AtomicBool::new(gated),
            done: watch::Sender::new(None),
        });
        self.lock().insert(id, proc.clone());
        (proc, output)
    }

    /// Start a process that first waits at a gate (the bypass broker):
    /// `gate` gets the new PID and gives the call to run, or the result of a
    /// call that will not run. With `gated`, `stat` says `pending-approval`
    /// until the gate opens; cancelling the process drops the gate future.
    pub fn start_gated<F, G>(
        &self,
        info: ProcInfo,
        output_cap: usize,
        gated: bool,
        gate: G,
    ) -> Arc<Proc>
    where
        G: FnOnce(u64) -> F,
        F: Future<Output = Result<Call, ToolResult>> + Send + 'static,
    {
        let (proc, output) = self.insert(info, output_cap, gated);
        let p = proc.clone();
        let on_exit = self.on_exit.clone();
        let gate = gate(p.id);
        tokio::spawn(async move {
            let cancel = p.cancel.clone();
            let opened = tokio::select! {
                r = gate => r,
                () = cancel.cancelled() => Err(ToolResult::error(format!(
                    "tool `{}` was cancelled while waiting for approval",
                    p.info.tool
                ))),
            };
            p.gated.store(false, Ordering::Release);
            let outcome = match opened {
                Ok(call) => run_call(&p, call, output).await,
                Err(result) => Outcome::without_process(
                    result,
                    &output,
                    cancel.is_cancelled(),
                    p.started_at.elapsed(),
                ),
            };
            p.finish(outcome, on_exit.get());
        });
        proc
    }

    /// Track an already finished call (one refused before it ran).
    pub fn get(&self, id: u64) -> Option<Arc<Proc>> {
        self.lock().get(&id).cloned()
    }

    /// Processes, optionally only one agent's, in PID order.
    pub fn list(&self, agent: Option<&str>) -> Vec<Arc<Proc>> {
        self.lock()
            .values()
            .filter(|p| agent.is_none_or(|a| p.info.agent == a))
            .cloned()
            .collect()
    }

    pub fn ids(&self) -> Vec<u64> {
        self.lock().keys().copied().collect()
    }

    /// Remove a finished process from the table.
    pub fn dismiss(&self, id: u64) -> Result<(), ProcError> {
        let mut procs = self.lock();
        let p = procs.get(&id).ok_or(ProcError::NotFound(id))?;
        if p.finished().is_none() {
            return Err(ProcError::StillRunning(id));
        }
        procs.remove(&id);
        Ok(())
    }

    /// Drop finished processes that ended more than `max_age` ago; returns how many.
    pub fn gc(&self, max_age: Duration) -> usize {
        let mut procs = self.lock();
        let before = procs.len();
        procs.retain(|_, p| p.finished().is_none_or(|f| f.ended_at.elapsed() < max_age));
        before - procs.len()
    }

    /// Cancel every running process and wait until all have ended.
    pub async fn kill_all(&self) {
        let running: Vec<_> = self
            .lock()
            .values()
            .filter(|p| p.finished().is_none())
            .cloned()
            .collect();
        for p in &running {
            p.cancel();
        }
        for p in running {
            p.wait().await;
        }
    }
}
