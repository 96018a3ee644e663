//! The toolsrv namespace as one table of files, authentication, the
//! listener and the idle monitor.

mod auth;
mod call;
mod files;
mod listen;
mod namespace;
mod search;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use auth::{Auth, AuthError};
pub use listen::{ServeError, serve};
pub use namespace::Node;

use crate::bypass::{Audit, Broker, Capabilities};
use crate::exec::Limits;
use crate::meta::{Catalog, Discoverer};
use crate::notify::{Completion, Notifier};
use crate::proc::{Policy, ProcTable};
use crate::registry::Registry;
use crate::sandbox::Profiles;
use crate::search::{EmbedConfig, Searcher};

/// How the server was started.
#[derive(Debug, Clone)]
pub struct Config {
    /// Working directory for calls that do not name one.
    pub cwd: PathBuf,
    /// The Unix socket to listen on.
    pub listen: PathBuf,
    /// Tool directories, first wins.
    pub tools_dirs: Vec<PathBuf>,
    pub yolo: bool,
    pub no_auth: bool,
    /// Exit this long after the last connection closed.
    pub idle_timeout: Option<Duration>,
    /// With `idle_timeout`: exit this long after start if nobody connected.
    pub idle_grace: Duration,
    /// Finished processes are forgotten this long after they ended.
    pub gc_age: Duration,
    pub limits: Limits,
    /// Where sandbox profiles live (`None`: `$XDG_CONFIG_HOME/ollie/sandbox`).
    pub profiles_dir: Option<PathBuf>,
    /// Completion messages for background processes.
    pub notify: Option<Notifier>,
    /// The optional embedding ranker behind `search`.
    pub embed: Option<EmbedConfig>,
    /// Approval timeout, audit log and sudo user of the bypass path.
    pub bypass: crate::bypass::Settings,
}

/// Everything the namespace serves from.
pub struct Server {
    pub config: Config,
    pub auth: Auth,
    pub registry: Registry,
    pub discoverer: Arc<Discoverer>,
    pub procs: Arc<ProcTable>,
    pub policy: Policy,
    /// The search index of the current catalog, rebuilt when the catalog changes.
    searcher: std::sync::Mutex<Option<(Arc<Catalog>, Arc<Searcher>)>>,
    /// Pending approvals (`bypass/pending`, `bypass/resolve`).
    pub broker: Arc<Broker>,
    /// The capabilities of live calls for the tool-facing bypass socket.
    pub caps: Arc<Capabilities>,
    started_unix: u32,
    user: String,
}

impl Server {
    pub fn new(config: Config) -> Result<Self, ServeError> {
        let tools_path = std::env::join_paths(&config.tools_dirs)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let started_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        let user = std::env::var("USER").unwrap_or_else(|_| "toolsrv".to_string());
        let profiles = if config.yolo {
            None
        } else {
            let dir = config
                .profiles_dir
                .clone()
                .or_else(Profiles::default_dir)
                .ok_or(ServeError::NoConfigDir)?;
            Some(Profiles::new(dir))
        };
        let mut policy = Policy::new(
            tools_path,
            config.cwd.clone(),
            config.limits.clone(),
            profiles,
        )?;
        let procs = ProcTable::new();
        if let Some(n) = config.notify.clone() {
            procs.set_on_exit(Box::new(move |p, fin| {
                let (Some(session), true) = (p.info.session.clone(), p.info.background) else {
                    return;
                };
                n.notify(Completion {
                    pid: p.id,
                    tool: p.info.tool.clone(),
                    session,
                    agent: p.info.agent.clone(),
                    exit_code: fin.outcome.status.code,
                    signal: fin.outcome.status.signal,
                    runtime: fin.outcome.duration,
                    truncated: fin.outcome.truncated,
                });
            }));
        }
        let audit_path = config
            .bypass
            .audit_log
            .clone()
            .or_else(crate::bypass::default_audit_path)
            .ok_or(crate::bypass::BypassError::NoAuditPath)?;
        let broker = Broker::new(config.bypass.clone(), Audit::open(&audit_path)?);
        let caps = Capabilities::new(crate::bypass::socket::socket_path(&config.listen));
        policy.set_bypass(caps.clone());
        Ok(Server {
            auth: Auth::new(!config.no_auth).map_err(|source| ServeError::Io {
                what: "cannot create a session token",
                path: config.listen.clone(),
                source,
            })?,
            registry: Registry::new(),
            discoverer: Arc::new(Discoverer::new(config.tools_dirs.clone())),
            procs,
            policy,
            searcher: std::sync::Mutex::default(),
            broker,
            caps,
            started_unix,
            user,
            config,
        })
    }
}
