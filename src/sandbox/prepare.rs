//! Turning a profile into enforcement, in the parent: the Landlock ruleset fd
//! with its rules, the seccomp program, the env filter, and what is not enforced.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

use super::cache::{RuleKey, Stamps};
use super::child::ChildPlan;
pub use super::child::PreExec;
use super::seccomp::{self, NetDeny};
use super::{ExpandContext, Profile, SandboxError, abi, ldd};
use crate::exec::{Env, Vars};

/// A sandbox ready to be applied in a child process.
pub struct Prepared {
    plan: ChildPlan,
    env_names: Vec<String>,
    not_enforced: Vec<String>,
    abi: u32,
    /// The last base environment filtered, and its filtered copy.
    filtered_base: Mutex<Option<(Vars, Vars)>>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("abi", &self.abi)
            .field("landlock", &self.plan.ruleset.is_some())
            .field("seccomp", &self.plan.filter.is_some())
            .field("not_enforced", &self.not_enforced)
            .finish()
    }
}

/// Variables that always reach a tool.
const ALWAYS_ENV: &[&str] = &["PATH", "HOME", "PWD"];

impl Prepared {
    /// Keep only the variables the profile's `env` lists, plus `PATH`, `HOME`,
    /// `PWD` and every `OLLIE_*` variable (the tool contract). The filtered
    /// copy of a shared base is kept, so calls with the same base share it.
    pub fn filter_env(&self, env: Env) -> Env {
        let keep = |k: &std::ffi::OsStr| {
            let Some(k) = k.to_str() else { return false };
            ALWAYS_ENV.contains(&k)
                || k.starts_with("OLLIE_")
                || self.env_names.iter().any(|n| n == k)
        };
        let mut cached = self.filtered_base.lock().unwrap_or_else(|e| e.into_inner());
        match &*cached {
            Some((from, to)) if Arc::ptr_eq(from, env.base()) => {
                env.filtered(keep, Some(to.clone()))
            }
            _ => {
                let out = env.filtered(keep, None);
                *cached = Some((env.base().clone(), out.base().clone()));
                out
            }
        }
    }

    /// What the profile asked for that will not be enforced (best effort).
    pub fn not_enforced(&self) -> Vec<String> {
        self.not_enforced.clone()
    }

    /// The Landlock ABI used (0 = none).
    pub fn abi(&self) -> u32 {
        self.abi
    }

    /// The closure to run between fork and exec (e.g. `Command::pre_exec`).
    pub fn into_pre_exec(self) -> PreExec {
        self.plan.into_pre_exec()
    }

