//! Sandbox profiles (YAML), path expansion, Landlock/seccomp rules applied
//! between fork and exec, environment filtering and command validation.
//!
//! The flow: [`Profiles::load`] reads `<config>/ollie/sandbox/<name>.yaml` into a
//! [`Profile`]; [`Profile::prepare`] expands its paths and builds, in the parent,
//! the Landlock ruleset fd and the seccomp BPF program ([`Prepared`]);
//! [`Prepared::child_plan`] gives them as a [`ChildPlan`] the tool's process
//! applies to itself before exec (`exec::Call::confine`, the server's path);
//! [`Prepared::into_pre_exec`] gives the closure a forked child runs between fork
//! and exec instead. [`validate`] checks command text before anything runs.

mod abi;
mod cache;
mod child;
mod expand;
mod ldd;
mod prepare;
mod profile;
mod seccomp;
pub mod validate;

use std::path::PathBuf;

pub use abi::{AbiInfo, enforcement_available};
pub use child::ChildPlan;
pub use expand::ExpandContext;
pub use ldd::find_in_path;
pub use prepare::{PreExec, Prepared};
pub use profile::{
    Advanced, DenyRuleSpec, Filesystem, General, Network, Profile, Profiles, ValidationSpec,
};
pub use validate::{Cooldown, CooldownConfig, CooldownError, Rejection, Validator};

/// Everything that can go wrong loading a profile or preparing a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The profile name is not a plain file name.
    #[error("invalid sandbox profile name {name:?}: use letters, digits, '-', '_' or '.'")]
    InvalidName { name: String },
    /// No `<name>.yaml` in the profiles directory.
    #[error(
        "unknown sandbox profile {name:?} in {dir}; existing profiles: {}",
        if existing.is_empty() { "(none)".to_string() } else { existing.join(", ") }
    )]
    UnknownProfile {
        name: String,
        dir: PathBuf,
        existing: Vec<String>,
    },
    /// The profile file exists but is not valid YAML for a profile.
    #[error("{}:{}: invalid sandbox profile: {message}", path.display(), line.map_or("?".to_string(), |l| l.to_string()))]
    Yaml {
        path: PathBuf,
        line: Option<u64>,
        message: String,
    },
    /// A value inside an otherwise well-formed profile is wrong.
    #[error("{}: invalid sandbox profile: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    /// Reading or writing a profile file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `best_effort: false` and the kernel cannot enforce everything asked for.
    #[error(
        "sandbox profile {profile:?} has best_effort: false but the kernel cannot enforce it: {}",
        missing.join("; ")
    )]
    NotEnforceable {
        profile: String,
        missing: Vec<String>,
    },
    /// Building the Landlock ruleset failed.
    #[error("building the Landlock ruleset failed: {0}")]
    Landlock(String),
    /// Building the seccomp filter failed.
    #[error("building the seccomp filter failed: {0}")]
    Seccomp(String),
    /// A rule path could not be opened for a reason other than not existing.
    #[error("sandbox path {}: {source}", path.display())]
    Path {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
