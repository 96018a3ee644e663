//! End-to-end: calls that need approval wait in `bypass/pending`, run
//! unconfined when approved, never run when rejected, expire, can be
//! cancelled, are re-offered when an observer goes, and are audited.

mod bypass_common;
mod common;

use std::time::Duration;

use bypass_common::{Bypass, Observer, alive, eventually, outside_dir, tools};
use serde_json::{Value, json};

#[test]
fn meta_declared_bypass_approved_runs_unconfined() {
    let b = Bypass::start(&[], tools);
    let outside = outside_dir();
    let target = outside.path().join("escaped");
    let mut c = b.session();
    c.write("ctl", b"load a etouch\nload a touch").unwrap();

    // Without bypass the sandbox refuses this path.
    let r = c
        .call(
            "a",
            "touch",
            json!({"path": target.to_str().unwrap()})
                .as_object()
                .unwrap(),
            None,
        )
        .unwrap();
    assert!(r.is_error, "{r:?}");
    assert!(!target.exists());

    let h = b.call_in_thread("a", "etouch", json!({"path": target.to_str().unwrap()}));
    let mut o = Observer::new(&b.s.socket);
    let req = o.next();
    assert_eq!(req["kind"], "bypass");
    assert_eq!(req["tool"], "etouch");
    assert_eq!(req["agent"], "a");
    assert!(
        req["command"].as_str().unwrap().ends_with("/etouch"),
        "{req}"
    );
    assert_eq!(req["cwd"], b.s.dir.path().to_str().unwrap());
    assert_eq!(req["asked_by"]["origin"], "call");
    assert!(req["asked_by"]["proc"].as_u64().is_some(), "{req}");
    assert!(req["env"]["OLLIE_AGENT_ID"] == "a", "{req}");
    assert_eq!(req["env"]["OLLIE_BYPASS_CAPABILITY"], "<redacted>");
    assert!(req["expires_in_ms"].as_u64().unwrap() > 0);
    // Not yet run.
    assert!(!target.exists());
    o.resolve(json!({"id": req["id"], "approve": true, "approver": "test:alice"}))
        .unwrap();
    let r = h.join().unwrap();
    assert!(!r.is_error, "{r:?}");
    assert!(target.exists(), "an approved call runs outside the sandbox");

    let audit = b.audit_lines();
    let events: Vec<&str> = audit.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["requested", "approved"], "{audit:?}");
    assert_eq!(audit[1]["approver"], "test:alice");
    assert_eq!(audit[1]["tool"], "etouch");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&b.audit).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn per_call_bypass_rejected_does_not_run() {
    let b = Bypass::start(&[], tools);
    let outside = outside_dir();
    let target = outside.path().join("never");
    let mut c = b.session();
    c.write("ctl", b"load a touch").unwrap();
    let h = b.call_in_thread(
        "a",
        "touch",
        json!({"path": target.to_str().unwrap(), "bypass": true}),
    );
    let mut o = Observer::new(&b.s.socket);
    let req = o.next();
    assert_eq!(req["tool"], "touch");
    o.resolve(
        json!({"id": req["id"], "approve": false, "approver": "test:bob", "reason": "not today"}),
    )
    .unwrap();
    let r = h.join().unwrap();
    assert!(r.is_error);
    let text = r.joined_text();
    assert!(text.contains("rejected by test:bob"), "{text}");
    assert!(text.contains("not today"), "{text}");
    assert!(text.contains("did not run"), "{text}");
    assert!(!target.exists());
    // Resolving twice fails.
    let err = o
        .resolve(json!({"id": req["id"], "approve": true}))
        .unwrap_err();
    assert!(err.contains("no pending request"), "{err}");

    // Approved per-call bypass runs unconfined.
    let h = b.call_in_thread(
        "a",
        "touch",
        json!({"path": target.to_str().unwrap(), "bypass": true}),
    );
    let req = o.next();
    o.resolve(json!({"id": req["id"], "approve": true}))
        .unwrap();
    let r = h.join().unwrap();
    assert!(!r.is_error, "{r:?}");
    assert!(target.exists());
    let audit = b.audit_lines();
    assert_eq!(audit[1]["event"], "rejected");
    assert_eq!(audit[1]["reason"], "not today");
    assert_eq!(audit[3]["event"], "approved");
    assert_eq!(audit[3]["approver"], "unnamed observer");
}

