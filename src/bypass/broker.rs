//! The approval queue: pending requests, which observer fid holds each,
//! resolution by ID, expiry and cancellation of the waiting call.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::{Notify, oneshot};
use zeroize::Zeroizing;

use super::{Audit, Kind, Request, Settings};

/// The outcome of a request.
pub enum Decision {
    Approved {
        approver: String,
        /// For a credential request: the password (wiped on drop).
        password: Option<Zeroizing<String>>,
    },
    Rejected {
        /// Who or what rejected it: an approver, `timeout`, `broker`.
        by: String,
        reason: Option<String>,
    },
}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decision::Approved { approver, password } => f
                .debug_struct("Approved")
                .field("approver", approver)
                .field("password", &password.as_ref().map(|_| "<hidden>"))
                .finish(),
            Decision::Rejected { by, reason } => f
                .debug_struct("Rejected")
                .field("by", by)
                .field("reason", reason)
                .finish(),
        }
    }
}

impl Decision {
    /// "rejected by X (reason)" for results and logs.
    pub fn rejection_text(&self) -> Option<String> {
        match self {
            Decision::Approved { .. } => None,
            Decision::Rejected { by, reason } => Some(match reason {
                Some(r) if !r.is_empty() => format!("rejected by {by}: {r}"),
                _ => format!("rejected by {by}"),
            }),
        }
    }
}

/// Why a `bypass/resolve` write was refused.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "resolve: expected {{\"id\":N,\"approve\":true|false}} (plus \"password\" for a credential request): {0}"
    )]
    Syntax(String),
    #[error("resolve: no pending request with id {0} (already resolved, expired or cancelled)")]
    NoSuch(String),
    #[error(
        "resolve: request {0} asks for a sudo password: approve with {{\"id\":{0},\"approve\":true,\"password\":\"…\"}}"
    )]
    PasswordMissing(u64),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Resolution {
    id: u64,
    approve: bool,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    approver: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

struct Entry {
    req: Request,
    created: Instant,
    /// The reader (observer fid) this request was handed to.
    claimed_by: Option<u64>,
    tx: oneshot::Sender<Decision>,
}

#[derive(Default)]
struct Queue {
    next_id: u64,
    entries: BTreeMap<u64, Entry>,
}

/// The broker: one per server.
pub struct Broker {
    queue: Mutex<Queue>,
    notify: Notify,
    next_reader: AtomicU64,
    pub settings: Settings,
    pub audit: Audit,
}

/// A filed request, held by whoever waits for its decision. Dropping it
/// before the decision cancels the request.
pub struct Ticket {
    broker: Arc<Broker>,
    id: u64,
    rx: oneshot::Receiver<Decision>,
    done: bool,
}

/// The requests one observer fid holds; dropping it (fid clunked) offers
/// them to the other observers again.
#[derive(Default)]
pub struct Claims {
    slot: Mutex<Option<(Arc<Broker>, u64)>>,
}

impl Claims {
    fn reader(&self, broker: &Arc<Broker>) -> u64 {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Some((_, id)) => *id,
            None => {
                let id = broker.next_reader.fetch_add(1, Ordering::Relaxed);
                *slot = Some((broker.clone(), id));
                id
            }
        }
    }
}

impl Drop for Claims {
    fn drop(&mut self) {
        let slot = self.slot.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some((broker, reader)) = slot.take() {
            broker.release(reader);
        }
    }
}

