//! Signalling a call's process group and telling whether any live member of
//! it is left (zombies waiting for their reaper do not count).

use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};

/// Sends `sig` to every process of group `pgid`. Errors (typically ESRCH:
/// the group is already gone) are not interesting to callers.
pub(crate) fn signal_group(pgid: u32, sig: Signal) {
    let Some(pid) = to_pid(pgid) else { return };
    if let Err(e) = kill_process_group(pid, sig) {
        tracing::trace!(pgid, ?sig, error = %e, "signalling process group");
    }
}

fn to_pid(pgid: u32) -> Option<Pid> {
    // Never signal group 0 (our own) or a negative id by mistake.
    i32::try_from(pgid).ok().and_then(Pid::from_raw)
}

/// True if group `pgid` still has a member that is not a zombie.
///
/// `kill(-pgid, 0)` alone is not enough: orphaned members that died are
/// zombies of init until it reaps them, and they still count for `kill`.
pub fn group_alive(pgid: u32) -> bool {
    let Some(pid) = to_pid(pgid) else {
        return false;
    };
    if test_kill_process_group(pid).is_err() {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        // No /proc: trust kill(2).
        return true;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read(format!("/proc/{name}/stat")) else {
            continue;
        };
        if let Some((state, pgrp)) = parse_stat(&stat)
            && pgrp == pgid
            && state != b'Z'
            && state != b'X'
        {
            return true;
        }
    }
    false
}

/// State letter and process group from a `/proc/<pid>/stat` line.
fn parse_stat(stat: &[u8]) -> Option<(u8, u32)> {
    // "pid (comm) S ppid pgrp ..."; comm may contain spaces and parentheses.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let line = b"1234 (a) b (c) S 1 777 777 0 -1 4194560";
        assert_eq!(parse_stat(line), Some((b'S', 777)));
        assert_eq!(parse_stat(b"garbage"), None);
    }

    #[test]
    fn own_group_is_alive_and_bogus_is_not() {
        let me = rustix::process::getpgrp().as_raw_nonzero().get() as u32;
        assert!(group_alive(me));
        assert!(!group_alive(0));
        assert!(!group_alive(u32::MAX));
    }
}
