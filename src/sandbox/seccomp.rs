//! The seccomp filter used when a profile disables the network: what Landlock
//! cannot express (UDP, raw, packet and other socket families, io_uring) is refused here.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// How much of the IP stack to refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetDeny {
    /// Only TCP (`SOCK_STREAM`, protocol 0 or TCP) IPv4/IPv6 sockets may be
    /// created (Landlock then refuses their bind/connect).
    AllButTcp,
    /// No IPv4/IPv6 sockets at all (used when Landlock cannot restrict TCP).
    AllInet,
}

const X32_BIT: i64 = 0x4000_0000;

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| e.to_string())
}

/// Compile the filter for this architecture. Denied calls fail with `EACCES`.
pub(crate) fn build(mode: NetDeny) -> Result<Vec<libc::sock_filter>, String> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("unsupported architecture: {e}"))?;
    // Families other than AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK (which
    // cannot leave the host: routing/address queries) are refused outright:
    // AF_PACKET, AF_VSOCK, AF_BLUETOOTH, ...
    let (unix, inet, inet6, netlink) = (
        libc::AF_UNIX as u64,
        libc::AF_INET as u64,
        libc::AF_INET6 as u64,
        libc::AF_NETLINK as u64,
    );
    let mut socket_rules = vec![
        rule(vec![cond(0, SeccompCmpOp::Lt, unix)?])?,
        rule(vec![
            cond(0, SeccompCmpOp::Gt, inet)?,
            cond(0, SeccompCmpOp::Lt, inet6)?,
        ])?,
        rule(vec![
            cond(0, SeccompCmpOp::Gt, inet6)?,
            cond(0, SeccompCmpOp::Lt, netlink)?,
        ])?,
        rule(vec![cond(0, SeccompCmpOp::Gt, netlink)?])?,
    ];
    for family in [libc::AF_INET as u64, libc::AF_INET6 as u64] {
        match mode {
            NetDeny::AllInet => socket_rules.push(rule(vec![cond(0, SeccompCmpOp::Eq, family)?])?),
            NetDeny::AllButTcp => {
                // Any socket type other than SOCK_STREAM (flags masked off).
                for ty in (0..16u64).filter(|t| *t != libc::SOCK_STREAM as u64) {
                    socket_rules.push(rule(vec![
                        cond(0, SeccompCmpOp::Eq, family)?,
                        cond(1, SeccompCmpOp::MaskedEq(0xf), ty)?,
                    ])?);
                }
                // Stream sockets that are not TCP (SCTP, MPTCP, …): Landlock
                // TCP rules would not apply to them.
                socket_rules.push(rule(vec![
                    cond(0, SeccompCmpOp::Eq, family)?,
                    cond(2, SeccompCmpOp::Gt, libc::IPPROTO_TCP as u64)?,
                ])?);
                socket_rules.push(rule(vec![
                    cond(0, SeccompCmpOp::Eq, family)?,
                    cond(2, SeccompCmpOp::Ge, 1)?,
                    cond(2, SeccompCmpOp::Lt, libc::IPPROTO_TCP as u64)?,
                ])?);
            }
        }
    }
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, socket_rules);
    // io_uring can create sockets without socket(2).
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    if arch == TargetArch::x86_64 {
        // The x32 ABI numbers the same calls differently; refuse them outright.
        rules.insert(X32_BIT | libc::SYS_socket, Vec::new());
        rules.insert(X32_BIT | libc::SYS_io_uring_setup, Vec::new());
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    let prog: BpfProgram = filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    Ok(prog
        .into_iter()
        .map(|f| libc::sock_filter {
            code: f.code,
            jt: f.jt,
            jf: f.jf,
            k: f.k,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile() {
        assert!(build(NetDeny::AllButTcp).unwrap().len() > 10);
        assert!(build(NetDeny::AllInet).unwrap().len() > 5);
    }
}
