//! End-to-end: `toolsrv remote` refuses bad input and unreachable hosts with
//! a clear message, and leaves no local socket behind.

mod common;

use std::process::Command;

use common::bin;

fn remote(args: &[&str]) -> (i32, String) {
    let o = Command::new(bin())
        .arg("remote")
        .args(args)
        .env_remove("SSH_AUTH_SOCK")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn an_unreachable_host_is_a_clear_error_and_leaves_no_socket() {
    let d = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let sock = d.path().join("l/remote.sock");
    let (code, err) = remote(&[
        "127.0.0.1",
        "--port",
        &port,
        "--ssh-config",
        "/dev/null",
        "--local-socket",
        sock.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("probing the remote failed"), "{err}");
    assert!(err.contains("refused"), "{err}");
    assert!(!sock.exists());
}

#[test]
fn bad_arguments_are_refused_before_connecting() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("s.sock");
    let s = sock.to_str().unwrap();
    let (code, err) = remote(&["--local-socket", s, "--", "-oProxyCommand=x"]);
    assert_eq!(code, 2);
    assert!(err.contains("not an SSH destination"), "{err}");
    let (_, err) = remote(&["h", "--local-socket", s, "--ssh-option=-o Port=2"]);
    assert!(err.contains("KEY=VALUE"), "{err}");
    let (_, err) = remote(&["h", "--local-socket", s, "--remote-env", "=x"]);
    assert!(err.contains("KEY=VALUE"), "{err}");
    let (_, err) = remote(&["h", "--local-socket", s, "--tools", "/nonexistent/tools"]);
    assert!(err.contains("not a directory"), "{err}");
    let (_, err) = remote(&["h", "--local-socket", s, "--idle-timeout", "soon"]);
    assert!(err.contains("soon"), "{err}");
    assert!(!sock.exists());
}

#[test]
fn a_live_local_socket_is_not_taken_over() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("live.sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let (code, err) = remote(&["h", "--local-socket", sock.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("in use"), "{err}");
    assert!(sock.exists());
}