#[test]
fn requests_expire_as_rejected() {
    let b = Bypass::start(&["--bypass-timeout", "400ms"], tools);
    let outside = outside_dir();
    let target = outside.path().join("late");
    let mut c = b.session();
    c.write("ctl", b"load a etouch").unwrap();
    let r = c
        .call(
            "a",
            "etouch",
            json!({"path": target.to_str().unwrap()})
                .as_object()
                .unwrap(),
            None,
        )
        .unwrap();
    assert!(r.is_error);
    assert!(r.joined_text().contains("rejected by timeout"), "{r:?}");
    assert!(!target.exists());
    let audit = b.audit_lines();
    assert_eq!(audit.last().unwrap()["event"], "expired", "{audit:?}");
    assert!(Observer::nothing_within(
        &b.s.socket,
        Duration::from_millis(200)
    ));
}

#[test]
fn cancelling_a_pending_call_withdraws_its_request() {
    let b = Bypass::start(&[], tools);
    let outside = outside_dir();
    let target = outside.path().join("cancelled");
    let mut c = b.session();
    c.write("ctl", b"load a etouch").unwrap();

    // Synchronous call: its proc/new read is flushed while pending.
    let payload = c.payload(
        "a",
        "etouch",
        json!({"path": target.to_str().unwrap()})
            .as_object()
            .unwrap(),
        None,
    );
    let (_, tag) = common::start_call(&mut c, &payload);
    let mut o = Observer::new(&b.s.socket);
    let req = o.next();
    let ftag = c.client.interrupter().flush(tag).unwrap();
    assert_eq!(c.client.recv().unwrap().tag, ftag);
    assert!(eventually(Duration::from_secs(5), || b
        .audit_lines()
        .iter()
        .any(|l| l["event"] == "cancelled" && l["id"] == req["id"])));
    let err = o
        .resolve(json!({"id": req["id"], "approve": true}))
        .unwrap_err();
    assert!(err.contains("no pending request"), "{err}");
    assert!(!target.exists());

    // Background call: stat says pending-approval until approved.
    let pid = c
        .call_bg(
            "a",
            "etouch",
            json!({"path": target.to_str().unwrap()})
                .as_object()
                .unwrap(),
            None,
        )
        .unwrap();
    let req = o.next();
    let stat: Value =
        serde_json::from_slice(&c.read(&format!("proc/{pid}/stat")).unwrap()).unwrap();
    assert_eq!(stat["state"], "pending-approval", "{stat}");
    assert_eq!(req["asked_by"]["proc"], pid);
    o.resolve(json!({"id": req["id"], "approve": true}))
        .unwrap();
    let wait = c.read(&format!("proc/{pid}/wait")).unwrap();
    assert_eq!(String::from_utf8_lossy(&wait).trim(), "0");
    assert!(target.exists());

    // A background call still waiting for approval is cancelled by `kill`
    // and never runs, even if someone approves it afterwards.
    let late = outside.path().join("never");
    let pid = c
        .call_bg(
            "a",
            "etouch",
            json!({"path": late.to_str().unwrap()}).as_object().unwrap(),
            None,
        )
        .unwrap();
    let req = o.next();
    c.write(&format!("proc/{pid}/ctl"), b"kill").unwrap();
    let wait = c.read(&format!("proc/{pid}/wait")).unwrap();
    assert_eq!(String::from_utf8_lossy(&wait).trim(), "-1");
    let stat: Value =
        serde_json::from_slice(&c.read(&format!("proc/{pid}/stat")).unwrap()).unwrap();
    assert_eq!(stat["cancelled"], true, "{stat}");
    let _ = o.resolve(json!({"id": req["id"], "approve": true}));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!late.exists(), "a cancelled call must not run");
}

