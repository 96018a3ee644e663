//! Which Landlock ABI the running kernel offers, found through the `landlock`
//! crate's own compatibility checks, and what each ABI adds.

use std::fmt;
use std::sync::OnceLock;

use landlock::{
    AccessFs, AccessNet, CompatLevel, Compatible, RestrictSelf, RestrictSelfAttr, Ruleset,
    RulesetAttr, Scope,
};

/// The Landlock ABI the kernel offers, with the features that come with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbiInfo {
    /// Landlock ABI version (0 = no Landlock).
    pub abi: u32,
    /// Human-readable names of the features available at this ABI.
    pub features: Vec<&'static str>,
}

impl fmt::Display for AbiInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Landlock ABI {} ({})",
            self.abi,
            self.features.join(", ")
        )
    }
}

/// Feature names and the ABI that introduced them.
pub(crate) const FEATURES: &[(u32, &str)] = &[
    (1, "filesystem access control"),
    (2, "refer (cross-directory rename/link)"),
    (3, "truncate"),
    (4, "TCP bind/connect rules"),
    (5, "ioctl on devices"),
    (6, "abstract unix socket and signal scoping"),
    (7, "audit logging flags"),
    (8, "all-threads restriction"),
    (9, "unix socket path resolution"),
    (10, "UDP rules"),
];

/// The Landlock ABI of the running kernel (cached after the first probe).
///
/// The crate does not expose the raw version on purpose; we ask it, with
/// `HardRequirement`, whether the newest right of each ABI can be handled.
pub(crate) fn kernel_abi() -> u32 {
    static ABI: OnceLock<u32> = OnceLock::new();
    *ABI.get_or_init(probe)
}

fn hard() -> Ruleset {
    Ruleset::default().set_compatibility(CompatLevel::HardRequirement)
}

fn fs(a: AccessFs) -> bool {
    hard().handle_access(a).is_ok()
}

fn net(a: AccessNet) -> bool {
    hard().handle_access(a).is_ok()
}

fn probe() -> u32 {
    let self_flags = || RestrictSelf::default().set_compatibility(CompatLevel::HardRequirement);
    if net(AccessNet::BindUdp) {
        10
    } else if fs(AccessFs::ResolveUnix) {
        9
    } else if self_flags().all_threads(true).is_ok() {
        8
    } else if self_flags().log_subdomains(false).is_ok() {
        7
    } else if hard().scope(Scope::Signal).is_ok() {
        6
    } else if fs(AccessFs::IoctlDev) {
        5
    } else if net(AccessNet::ConnectTcp) {
        4
    } else if fs(AccessFs::Truncate) {
        3
    } else if fs(AccessFs::Refer) {
        2
    } else if fs(AccessFs::Execute) {
        1
    } else {
        0
    }
}

pub(crate) fn info(abi: u32) -> AbiInfo {
    AbiInfo {
        abi,
        features: FEATURES
            .iter()
            .filter(|(v, _)| *v <= abi)
            .map(|(_, n)| *n)
            .collect(),
    }
}

/// Whether this kernel can enforce a sandbox at all; for CI guards and `check`.
pub fn enforcement_available() -> Result<AbiInfo, String> {
    match kernel_abi() {
        0 => Err(
            "Landlock is not available on this kernel (not built in, or not enabled at \
                  boot: add `landlock` to the `lsm=` kernel parameter)"
                .to_string(),
        ),
        abi => Ok(info(abi)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_is_consistent() {
        let abi = kernel_abi();
        let i = info(abi);
        assert_eq!(i.features.len(), abi.min(10) as usize);
    }
}
