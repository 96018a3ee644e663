//! End-to-end: calls through the server run under the sandbox profile, are
//! checked by the validation rules, and `--yolo` turns enforcement off.

mod common;

use common::TestServer;
use serde_json::{Map, Value, json};
use toolsrv::client::Session;

/// A directory outside every rule of the default profile (not under /tmp).
fn outside_dir() -> tempfile::TempDir {
    common::outside_dir()
}

fn tools(t: &std::path::Path) {
    common::standard_tools(t);
    common::write_tool(
        t,
        "touch",
        r#"{"description":"Create a file.","args":{"type":"object","required":["path"],"properties":{"path":{"type":"string"}}}}"#,
        Some(
            "#!/bin/sh\np=$(sed 's/.*\"path\": *\"\\([^\"]*\\)\".*/\\1/')\nif : > \"$p\"; then echo created; else echo refused; exit 1; fi\n",
        ),
    );
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn calls_are_confined_by_the_default_profile() {
    let s = TestServer::start_with(&[], tools);
    let outside = outside_dir();
    let mut c = Session::connect_with_secret(&s.socket, Some(b"k")).unwrap();
    c.write("ctl", b"load a touch\nload a env").unwrap();

    // Writing outside the profile's rw paths: the kernel refuses.
    let target = outside.path().join("escaped");
    let r = c
        .call(
            "a",
            "touch",
            &args(json!({"path": target.to_str().unwrap()})),
            None,
        )
        .unwrap();
    assert!(r.is_error, "{r:?}");
    assert!(r.joined_text().contains("Permission denied"), "{r:?}");
    assert!(!target.exists());

    // Inside the working directory it works.
    let inside = s.dir.path().join("made-here");
    let r = c
        .call(
            "a",
            "touch",
            &args(json!({"path": inside.to_str().unwrap()})),
            None,
        )
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    assert!(inside.exists());

    // The environment is filtered: a variable not in the profile is gone.
    let r = c.call("a", "env", &Map::new(), None).unwrap();
    let text = r.joined_text();
    assert!(text.contains("OLLIE_AGENT_ID=a"), "{text}");
    assert!(!text.contains("RUST_LOG="), "{text}");

    // An unknown profile names the ones that exist.
    let r = c
        .call("a", "env", &args(json!({"sandbox": "nosuch"})), None)
        .unwrap();
    assert!(r.is_error);
    assert!(
        r.joined_text().contains("existing profiles: default"),
        "{r:?}"
    );
}

#[test]
fn validation_rejects_and_cools_down() {
    let s = TestServer::start_with(&[], tools);
    let mut c = Session::connect_with_secret(&s.socket, Some(b"k")).unwrap();
    c.write("ctl", b"load a echo\nload b echo").unwrap();
    for i in 0..5 {
        let r = c
            .call("a", "echo", &args(json!({"text": "rm -rf /"})), None)
            .unwrap();
        assert!(r.is_error);
        let t = r.joined_text();
        assert!(t.contains("rule"), "{t}");
        if i == 4 {
            assert!(
                t.contains("refused for another"),
                "fifth rejection starts the cool-down: {t}"
            );
        }
    }
    // Now even a harmless call from that agent is refused, saying when it ends.
    let r = c
        .call("a", "echo", &args(json!({"text": "hello"})), None)
        .unwrap();
    assert!(r.is_error);
    assert!(r.joined_text().contains("refused for another"), "{r:?}");
    // Another agent is unaffected.
    let r = c
        .call("b", "echo", &args(json!({"text": "hello"})), None)
        .unwrap();
    assert!(!r.is_error, "{r:?}");
}

#[test]
fn yolo_runs_unconfined_and_says_so() {
    let s = TestServer::start_with(&["--yolo"], tools);
    let outside = outside_dir();
    let mut c = Session::connect_with_secret(&s.socket, Some(b"k")).unwrap();
    c.write("ctl", b"load a touch").unwrap();
    let target = outside.path().join("escaped");
    let r = c
        .call(
            "a",
            "touch",
            &args(json!({"path": target.to_str().unwrap()})),
            None,
        )
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    assert!(target.exists());
    let log = s.log_text();
    // Said once, loudly, at start (not once per call: that cost a log
    // write per call and buried everything else in the log).
    assert!(
        log.contains("SANDBOX ENFORCEMENT IS DISABLED; tools run unconfined"),
        "{log}"
    );
}