#[test]
fn a_request_is_reoffered_when_its_observer_leaves() {
    let b = Bypass::start(&[], tools);
    let mut c = b.session();
    c.write("ctl", b"load a etouch").unwrap();
    let inside = b.s.dir.path().join("reoffered");
    let h = b.call_in_thread("a", "etouch", json!({"path": inside.to_str().unwrap()}));

    let mut first = Observer::new(&b.s.socket);
    let req1 = first.next();
    // A second observer gets nothing while the first holds the request.
    let second_socket = b.s.socket.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut second = Observer::new(&second_socket);
        let req = second.next();
        tx.send(req.clone()).unwrap();
        second
            .resolve(json!({"id": req["id"], "approve": true, "approver": "second"}))
            .unwrap();
    });
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err());
    // The first observer's fid goes away without resolving.
    first.c.client.clunk(first.fid).unwrap();
    let req2 = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(req1["id"], req2["id"]);
    t.join().unwrap();
    let r = h.join().unwrap();
    assert!(!r.is_error, "{r:?}");
    assert!(inside.exists());
    let audit = b.audit_lines();
    assert_eq!(audit.last().unwrap()["approver"], "second");
}

#[test]
fn auto_reject_approver_rejects_and_identifies_itself() {
    let b = Bypass::start(&[], tools);
    let mut c = b.session();
    c.write("ctl", b"load a etouch").unwrap();
    let inside = b.s.dir.path().join("auto");
    let h = b.call_in_thread("a", "etouch", json!({"path": inside.to_str().unwrap()}));
    let out =
        b.s.client_cmd()
            .env("TOOLSRV_SECRET", "k")
            .env("USER", "carol")
            .args(["approve", "--auto-reject", "--once"])
            .output()
            .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = h.join().unwrap();
    assert!(r.is_error);
    assert!(
        r.joined_text().contains("rejected by auto-reject:carol"),
        "{r:?}"
    );
    assert!(!inside.exists());
    assert!(alive(b.s.pid()));
}

#[test]
fn desktop_approver_uses_zenity() {
    let b = Bypass::start(&[], tools);
    let mut c = b.session();
    c.write("ctl", b"load a etouch").unwrap();
    // A stand-in zenity that records its arguments and says yes.
    let fake = tempfile::tempdir().unwrap();
    let record = fake.path().join("asked");
    common::write_tool(
        fake.path(),
        "zenity",
        "{}",
        Some(&format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{}'\nexit 0\n",
            record.display()
        )),
    );
    let path = format!(
        "{}:{}",
        fake.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Without a display it refuses clearly.
    let out =
        b.s.client_cmd()
            .env("TOOLSRV_SECRET", "k")
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env("PATH", &path)
            .args(["approve", "--desktop", "--once"])
            .output()
            .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("DISPLAY"),
        "{out:?}"
    );

    let inside = b.s.dir.path().join("desktop");
    let h = b.call_in_thread("a", "etouch", json!({"path": inside.to_str().unwrap()}));
    let out =
        b.s.client_cmd()
            .env("TOOLSRV_SECRET", "k")
            .env("DISPLAY", ":99")
            .env_remove("WAYLAND_DISPLAY")
            .env("USER", "erin")
            .env("PATH", &path)
            .args(["approve", "--desktop", "--once"])
            .output()
            .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r = h.join().unwrap();
    assert!(!r.is_error, "{r:?}");
    assert!(inside.exists());
    let asked = std::fs::read_to_string(&record).unwrap();
    assert!(asked.contains("--question"), "{asked}");
    assert!(asked.contains("tool:    etouch"), "{asked}");
    let audit = b.audit_lines();
    assert_eq!(audit[1]["approver"], "desktop:zenity:erin@:99");
}
