//! End-to-end: `sudo: true` tools pass the bypass gate, then the credential
//! gate with real `sudo` — NOPASSWD (toolsrv-np) or a password piped to
//! `sudo -S` (toolsrv-pw) that appears in no log and no argument list —
//! and the terminal approver driven through a pseudo-terminal.

mod bypass_common;
mod common;

use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bypass_common::{Bypass, Observer, ensure_test_users, eventually, procs_exposing, write_tool};
use serde_json::{Value, json};

/// The password `.ci/bypass-users` gives toolsrv-pw.
const PASSWORD: &str = "toolsrv-pw-Secret-42";

/// Prints its uid and exactly what it read on stdin (bracketed).
fn tools(t: &std::path::Path) {
    write_tool(
        t,
        "rootid",
        r#"{"description":"Who am I, as root.","sudo":true,"args":{"type":"object","properties":{"text":{"type":"string"}}}}"#,
        Some(
            "#!/bin/sh\ninput=$(cat; echo .)\nsleep 0.3\nprintf 'uid=%s\\nstdin=[%s]\\n' \"$(id -u)\" \"${input%.}\"\n",
        ),
    );
}

const EXPECTED_STDIN: &str = "stdin=[{\"text\":\"hi\"}\n]";

/// These tests never pass by skipping: without `sudo` and the test users
/// (both set up by `.ci/run`) they fail and say what is missing.
fn require_sudo_and_users() {
    assert!(
        which_sudo(),
        "`sudo` is not installed: `apt-get install sudo` (.ci/run does it)"
    );
    assert!(
        ensure_test_users(),
        "the sudo test users are missing and cannot be created: run .ci/bypass-users as root"
    );
}

fn which_sudo() -> bool {
    std::process::Command::new("sudo")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn nopasswd_needs_no_credential_and_denial_never_reaches_the_gate() {
    require_sudo_and_users();
    let b = Bypass::start_as("toolsrv-np", &[], tools);
    let mut c = b.session();
    c.write("ctl", b"load a rootid").unwrap();

    // Denied bypass: no credential request follows, the tool does not run.
    let h = b.call_in_thread("a", "rootid", json!({"text": "hi"}));
    let mut o = Observer::new(&b.s.socket);
    let req = o.next();
    assert_eq!(req["kind"], "bypass");
    assert_eq!(req["sudo_user"], "root");
    o.resolve(json!({"id": req["id"], "approve": false, "approver": "t"}))
        .unwrap();
    let r = h.join().unwrap();
    assert!(r.is_error);
    assert!(r.joined_text().contains("rejected by t"), "{r:?}");
    let kinds: Vec<Value> = b.audit_lines().iter().map(|l| l["kind"].clone()).collect();
    assert!(kinds.iter().all(|k| k == "bypass"), "{kinds:?}");

    // Approved: NOPASSWD, so it runs as root with no second request.
    let h = b.call_in_thread("a", "rootid", json!({"text": "hi"}));
    let req = o.next();
    o.resolve(json!({"id": req["id"], "approve": true, "approver": "t"}))
        .unwrap();
    let r = h.join().unwrap();
    let text = r.joined_text();
    assert!(!r.is_error, "{text}\n{}", b.s.log_text());
    assert!(text.contains("uid=0"), "{text}");
    assert!(text.contains(EXPECTED_STDIN), "{text}");
    assert!(b.audit_lines().iter().all(|l| l["kind"] == "bypass"));
}

/// Scan every process's argv and environment for the password until stopped.
fn scanner() -> (Arc<AtomicBool>, std::thread::JoinHandle<Vec<String>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || {
        let mut hits = Vec::new();
        let mut scans = 0;
        while !s.load(Ordering::Acquire) {
            hits.extend(procs_exposing(PASSWORD));
            scans += 1;
        }
        assert!(scans > 0);
        hits
    });
    (stop, h)
}

