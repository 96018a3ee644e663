//! What a call needs before it runs: dispatch fields, argument validation,
//! command validation and cool-down, environment, and the sandbox — or, for
//! a call that must leave the sandbox, the plan the bypass broker approves.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value};

use super::ProcInfo;
use crate::bypass::socket::CallIdentity;
use crate::bypass::{Capabilities, CapabilityGuard, Plan};
use crate::exec::{self, Call, Limits};
use crate::meta::{Command, Tool};
use crate::protocol::{ToolResult, take_dispatch};
use crate::sandbox::{Cooldown, CooldownConfig, ExpandContext, Prepared, Profile, Profiles};

/// The profile a call gets when it does not name one.
pub const DEFAULT_PROFILE: &str = "default";

/// One call as the caller asked for it.
pub struct Request {
    pub tool: Arc<Tool>,
    /// Arguments including dispatch fields (`bypass`, `timeout`, `sandbox`).
    pub args: Map<String, Value>,
    pub cwd: Option<PathBuf>,
    pub session: Option<String>,
    pub agent: String,
    pub background: bool,
}

/// A prepared call: ready to run, or waiting for approval first.
pub enum Planned {
    Ready {
        info: ProcInfo,
        call: Call,
        /// Keeps the call's bypass-socket capability valid; drop it when the call ends.
        capability: Option<CapabilityGuard>,
    },
    /// Runs outside the sandbox once the broker approves (`Broker::gate`).
    Approval {
        info: ProcInfo,
        plan: Plan,
        capability: Option<CapabilityGuard>,
    },
}

/// A loaded profile and the modification time of its file then.
type CachedProfile = (Option<SystemTime>, Arc<Profile>);

/// How long a prepared sandbox is reused for the same profile, working
/// directory and executable before its paths are expanded and looked up
/// again (the ruleset cache below it re-checks the paths on disk as often).
const PREPARED_TTL: Duration = Duration::from_secs(1);
/// Prepared sandboxes kept; past this the cache starts over.
const PREPARED_MAX: usize = 256;

/// Which prepared sandbox: the profile (by identity: an edited profile is a
/// new `Arc`), the working directory and the executable.
type PreparedKey = (usize, PathBuf, PathBuf);
/// When it was prepared, from which profile, and the result.
type CachedPrepared = (Instant, Arc<Profile>, Arc<Prepared>);

/// Server-wide rules every call goes through.
pub struct Policy {
    pub tools_path: String,
    pub default_cwd: PathBuf,
    pub limits: Limits,
    /// `None` with `--yolo`: no sandbox enforcement.
    profiles: Option<Profiles>,
    cooldown: Cooldown,
    cache: Mutex<HashMap<String, CachedProfile>>,
    /// The bypass socket and capabilities given to every call (server only).
    bypass: Option<Arc<Capabilities>>,
    /// This process's environment, captured once and shared: the base of
    /// every tool's (without any bypass variables of our own).
    env: exec::Vars,
    /// Path templates expand against `env` (working directory set per call).
    expand: ExpandContext,
    /// Recently prepared sandboxes: expanding a profile's paths and finding
    /// its ruleset was about a quarter of the server's time per call.
    prepared: Mutex<HashMap<PreparedKey, CachedPrepared>>,
}

impl Policy {
    /// `profiles` is `None` to run without enforcement (`--yolo`). Writes the
    /// default profile if missing and takes the cool-down settings from it.
    pub fn new(
        tools_path: String,
        default_cwd: PathBuf,
        limits: Limits,
        profiles: Option<Profiles>,
    ) -> Result<Policy, crate::sandbox::SandboxError> {
        let cooldown = match &profiles {
            Some(p) => p.load(DEFAULT_PROFILE)?.cooldown_config(),
            None => CooldownConfig::default(),
        };
        Ok(Policy {
            tools_path,
            default_cwd,
            limits,
            profiles,
            cooldown: Cooldown::new(cooldown),
            cache: Mutex::default(),
            bypass: None,
            expand: ExpandContext::new("/", std::env::vars_os()),
            env: std::env::vars_os()
                .filter(|(k, _)| k != "OLLIE_BYPASS_SOCKET" && k != "OLLIE_BYPASS_CAPABILITY")
                .collect(),
            prepared: Mutex::default(),
        })
    }

    /// Give every call `OLLIE_BYPASS_SOCKET` and its own `OLLIE_BYPASS_CAPABILITY`.
    pub fn set_bypass(&mut self, caps: Arc<Capabilities>) {
        self.bypass = Some(caps);
    }

