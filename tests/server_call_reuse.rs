//! End-to-end: `Session::call` keeps its `proc/new` fid between calls; a
//! call that fails at the 9P level drops it and the next call starts afresh.

mod common;

use common::TestServer;
use serde_json::{Map, Value, json};
use toolsrv::client::Session;

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn reused_fid_big_answers_and_recovery_after_an_error() {
    let s = TestServer::start(&[]);
    let mut c = Session::connect_with_secret(&s.socket, Some(b"test-secret")).unwrap();
    c.write("ctl", b"load a echo\nload a fail").unwrap();

    // Many calls on one session, alternating tools: each gets its own answer.
    for i in 0..20 {
        let text = format!("call {i}");
        let r = c
            .call("a", "echo", &args(json!({"text": text})), None)
            .unwrap();
        assert!(!r.is_error, "{r:?}");
        let echoed: Value = serde_json::from_str(&r.joined_text()).unwrap();
        assert_eq!(echoed, json!({"text": text}));
        let r = c.call("a", "fail", &Map::new(), None).unwrap();
        assert!(r.is_error, "{r:?}");
    }

    // A large answer (cut by the server for the model) arrives whole.
    let big = "x".repeat(200_000);
    let r = c
        .call("a", "echo", &args(json!({"text": big})), None)
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let t = r.joined_text();
    assert!(t.starts_with("{\"text\":\"xxx"), "{}", &t[..40]);
    assert!(t.len() > 30_000, "{}", t.len());
    assert!(
        t.trim_end().ends_with("more bytes not shown]"),
        "{}",
        &t[t.len() - 80..]
    );

    // A call the server refuses at the 9P level (bad token) is an error ...
    let token = c.token.replace("not-the-token".into());
    assert!(c.call("a", "echo", &Map::new(), None).is_err());
    // ... and the next call works on a fresh fid.
    c.token = token;
    let r = c
        .call("a", "echo", &args(json!({"text": "again"})), None)
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let echoed: Value = serde_json::from_str(&r.joined_text()).unwrap();
    assert_eq!(echoed, json!({"text": "again"}));
}

/// `Client::write_read` sends the write and the read together: the read
/// sees that write, and a refused write is reported as such, never as the
/// answer of an earlier request on the same fid.
#[test]
fn pipelined_write_and_read_keep_their_order_and_errors() {
    use toolsrv::ninep::fs::{ORDWR, OREAD};
    let s = TestServer::start(&[]);
    let mut c = Session::connect_with_secret(&s.socket, Some(b"test-secret")).unwrap();
    let fid = c.client.walk_open("tools", ORDWR).unwrap();
    c.write("ctl", b"load a echo\nload b fail").unwrap();
    for (agent, tool) in [("a", "echo"), ("b", "fail"), ("a", "echo")] {
        let got = c.client.write_read(fid, agent.as_bytes(), 8192).unwrap();
        let got: Value = serde_json::from_slice(&got).unwrap();
        assert_eq!(got[0]["name"], tool, "{got}");
    }
    // A fid open only for reading: the write is refused, and that refusal
    // (not a stale answer) is what the caller gets.
    let ro = c.client.walk_open("tools", OREAD).unwrap();
    let err = c.client.write_read(ro, b"a", 8192).unwrap_err();
    assert!(err.to_string().contains("not open for writing"), "{err}");
    // The connection is still in step: the next exchange works.
    let got = c.client.write_read(fid, b"b", 8192).unwrap();
    assert!(String::from_utf8_lossy(&got).contains("fail"));
}

/// Data larger than one message is written in pieces and then read: the
/// pipelined exchange falls back to separate round trips, with the same
/// answer.
#[test]
fn write_read_larger_than_a_message_falls_back_to_pieces() {
    use toolsrv::ninep::client::Client;
    use toolsrv::ninep::fs::ORDWR;
    let s = TestServer::start(&[]);
    let mut c = Client::connect(&s.socket).unwrap();
    assert_eq!(c.version(4096, "9P2000").unwrap().0, 4096);
    let (afid, _token) = c.authenticate("agent", "", b"test-secret").unwrap();
    c.attach(Some(afid), "agent", "").unwrap();
    let fid = c.walk_open("tools", ORDWR).unwrap();
    let agent = "a".repeat(10_000);
    assert!(agent.len() > c.iounit() as usize);
    let got = c.write_read(fid, agent.as_bytes(), c.iounit()).unwrap();
    assert_eq!(String::from_utf8_lossy(&got).trim(), "[]");
    // And a small one on the same fid still takes the one-round-trip path.
    let got = c.write_read(fid, b"someone", c.iounit()).unwrap();
    assert_eq!(String::from_utf8_lossy(&got).trim(), "[]");
}