    /// What the tool's process applies to itself before exec
    /// (`exec::Call::confine`): the ruleset (shared with the profile's
    /// cache) and the seccomp program.
    pub fn child_plan(&self) -> ChildPlan {
        self.plan.clone()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Net {
    Unrestricted,
    Ports,
    Disabled,
}

fn ll_err(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Landlock(e.to_string())
}

/// The seccomp program for `mode`, compiled once per process.
fn seccomp_filter(mode: NetDeny) -> Result<Arc<Vec<libc::sock_filter>>, String> {
    type Slot = OnceLock<Result<Arc<Vec<libc::sock_filter>>, String>>;
    static ALL_BUT_TCP: Slot = OnceLock::new();
    static ALL_INET: Slot = OnceLock::new();
    let slot = match mode {
        NetDeny::AllButTcp => &ALL_BUT_TCP,
        NetDeny::AllInet => &ALL_INET,
    };
    slot.get_or_init(|| seccomp::build(mode).map(Arc::new))
        .clone()
}

impl Profile {
    fn net_mode(&self) -> Net {
        if !self.network.enabled {
            Net::Disabled
        } else if self.network.unrestricted {
            Net::Unrestricted
        } else {
            Net::Ports
        }
    }

    /// Build the sandbox for one call: expand paths against `ctx`, create the
    /// Landlock ruleset and the seccomp filter. `exe` is the resolved executable
    /// (for `add_exec`/`ldd`).
    pub fn prepare(
        &self,
        ctx: &ExpandContext,
        exe: Option<&Path>,
    ) -> Result<Prepared, SandboxError> {
        let kernel = abi::kernel_abi();
        let eff = kernel.min(ctx.max_abi.unwrap_or(u32::MAX));
        let net = self.net_mode();

        let mut wanted: Vec<(u32, &str)> = vec![
            (1, "filesystem rules"),
            (3, "truncate restriction"),
            (5, "device ioctl restriction"),
            (6, "signal scoping"),
        ];
        if net != Net::Unrestricted {
            wanted.push((4, "TCP bind/connect restriction"));
            wanted.push((6, "abstract unix socket scoping"));
        }
        let mut missing: Vec<String> = wanted
            .iter()
            .filter(|(need, _)| *need > eff)
            .map(|(need, what)| {
                format!("{what} needs Landlock ABI {need}, the kernel offers {eff}")
            })
            .collect();

        let filter = if net == Net::Disabled {
            let mode = if eff >= 4 {
                NetDeny::AllButTcp
            } else {
                NetDeny::AllInet
            };
            match seccomp_filter(mode) {
                Ok(f) => Some(f),
                Err(e) => {
                    missing.push(format!("seccomp socket filter: {e}"));
                    None
                }
            }
        } else {
            None
        };

        if !self.general.best_effort && !missing.is_empty() {
            return Err(SandboxError::NotEnforceable {
                profile: self.name.clone(),
                missing,
            });
        }

        let ruleset = if eff >= 1 {
            self.build_ruleset(ctx, exe, eff, net)?
        } else {
            None
        };
        if !missing.is_empty() {
            tracing::debug!(profile = %self.name, ?missing, "sandbox partly enforced");
        }
        Ok(Prepared {
            plan: ChildPlan { ruleset, filter },
            env_names: self.env.clone(),
            not_enforced: missing,
            abi: eff,
            filtered_base: Mutex::new(None),
        })
    }

    /// The profile's paths expanded against `ctx`, with their access.
    fn expanded_paths(
        &self,
        ctx: &ExpandContext,
        abi: ABI,
    ) -> Result<Vec<(PathBuf, BitFlags<AccessFs>)>, SandboxError> {
        let all = AccessFs::from_all(abi);
        let read = AccessFs::ReadFile | AccessFs::ReadDir;
        let fs = &self.filesystem;
        let lists: [(&str, &Vec<String>, BitFlags<AccessFs>); 4] = [
            ("ro", &fs.ro, read),
            ("rox", &fs.rox, read | AccessFs::Execute),
            ("rw", &fs.rw, all & !AccessFs::Execute),
            ("rwx", &fs.rwx, all),
        ];
        let mut paths = Vec::new();
        for (list, templates, access) in lists {
            for t in templates {
                match ctx.expand(t) {
                    Ok(Some(p)) => paths.push((p, access)),
                    Ok(None) => {
                        tracing::debug!(profile = %self.name, list, template = %t, "unset variable; path skipped")
                    }
                    Err(e) => {
                        return Err(SandboxError::Invalid {
                            path: self.path.clone(),
                            message: format!("filesystem.{list}: {e}"),
                        });
                    }
                }
            }
        }
        Ok(paths)
    }

    /// The ruleset for this call: from the profile's cache when the rules
    /// expand as before and none of their paths changed, else built now.
    fn build_ruleset(
        &self,
        ctx: &ExpandContext,
        exe: Option<&Path>,
        eff: u32,
        net: Net,
    ) -> Result<Option<Arc<OwnedFd>>, SandboxError> {
        let abi = ABI::from(eff as i32);
        let paths = self.expanded_paths(ctx, abi)?;
        let key = RuleKey {
            abi: eff,
            net: net as u8,
            best_effort: self.general.best_effort,
            paths: paths.iter().map(|(p, a)| (p.clone(), a.bits())).collect(),
            exe: exe.map(Path::to_path_buf),
            add_exec: self.advanced.add_exec,
            ldd: self.advanced.ldd,
            bind_tcp: self.network.bind_tcp.clone(),
            connect_tcp: self.network.connect_tcp.clone(),
        };
        self.rulesets
            .get_or_build(key, || self.create_ruleset(ctx, exe, eff, net, paths))
    }

    /// Builds a ruleset from scratch; also returns the stamps of every path
    /// it looked at, taken before looking.
    fn create_ruleset(
        &self,
        ctx: &ExpandContext,
        exe: Option<&Path>,
        eff: u32,
        net: Net,
        mut paths: Vec<(PathBuf, BitFlags<AccessFs>)>,
    ) -> Result<(Option<OwnedFd>, Stamps), SandboxError> {
        let abi = ABI::from(eff as i32);
        let level = if self.general.best_effort {
            CompatLevel::BestEffort
        } else {
            CompatLevel::HardRequirement
        };
        let all = AccessFs::from_all(abi);
        let mut rs = Ruleset::default()
            .set_compatibility(level)
            .handle_access(all)
            .map_err(ll_err)?;
        if net != Net::Unrestricted && eff >= 4 {
            rs = rs
                .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
                .map_err(ll_err)?;
        }
        if eff >= 6 {
            let mut scopes: BitFlags<Scope> = Scope::Signal.into();
            if net != Net::Unrestricted {
                scopes |= Scope::AbstractUnixSocket;
            }
            rs = rs.scope(scopes).map_err(ll_err)?;
        }
        let mut created = rs.create().map_err(ll_err)?;

        let exec = AccessFs::ReadFile | AccessFs::Execute;
        if let Some(exe) = exe {
            let path_var = ctx.env.get("PATH").map(|v| v.as_os_str());
            if self.advanced.add_exec {
                paths.push((exe.to_path_buf(), exec));
                for i in ldd::interpreters(exe, path_var) {
                    paths.push((i, exec));
                }
            }
            if self.advanced.ldd {
                let mut bins = vec![exe.to_path_buf()];
                bins.extend(ldd::interpreters(exe, path_var));
                for b in bins {
                    let real = std::fs::canonicalize(&b).unwrap_or(b);
                    for lib in ldd::shared_libraries(&real) {
                        paths.push((lib, exec));
                    }
                }
            }
        }
        let stamps = Stamps::take(paths.iter().map(|(p, _)| p.as_path()), exe);
        for (path, access) in paths {
            let meta = match std::fs::metadata(&path) {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "sandbox path skipped");
                    continue;
                }
            };
            let access = if meta.is_dir() {
                access
            } else {
                access & AccessFs::from_file(abi)
            };
            let fd = match PathFd::new(&path) {
                Ok(fd) => fd,
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "sandbox path skipped");
                    continue;
                }
            };
            tracing::debug!(path = %path.display(), ?access, "landlock rule");
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(ll_err)?;
        }
        if net == Net::Ports && eff >= 4 {
            for p in &self.network.bind_tcp {
                created = created
                    .add_rule(NetPort::new(*p, AccessNet::BindTcp))
                    .map_err(ll_err)?;
            }
            for p in &self.network.connect_tcp {
                created = created
                    .add_rule(NetPort::new(*p, AccessNet::ConnectTcp))
                    .map_err(ll_err)?;
            }
        }
        Ok((created.into(), stamps))
    }

    /// How many rulesets this profile has built rather than reused.
    pub fn rulesets_built(&self) -> u64 {
        self.rulesets.builds()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn profile(yaml: &str) -> Profile {
        Profile::parse("t", Path::new("t.yaml"), yaml).unwrap()
    }

    #[test]
    fn best_effort_false_refuses_what_the_kernel_lacks() {
        let ctx = ExpandContext::new("/", []).with_max_abi(3);
        let p = profile("general: {best_effort: false}\nnetwork: {enabled: false}\n");
        let msg = p.prepare(&ctx, None).unwrap_err().to_string();
        assert!(
            msg.contains("TCP bind/connect restriction needs Landlock ABI 4"),
            "{msg}"
        );
        assert!(msg.contains("the kernel offers 3"), "{msg}");

        let ctx = ExpandContext::new("/", []).with_max_abi(0);
        let msg = p.prepare(&ctx, None).unwrap_err().to_string();
        assert!(
            msg.contains("filesystem rules needs Landlock ABI 1"),
            "{msg}"
        );
    }

    #[test]
    fn best_effort_true_runs_and_reports() {
        let ctx = ExpandContext::new("/", []).with_max_abi(3);
        let p = profile("network: {enabled: true, connect_tcp: [443]}\n");
        let prep = p.prepare(&ctx, None).unwrap();
        assert_eq!(prep.abi(), 3);
        let ne = prep.not_enforced().join("\n");
        assert!(ne.contains("TCP bind/connect"), "{ne}");
        assert!(ne.contains("device ioctl"), "{ne}");
    }

    #[test]
    fn full_kernel_enforces_everything() {
        let abi = abi::kernel_abi();
        assert!(
            abi >= 6,
            "this suite needs Landlock ABI >= 6, kernel has {abi}"
        );
        let p = profile(
            "general: {best_effort: false}\nfilesystem: {ro: [/etc, /etc/hostname, /nonexistent]}\nnetwork: {enabled: false}\n",
        );
        let prep = p.prepare(&ExpandContext::new("/", []), None).unwrap();
        assert!(prep.not_enforced().is_empty());
        assert!(format!("{prep:?}").contains("landlock: true"));
    }

    #[test]
    fn env_filter() {
        let p = profile("env: [KEEP]\n");
        let prep = p
            .prepare(&ExpandContext::new("/", []).with_max_abi(0), None)
            .unwrap();
        let env = prep.filter_env(
            [
                ("KEEP", "1"),
                ("DROP", "2"),
                ("PATH", "/bin"),
                ("HOME", "/h"),
                ("PWD", "/w"),
                ("OLLIE_SESSION_ID", "s"),
                ("OLLIE_BYPASS_SOCKET", "/b"),
                ("AWS_SECRET_ACCESS_KEY", "x"),
            ]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .to_vec()
            .into(),
        );
        let keys: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(
            keys,
            vec![
                "KEEP",
                "PATH",
                "HOME",
                "PWD",
                "OLLIE_SESSION_ID",
                "OLLIE_BYPASS_SOCKET"
            ]
        );
    }
}