    pub fn enforcing(&self) -> bool {
        self.profiles.is_some()
    }

    /// A profile, re-read only when its file changed.
    fn profile(&self, profiles: &Profiles, name: &str) -> Result<Arc<Profile>, String> {
        let path = profiles.dir().join(format!("{name}.yaml"));
        let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = cache
            .get(name)
            .filter(|(m, _)| mtime.is_some() && *m == mtime)
        {
            return Ok(p.clone());
        }
        let p = Arc::new(profiles.load(name).map_err(|e| e.to_string())?);
        cache.insert(name.to_string(), (mtime, p.clone()));
        Ok(p)
    }

    /// `profile` prepared for a call in `cwd` running `exe`: reused when the
    /// same was prepared less than [`PREPARED_TTL`] ago.
    fn prepared(
        &self,
        profile: &Arc<Profile>,
        cwd: &Path,
        exe: &Path,
    ) -> Result<Arc<Prepared>, crate::sandbox::SandboxError> {
        let key = (
            Arc::as_ptr(profile) as usize,
            cwd.to_path_buf(),
            exe.to_path_buf(),
        );
        let now = Instant::now();
        {
            let cache = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
            // The cached profile is compared too: a freed profile's address
            // may be reused by a new one.
            if let Some((at, p, prepared)) = cache.get(&key)
                && now.duration_since(*at) < PREPARED_TTL
                && Arc::ptr_eq(p, profile)
            {
                return Ok(prepared.clone());
            }
        }
        let prepared = Arc::new(profile.prepare(&self.expand.with_cwd(cwd), Some(exe))?);
        let mut cache = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= PREPARED_MAX {
            cache.clear();
        }
        cache.insert(key, (now, profile.clone(), prepared.clone()));
        Ok(prepared)
    }

    /// Turn a request into a runnable call, or the refusal the model sees.
    /// A call that needs approval is refused: there is no broker here
    /// (`toolsrv run`); the server uses [`Policy::plan`].
    pub fn prepare(&self, req: Request) -> Result<(ProcInfo, Call), ToolResult> {
        match self.plan(req)? {
            Planned::Ready { info, call, .. } => Ok((info, call)),
            Planned::Approval { info, .. } => Err(ToolResult::error(format!(
                "{}: this call needs approval to run outside the sandbox, and no approver is configured here; call it through `toolsrv serve` and approve it with `toolsrv approve`",
                info.tool
            ))),
        }
    }