impl Broker {
    pub fn new(settings: Settings, audit: Audit) -> Arc<Broker> {
        Arc::new(Broker {
            queue: Mutex::new(Queue {
                next_id: 1,
                entries: BTreeMap::new(),
            }),
            notify: Notify::new(),
            next_reader: AtomicU64::new(1),
            settings,
            audit,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Every update is a single insert/remove/field store: consistent after a panic.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// File `req` (its `id` is assigned here) and return the ticket to wait on.
    pub fn submit(self: &Arc<Self>, mut req: Request) -> Ticket {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut q = self.lock();
            let id = q.next_id;
            q.next_id += 1;
            req.id = id;
            self.audit.record("requested", &req, None, None);
            q.entries.insert(
                id,
                Entry {
                    req,
                    created: Instant::now(),
                    claimed_by: None,
                    tx,
                },
            );
            id
        };
        self.notify.notify_waiters();
        Ticket {
            broker: self.clone(),
            id,
            rx,
            done: false,
        }
    }

    /// The next request nobody holds, for the observer owning `claims`.
    /// Waits until there is one; dropping the future claims nothing.
    pub async fn next(self: &Arc<Self>, claims: &Claims) -> Request {
        let reader = claims.reader(self);
        loop {
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            {
                let mut q = self.lock();
                if let Some(e) = q.entries.values_mut().find(|e| e.claimed_by.is_none()) {
                    e.claimed_by = Some(reader);
                    let mut req = e.req.clone();
                    req.expires_in_ms = self
                        .settings
                        .timeout
                        .saturating_sub(e.created.elapsed())
                        .as_millis() as u64;
                    tracing::debug!(id = req.id, reader, "bypass request handed to an observer");
                    return req;
                }
            }
            notified.await;
        }
    }

    /// An observer went away: its unresolved requests are offered again.
    fn release(&self, reader: u64) {
        let mut n = 0;
        for e in self.lock().entries.values_mut() {
            if e.claimed_by == Some(reader) {
                e.claimed_by = None;
                n += 1;
            }
        }
        if n > 0 {
            tracing::info!(
                reader,
                requests = n,
                "observer left; re-offering its requests"
            );
            self.notify.notify_waiters();
        }
    }

    /// Apply a `bypass/resolve` write. `who` names the connection when the
    /// resolution does not name its approver.
    pub fn resolve(&self, text: &str) -> Result<(), ResolveError> {
        let v: serde_json::Value =
            serde_json::from_str(text.trim()).map_err(|e| ResolveError::Syntax(e.to_string()))?;
        if let Some(id) = v.get("id").filter(|id| id.as_u64().is_none()) {
            return Err(ResolveError::NoSuch(id.to_string()));
        }
        let r: Resolution =
            serde_json::from_value(v).map_err(|e| ResolveError::Syntax(e.to_string()))?;
        let password = r.password.map(Zeroizing::new);
        let approver: String = r
            .approver
            .filter(|a| !a.trim().is_empty())
            .unwrap_or_else(|| "unnamed observer".to_string())
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        let entry = {
            let mut q = self.lock();
            let e = q
                .entries
                .get(&r.id)
                .ok_or_else(|| ResolveError::NoSuch(r.id.to_string()))?;
            if e.req.kind == Kind::Credential && r.approve && password.is_none() {
                return Err(ResolveError::PasswordMissing(r.id));
            }
            q.entries
                .remove(&r.id)
                .ok_or_else(|| ResolveError::NoSuch(r.id.to_string()))?
        };
        let decision = if r.approve {
            let event = match entry.req.kind {
                Kind::Bypass => "approved",
                Kind::Credential => "credential-supplied",
            };
            self.audit.record(event, &entry.req, Some(&approver), None);
            Decision::Approved {
                approver,
                password: password.filter(|_| entry.req.kind == Kind::Credential),
            }
        } else {
            self.audit
                .record("rejected", &entry.req, Some(&approver), r.reason.as_deref());
            Decision::Rejected {
                by: approver,
                reason: r.reason,
            }
        };
        // The waiter may have just been dropped (cancelled): nothing to tell.
        let _ = entry.tx.send(decision);
        Ok(())
    }

    /// Remove a request that is still pending; `event` says why.
    fn withdraw(&self, id: u64, event: &str, reason: &str) -> bool {
        let Some(entry) = self.lock().entries.remove(&id) else {
            return false;
        };
        self.audit.record(event, &entry.req, None, Some(reason));
        true
    }

    /// How many requests are pending (for tests and logs).
    pub fn pending_count(&self) -> usize {
        self.lock().entries.len()
    }
}

impl Ticket {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Wait for the decision, or the broker's timeout (a rejection by `timeout`).
    pub async fn wait(&mut self) -> Decision {
        let timeout: Duration = self.broker.settings.timeout;
        let d = match tokio::time::timeout(timeout, &mut self.rx).await {
            Ok(Ok(d)) => d,
            Ok(Err(_)) => Decision::Rejected {
                by: "broker".into(),
                reason: Some("the request was dropped".into()),
            },
            Err(_) => {
                let reason = format!("no decision within {} s", timeout.as_secs_f64());
                if self.broker.withdraw(self.id, "expired", &reason) {
                    Decision::Rejected {
                        by: "timeout".into(),
                        reason: Some(reason),
                    }
                } else {
                    // Resolved at the very moment it expired: take the decision.
                    match self.rx.try_recv() {
                        Ok(d) => d,
                        Err(_) => Decision::Rejected {
                            by: "timeout".into(),
                            reason: Some(reason),
                        },
                    }
                }
            }
        };
        self.done = true;
        d
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.broker.withdraw(
                self.id,
                "cancelled",
                "the caller went away before a decision",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(timeout: Duration) -> (tempfile::TempDir, Arc<Broker>) {
        let dir = tempfile::tempdir().unwrap();
        let audit = Audit::open(&dir.path().join("audit.jsonl")).unwrap();
        let settings = Settings {
            timeout,
            ..Settings::default()
        };
        (dir, Broker::new(settings, audit))
    }

    fn req(kind: Kind) -> Request {
        Request::sample(kind)
    }

    #[tokio::test]
    async fn approve_reject_and_missing_password() {
        let (_d, b) = broker(Duration::from_secs(60));
        let mut t = b.submit(req(Kind::Bypass));
        let claims = Claims::default();
        let r = b.next(&claims).await;
        assert_eq!(r.id, t.id());
        b.resolve(&format!(
            r#"{{"id":{},"approve":true,"approver":"x"}}"#,
            r.id
        ))
        .unwrap();
        assert!(matches!(t.wait().await, Decision::Approved { .. }));
        assert!(matches!(
            b.resolve(&format!(r#"{{"id":{},"approve":true}}"#, r.id)),
            Err(ResolveError::NoSuch(_))
        ));

        let mut t = b.submit(req(Kind::Credential));
        let id = t.id();
        assert!(matches!(
            b.resolve(&format!(r#"{{"id":{id},"approve":true}}"#)),
            Err(ResolveError::PasswordMissing(_))
        ));
        b.resolve(&format!(
            r#"{{"id":{id},"approve":false,"approver":"y","reason":"no"}}"#
        ))
        .unwrap();
        let d = t.wait().await;
        assert_eq!(d.rejection_text().unwrap(), "rejected by y: no");
    }

    #[tokio::test]
    async fn released_claims_are_offered_again() {
        let (_d, b) = broker(Duration::from_secs(60));
        let _t = b.submit(req(Kind::Bypass));
        let first = Claims::default();
        let r1 = b.next(&first).await;
        let second = Claims::default();
        // Held by the first observer: the second sees nothing yet.
        let none = tokio::time::timeout(Duration::from_millis(50), b.next(&second)).await;
        assert!(none.is_err());
        drop(first);
        let r2 = tokio::time::timeout(Duration::from_secs(5), b.next(&second))
            .await
            .unwrap();
        assert_eq!(r1.id, r2.id);
    }

    #[tokio::test]
    async fn expiry_and_cancel_withdraw() {
        let (d, b) = broker(Duration::from_millis(50));
        let mut t = b.submit(req(Kind::Bypass));
        let dec = t.wait().await;
        assert!(dec.rejection_text().unwrap().contains("timeout"), "{dec:?}");
        assert_eq!(b.pending_count(), 0);
        let t = b.submit(req(Kind::Bypass));
        assert_eq!(b.pending_count(), 1);
        drop(t);
        assert_eq!(b.pending_count(), 0);
        let log = std::fs::read_to_string(d.path().join("audit.jsonl")).unwrap();
        assert!(log.contains(r#""event":"expired""#), "{log}");
        assert!(log.contains(r#""event":"cancelled""#), "{log}");
    }
}