#[test]
fn password_reaches_sudo_s_and_nowhere_else() {
    require_sudo_and_users();
    let b = Bypass::start_as("toolsrv-pw", &[], tools);
    let mut c = b.session();
    c.write("ctl", b"load a rootid").unwrap();
    let (stop, scan) = scanner();

    let h = b.call_in_thread("a", "rootid", json!({"text": "hi"}));
    let mut o = Observer::new(&b.s.socket);
    let req = o.next();
    assert_eq!(req["kind"], "bypass");
    o.resolve(json!({"id": req["id"], "approve": true, "approver": "t"}))
        .unwrap();
    let cred = o.next();
    assert_eq!(cred["kind"], "credential", "{cred}");
    assert!(
        cred["prompt"].as_str().unwrap().contains("toolsrv-pw"),
        "{cred}"
    );
    // A credential approval needs the password.
    let err = o
        .resolve(json!({"id": cred["id"], "approve": true}))
        .unwrap_err();
    assert!(err.contains("password"), "{err}");
    o.resolve(json!({"id": cred["id"], "approve": true, "password": PASSWORD, "approver": "t"}))
        .unwrap();
    let r = h.join().unwrap();
    stop.store(true, Ordering::Release);
    let hits = scan.join().unwrap();
    let text = r.joined_text();
    assert!(!r.is_error, "{text}\n{}", b.s.log_text());
    assert!(text.contains("uid=0"), "{text}");
    assert!(text.contains(EXPECTED_STDIN), "{text}");
    assert!(hits.is_empty(), "password visible in: {hits:?}");

    // A wrong password: sudo refuses, the tool does not run as root.
    let h = b.call_in_thread("a", "rootid", json!({"text": "hi"}));
    let req = o.next();
    o.resolve(json!({"id": req["id"], "approve": true}))
        .unwrap();
    let cred = o.next();
    o.resolve(json!({"id": cred["id"], "approve": true, "password": "wrong-password"}))
        .unwrap();
    let r = h.join().unwrap();
    assert!(r.is_error, "{r:?}");
    assert!(!r.joined_text().contains("uid=0"), "{r:?}");

    let log = b.s.log_text();
    let audit = std::fs::read_to_string(&b.audit).unwrap();
    assert!(!log.contains(PASSWORD), "password in the server log");
    assert!(!audit.contains(PASSWORD), "password in the audit log");
    assert!(audit.contains("credential-supplied"), "{audit}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&b.audit).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

/// Everything a child writes, collected by a thread.
fn collect(mut r: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            b.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    buf
}

fn shown(buf: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
}

#[test]
fn terminal_approver_through_a_pty() {
    require_sudo_and_users();
    let b = Bypass::start_as("toolsrv-pw", &[], tools);
    let mut c = b.session();
    c.write("ctl", b"load a rootid").unwrap();
    let h = b.call_in_thread("a", "rootid", json!({"text": "hi"}));

    // `script` gives the approver a pseudo-terminal; its output is what the
    // terminal shows (including echo).
    let cmd = format!("{} approve", common::bin());
    let mut child = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .env("TOOLSRV_SOCKET", &b.s.socket)
        .env("TOOLSRV_SECRET", "k")
        .env("USER", "dave")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = collect(child.stdout.take().unwrap());
    let mut input = child.stdin.take().unwrap();
    let wait_for = |what: &str| {
        assert!(
            eventually(Duration::from_secs(10), || shown(&out).contains(what)),
            "no {what:?} on the terminal: {}",
            shown(&out)
        );
    };
    wait_for("Approve? [y/N]");
    let screen = shown(&out);
    assert!(screen.contains("tool:    rootid"), "{screen}");
    assert!(screen.contains("agent:   a"), "{screen}");
    assert!(screen.contains("asked by: call"), "{screen}");
    assert!(screen.contains("runs as: root"), "{screen}");
    input.write_all(b"y\n").unwrap();
    wait_for("sudo password");
    input.write_all(format!("{PASSWORD}\n").as_bytes()).unwrap();
    let r = h.join().unwrap();
    let text = r.joined_text();
    assert!(!r.is_error, "{text}\n{}", b.s.log_text());
    assert!(text.contains("uid=0"), "{text}");
    assert!(text.contains(EXPECTED_STDIN), "{text}");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(200) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let screen = shown(&out);
    // "y" was echoed; the password was not.
    assert!(
        screen.contains("y\r\n") || screen.contains("y\n"),
        "{screen:?}"
    );
    assert!(!screen.contains(PASSWORD), "password echoed: {screen:?}");
    let _ = child.kill();
    let _ = child.wait();

    let audit = b.audit_lines();
    let approved = audit
        .iter()
        .find(|l| l["event"] == "approved")
        .expect("approved");
    let who = approved["approver"].as_str().unwrap();
    assert!(who.starts_with("terminal:dave@/dev/pts/"), "{who}");
    assert!(
        audit
            .iter()
            .any(|l| l["event"] == "credential-supplied" && l["approver"] == who)
    );
}

#[test]
fn missing_sudo_is_a_clear_error() {
    let b = Bypass::start(&[], |t| {
        tools(t);
    });
    // The server finds sudo through its own PATH; restart it without one.
    let mut s = b;
    s.s.stop();
    let log = std::fs::File::create(&s.s.log).unwrap();
    let child = std::process::Command::new(common::bin())
        .args(["serve", "--listen"])
        .arg(&s.s.socket)
        .arg("--tools")
        .arg(&s.s.tools)
        .arg("--audit-log")
        .arg(&s.audit)
        .env("PATH", "/nonexistent")
        .env("XDG_CONFIG_HOME", s.s.dir.path().join("config"))
        .stderr(log)
        .spawn()
        .unwrap();
    s.s.child = Some(child);
    assert!(eventually(Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&s.s.socket).is_ok()
    }));
    let mut c = s.session();
    c.write("ctl", b"load a rootid").unwrap();
    let r = c
        .call(
            "a",
            "rootid",
            json!({"text": "hi"}).as_object().unwrap(),
            None,
        )
        .unwrap();
    assert!(r.is_error);
    let text = r.joined_text();
    assert!(text.contains("`sudo` is not installed"), "{text}");
    // Refused before any approval was asked for.
    assert!(s.audit_lines().is_empty());
}