    /// Turn a request into a runnable call, a plan awaiting approval, or the
    /// refusal the model sees.
    pub fn plan(&self, req: Request) -> Result<Planned, ToolResult> {
        let Request {
            tool,
            mut args,
            cwd,
            session,
            agent,
            background,
        } = req;
        let name = tool.name.as_str();
        let refuse = |msg: String| ToolResult::error(format!("{name}: {msg}"));

        self.cooldown
            .check(&agent)
            .map_err(|e| refuse(e.to_string()))?;
        let dispatch = take_dispatch(&mut args).map_err(|e| refuse(e.to_string()))?;
        let args = Value::Object(args);
        tool.validate_args(&args)
            .map_err(|e| refuse(e.to_string()))?;
        let command = tool.command.clone().ok_or_else(|| {
            refuse(
                "nothing to run (no executable beside its .meta, no usable cmd, not in PATH)"
                    .into(),
            )
        })?;
        let cwd = cwd.unwrap_or_else(|| self.default_cwd.clone());
        if !cwd.is_dir() {
            return Err(refuse(format!(
                "working directory {} does not exist",
                cwd.display()
            )));
        }
        let needs_approval = dispatch.bypass || tool.bypass || tool.sudo;
        let command_text = match &command {
            Command::Exec(p) => p.display().to_string(),
            Command::Shell(s) => s.clone(),
        };
        let mut env = exec::tool_env(
            &self.env,
            &self.tools_path,
            &cwd,
            session.as_deref(),
            Some(&agent),
        );
        let capability = match &self.bypass {
            None => None,
            Some(caps) => {
                env.set("OLLIE_BYPASS_SOCKET", caps.socket.as_os_str());
                let ident = CallIdentity::new(
                    name.to_string(),
                    agent.clone(),
                    session.clone(),
                    cwd.clone(),
                    env.clone(),
                );
                let (token, guard) = caps
                    .mint(ident)
                    .map_err(|e| refuse(format!("cannot create a bypass capability: {e}")))?;
                env.set("OLLIE_BYPASS_CAPABILITY", token);
                Some(guard)
            }
        };

        let (env, pre_exec, confine) = match &self.profiles {
            None if needs_approval => (env, None, None),
            None => {
                // `serve --yolo` says so loudly once, at start.
                tracing::debug!(tool = name, agent, "--yolo: running unconfined");
                (env, None, None)
            }
            Some(profiles) => {
                let profile_name = dispatch.sandbox.as_deref().unwrap_or(DEFAULT_PROFILE);
                let profile = self.profile(profiles, profile_name).map_err(refuse)?;
                if let Err(rej) = profile.validator().check(&command_text, &args) {
                    let mut msg = rej.to_string();
                    if let Err(cool) = self.cooldown.record_rejection(&agent) {
                        msg.push_str(&format!("; {cool}"));
                    }
                    tracing::warn!(tool = name, agent, rule = %rej.rule, "validation rejected a call");
                    return Err(refuse(msg));
                }
                if needs_approval {
                    // Approved calls run unconfined: no sandbox to prepare.
                    (env, None, None)
                } else {
                    let exe: &Path = match &command {
                        Command::Exec(p) => p,
                        Command::Shell(_) => Path::new("/bin/sh"),
                    };
                    let prepared = self
                        .prepared(&profile, &cwd, exe)
                        .map_err(|e| refuse(e.to_string()))?;
                    let missing = prepared.not_enforced();
                    if !missing.is_empty() {
                        tracing::warn!(tool = name, profile = profile_name, not_enforced = ?missing, "sandbox runs in best-effort mode");
                    }
                    let env = prepared.filter_env(env);
                    // The tool's process confines itself before exec.
                    (env, None, Some(prepared.child_plan()))
                }
            }
        };

        let info = ProcInfo {
            tool: name.to_string(),
            agent: agent.clone(),
            session: session.clone(),
            command: command_text.clone(),
            background,
        };
        let call = Call {
            tool: name.to_string(),
            command,
            args,
            cwd,
            env,
            timeout: dispatch.timeout,
            limits: self.limits.clone(),
            pre_exec,
            confine,
        };
        if needs_approval {
            let plan = Plan {
                call,
                sudo: tool.sudo,
                agent,
                session,
                command: command_text,
            };
            return Ok(Planned::Approval {
                info,
                plan,
                capability,
            });
        }
        Ok(Planned::Ready {
            info,
            call,
            capability,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path) -> Policy {
        Policy::new(
            String::new(),
            dir.to_path_buf(),
            Limits::default(),
            Some(Profiles::new(dir.join("sandbox"))),
        )
        .unwrap()
    }

    /// A prepared sandbox is reused for the same profile, directory and
    /// executable, and prepared anew when any of them differs, when the
    /// profile file changed, or after the TTL.
    #[test]
    fn prepared_sandboxes_are_reused_and_invalidated() {
        let t = tempfile::tempdir().unwrap();
        let p = policy(t.path());
        let profiles = Profiles::new(t.path().join("sandbox"));
        let prof = p.profile(&profiles, DEFAULT_PROFILE).unwrap();
        let (cwd, other) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let sh = Path::new("/bin/sh");

        let first = p.prepared(&prof, &cwd, sh).unwrap();
        assert!(Arc::ptr_eq(&first, &p.prepared(&prof, &cwd, sh).unwrap()));
        assert!(!Arc::ptr_eq(
            &first,
            &p.prepared(&prof, &other, sh).unwrap()
        ));
        let cat = Path::new("/bin/cat");
        assert!(!Arc::ptr_eq(&first, &p.prepared(&prof, &cwd, cat).unwrap()));

        // An edited profile is a new profile: prepared again.
        let file = t.path().join("sandbox/default.yaml");
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, format!("{text}\n# edited\n")).unwrap();
        let f = std::fs::File::options().write(true).open(&file).unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(5))
            .unwrap();
        let edited = p.profile(&profiles, DEFAULT_PROFILE).unwrap();
        assert!(!Arc::ptr_eq(&prof, &edited));
        assert!(!Arc::ptr_eq(
            &first,
            &p.prepared(&edited, &cwd, sh).unwrap()
        ));

        // Past the TTL the same key is prepared again.
        let again = p.prepared(&edited, &cwd, sh).unwrap();
        std::thread::sleep(PREPARED_TTL + Duration::from_millis(50));
        assert!(!Arc::ptr_eq(
            &again,
            &p.prepared(&edited, &cwd, sh).unwrap()
        ));
    }
}
