//! The spawn seen from the inside of the tool: signals, process group,
//! descriptors, errors reported from the child, confinement failures.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::exec::launch::SYNC_STDIN;

fn env() -> Env {
    vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))].into()
}

/// Runs `script` to its end (blocking); (stdout, raw wait status).
fn run_sh(script: &str, confine: Option<&ChildPlan>, stdin: &[u8]) -> (String, i32) {
    let s = spawn(
        &Command::Shell(script.into()),
        &env(),
        Path::new("/"),
        confine,
        stdin,
    )
    .unwrap();
    assert!(s.stdin.is_none(), "small input is written up front");
    drop(s.stderr);
    let mut out = Vec::new();
    let mut f = std::fs::File::from(s.stdout);
    // Non-blocking read end: poll until EOF.
    loop {
        let mut buf = [0u8; 4096];
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(2))
            }
            Err(e) => panic!("{e}"),
        }
    }
    let pid = rustix::process::Pid::from_raw(s.pid as i32).unwrap();
    let (_, st) = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
        .unwrap()
        .unwrap();
    (String::from_utf8(out).unwrap(), st.as_raw())
}

#[test]
fn child_has_default_signals_empty_mask_and_own_group() {
    // This test process ignores SIGPIPE (Rust's runtime does) and may have
    // inherited ignored real-time signals: the tool must see none of it.
    let (out, st) = run_sh(
        "read -r p c s pp g rest < /proc/$$/stat; echo \"pid=$p pgrp=$g\"; exec grep -E '^Sig(Blk|Ign)' /proc/self/status",
        None,
        b"",
    );
    assert_eq!(st, 0, "{out}");
    assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
    assert!(out.contains("SigIgn:\t0000000000000000"), "{out}");
    let ids = out.lines().find(|l| l.starts_with("pid=")).unwrap();
    let (p, g) = ids.split_once(' ').unwrap();
    assert_eq!(p.strip_prefix("pid="), g.strip_prefix("pgrp="), "{out}");
}

#[test]
fn only_the_three_pipes_reach_the_tool() {
    // An inheritable descriptor in this process (not close-on-exec).
    let (keep_r, _keep_w) = std::io::pipe().unwrap();
    let leaky: OwnedFd = keep_r.into();
    rustix::io::fcntl_setfd(&leaky, rustix::io::FdFlags::empty()).unwrap();

    let s = spawn(
        &Command::Shell("exec sleep 30".into()),
        &env(),
        Path::new("/"),
        None,
        b"{}",
    )
    .unwrap();
    let comm = format!("/proc/{}/comm", s.pid);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
        assert!(std::time::Instant::now() < end, "sleep never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{}/fd", s.pid))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
        .collect();
    fds.sort();
    let pid = rustix::process::Pid::from_raw(s.pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()).unwrap();
    assert_eq!(fds, [0, 1, 2]);
}

#[test]
fn errors_in_the_child_come_back_as_errno() {
    let missing = spawn(
        &Command::Exec(PathBuf::from("/nonexistent/tool")),
        &env(),
        Path::new("/"),
        None,
        b"{}",
    )
    .unwrap_err();
    assert_eq!(missing.raw_os_error(), Some(libc::ENOENT), "{missing}");

    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let not_exec = spawn(&Command::Exec(plain), &env(), Path::new("/"), None, b"").unwrap_err();
    assert_eq!(not_exec.raw_os_error(), Some(libc::EACCES), "{not_exec}");

    let bad_cwd = spawn(
        &Command::Shell("true".into()),
        &env(),
        &dir.path().join("gone"),
        None,
        b"",
    )
    .unwrap_err();
    assert_eq!(bad_cwd.raw_os_error(), Some(libc::ENOENT), "{bad_cwd}");

    let nul = spawn(
        &Command::Shell("a\0b".into()),
        &env(),
        Path::new("/"),
        None,
        b"",
    )
    .unwrap_err();
    assert_eq!(nul.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn a_plan_that_cannot_confine_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    // Not a Landlock ruleset: landlock_restrict_self refuses it in the child.
    let bogus: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
    let plan = ChildPlan {
        ruleset: Some(Arc::new(bogus)),
        filter: None,
    };
    let e = spawn(
        &Command::Shell(format!("touch '{}'", marker.display())),
        &env(),
        Path::new("/"),
        Some(&plan),
        b"",
    )
    .unwrap_err();
    assert!(e.raw_os_error().is_some(), "{e}");
    assert!(
        !marker.exists(),
        "the command ran although confinement failed"
    );
    // Nothing is left to reap and this thread is not confined.
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    assert!(status.contains("NoNewPrivs:\t0"), "{status}");
}

#[test]
fn large_stdin_is_left_to_the_caller() {
    let data = vec![b'x'; SYNC_STDIN + 1];
    let s = spawn(
        &Command::Shell("wc -c".into()),
        &env(),
        Path::new("/"),
        None,
        &data,
    )
    .unwrap();
    let (fd, written) = s.stdin.expect("kept for an async write");
    assert!(written <= data.len());
    drop(fd);
    let pid = rustix::process::Pid::from_raw(s.pid as i32).unwrap();
    rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()).unwrap();
}

#[test]
fn exit_codes_and_signals_are_the_wait_status() {
    let (_, st) = run_sh("exit 7", None, b"");
    assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 7, "{st:#x}");
    let (_, st) = run_sh("kill -TERM $$", None, b"");
    assert!(
        libc::WIFSIGNALED(st) && libc::WTERMSIG(st) == libc::SIGTERM,
        "{st:#x}"
    );
}
