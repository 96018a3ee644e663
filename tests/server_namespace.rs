//! End-to-end: every file of the namespace through the real binary and socket.

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, alive, eventually};
use serde_json::{Map, Value, json};
use toolsrv::client::Session;
use toolsrv::ninep::client::Client;
use toolsrv::ninep::fs::{ORDWR, OREAD};

fn session(s: &TestServer) -> Session {
    Session::connect_with_secret(&s.socket, Some(b"test-secret")).unwrap()
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn info_all_and_registry() {
    let s = TestServer::start(&[]);
    let mut c = session(&s);

    let info: Value = serde_json::from_slice(&c.read("info").unwrap()).unwrap();
    assert_eq!(info["platform"], "linux");
    assert!(
        ["amd64", "arm64"].contains(&info["arch"].as_str().unwrap()),
        "{info}"
    );

    let all: Vec<Value> = serde_json::from_slice(&c.read("all").unwrap()).unwrap();
    let names: Vec<&str> = all.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "env", "fail", "sleep"]);

    // Nothing loaded: empty list, revision 0, calls refused.
    assert_eq!(c.rdwr("tools", b"a1").unwrap(), b"[]\n");
    assert_eq!(c.rdwr("tools_rev", b"a1").unwrap(), b"0\n");
    let r = c.call("a1", "echo", &Map::new(), None).unwrap();
    assert!(
        r.is_error && r.joined_text().contains("not loaded"),
        "{r:?}"
    );

    c.write("ctl", b"load a1 sleep\nload a1 echo\n").unwrap();
    assert_eq!(c.rdwr("tools_rev", b"a1").unwrap(), b"2\n");
    let tools: Vec<Value> = serde_json::from_slice(&c.rdwr("tools", b"a1").unwrap()).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "sleep"], "sorted by name");
    assert!(tools[0].get("keywords").is_none());
    // Another agent sees nothing.
    assert_eq!(c.rdwr("tools", b"a2").unwrap(), b"[]\n");
    assert_eq!(c.rdwr("tools_rev", b"a2").unwrap(), b"0\n");

    c.write("ctl", b"unload a1 sleep").unwrap();
    assert_eq!(c.rdwr("tools_rev", b"a1").unwrap(), b"3\n");
    let err = c.write("ctl", b"unload a1 sleep").unwrap_err().to_string();
    assert!(err.contains("not loaded"), "{err}");
    let err = c
        .write("ctl", b"load a1 nosuchtool")
        .unwrap_err()
        .to_string();
    assert!(err.contains("no tool"), "{err}");
    let err = c.write("ctl", b"frobnicate").unwrap_err().to_string();
    assert!(err.contains("load <agent> <tool>"), "{err}");

    // A new .meta appears without a restart.
    common::write_tool(
        &s.tools,
        "later",
        r#"{"description":"Late."}"#,
        Some("#!/bin/sh\necho late\n"),
    );
    let all: Vec<Value> = serde_json::from_slice(&c.read("all").unwrap()).unwrap();
    assert!(all.iter().any(|t| t["name"] == "later"));
}

#[test]
fn sync_call_results() {
    let s = TestServer::start(&[]);
    let mut c = session(&s);
    c.write("ctl", b"load a echo\nload a fail\nload a env")
        .unwrap();

    let r = c
        .call("a", "echo", &args(json!({"text": "hi\nthere \\ ok"})), None)
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let echoed: Value = serde_json::from_str(&r.joined_text()).unwrap();
    assert_eq!(echoed, json!({"text": "hi\nthere \\ ok"}));

    let r = c.call("a", "fail", &Map::new(), None).unwrap();
    assert!(r.is_error);
    assert!(r.joined_text().contains("it broke"), "{r:?}");

    // Schema validation names the field.
    let r = c
        .call("a", "echo", &args(json!({"text": 5})), None)
        .unwrap();
    assert!(r.is_error && r.joined_text().contains("text"), "{r:?}");

    // key=value fields are coerced by the schema; dispatch fields are removed.
    let payload = format!(
        "token={}\ntool=echo\nagent=a\nsession=s1\ntext=plain\nn=42\ntimeout=30s\n",
        c.token.clone().unwrap()
    );
    let out = c.rdwr("proc/new", payload.as_bytes()).unwrap();
    let r: toolsrv::protocol::ToolResult = serde_json::from_slice(&out).unwrap();
    let echoed: Value = serde_json::from_str(&r.joined_text()).unwrap();
    assert_eq!(echoed, json!({"text": "plain", "n": 42}));

    // The environment carries the contract's variables.
    let payload = format!(
        "token={}\ntool=env\nagent=a\nsession=s9\n",
        c.token.clone().unwrap()
    );
    let out = c.rdwr("proc/new", payload.as_bytes()).unwrap();
    let r: toolsrv::protocol::ToolResult = serde_json::from_slice(&out).unwrap();
    let text = r.joined_text();
    assert!(text.contains("OLLIE_AGENT_ID=a\n"), "{text}");
    assert!(text.contains("OLLIE_SESSION_ID=s9\n"), "{text}");
    assert!(
        text.contains(&format!("OLLIE_TOOLS_PATH={}", s.tools.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("PWD={}", s.dir.path().display())),
        "{text}"
    );
}

#[test]
fn background_out_wait_stat_signal_dismiss() {
    let s = TestServer::start(&[]);
    let mut c = session(&s);
    c.write("ctl", b"load a echo\nload a sleep").unwrap();

    let pid = c
        .call_bg("a", "echo", &args(json!({"text": "bg"})), None)
        .unwrap();
    assert_eq!(c.read(&format!("proc/{pid}/wait")).unwrap(), b"0\n");
    let out = String::from_utf8(c.read(&format!("proc/{pid}/out")).unwrap()).unwrap();
    assert!(out.contains("\"bg\""), "{out}");
    let st: Value = serde_json::from_slice(&c.read(&format!("proc/{pid}/stat")).unwrap()).unwrap();
    assert_eq!(st["state"], "exited");
    assert_eq!(st["exit_code"], 0);
    assert_eq!(st["tool"], "echo");
    assert_eq!(st["agent"], "a");
    assert_eq!(st["truncated"], false);

    // A running one, killed with signal 9.
    let pid2 = c.call_bg("a", "sleep", &Map::new(), None).unwrap();
    let pidfile = s.dir.path().join("sleep.pid");
    assert!(eventually(Duration::from_secs(5), || pidfile.exists()));
    let st: Value = serde_json::from_slice(&c.read(&format!("proc/{pid2}/stat")).unwrap()).unwrap();
    assert_eq!(st["state"], "running");
    let list: Vec<Value> = serde_json::from_slice(&c.rdwr("proc/list", b"a").unwrap()).unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(c.rdwr("proc/list", b"other").unwrap(), b"[]\n");
    let err = c
        .write(&format!("proc/{pid2}/ctl"), b"dismiss")
        .unwrap_err()
        .to_string();
    assert!(err.contains("still running"), "{err}");
    let t0 = Instant::now();
    c.write(&format!("proc/{pid2}/ctl"), b"signal 9").unwrap();
    assert_eq!(c.read(&format!("proc/{pid2}/wait")).unwrap(), b"-1\n");
    assert!(t0.elapsed() < Duration::from_secs(3));
    let st: Value = serde_json::from_slice(&c.read(&format!("proc/{pid2}/stat")).unwrap()).unwrap();
    assert_eq!(st["signal"], 9);
    let child: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(eventually(Duration::from_secs(2), || !alive(child)));

    let ls: Vec<String> = c.ls("proc").unwrap().into_iter().map(|e| e.name).collect();
    assert!(
        ls.contains(&pid.to_string()) && ls.contains(&"new.bg".to_string()),
        "{ls:?}"
    );
    c.write(&format!("proc/{pid}/ctl"), b"dismiss").unwrap();
    let err = c.read(&format!("proc/{pid}/stat")).unwrap_err().to_string();
    assert!(err.contains("does not exist"), "{err}");
    let err = c
        .write(&format!("proc/{pid2}/ctl"), b"bogus")
        .unwrap_err()
        .to_string();
    assert!(err.contains("signal N"), "{err}");
}

#[test]
fn gc_forgets_finished_processes() {
    let s = TestServer::start(&["--gc-age", "300ms"]);
    let mut c = session(&s);
    c.write("ctl", b"load a echo").unwrap();
    let pid = c.call_bg("a", "echo", &Map::new(), None).unwrap();
    assert_eq!(c.read(&format!("proc/{pid}/wait")).unwrap(), b"0\n");
    assert!(eventually(Duration::from_secs(5), || c
        .read(&format!("proc/{pid}/stat"))
        .is_err()));
}

#[test]
fn authentication() {
    let s = TestServer::start(&[]);
    // Attach without auth.
    let mut raw = Client::connect(&s.socket).unwrap();
    raw.handshake().unwrap();
    let err = raw.attach(None, "agent", "").unwrap_err().to_string();
    assert!(err.contains("authentication required"), "{err}");

    // First secret wins; the token comes back; a second client with the same
    // secret gets the same token.
    let (_c1, t1) = Client::open_session(&s.socket, "agent", "", Some(b"right")).unwrap();
    let (_c2, t2) = Client::open_session(&s.socket, "agent", "", Some(b"right")).unwrap();
    assert_eq!(t1, t2);
    assert_eq!(t1.as_ref().unwrap().len(), 64);

    // A different secret fails.
    let err = Client::open_session(&s.socket, "agent", "", Some(b"wrong"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("authentication failed"), "{err}");

    // A bad token in the payload is refused.
    let mut c = Session::connect_with_secret(&s.socket, Some(b"right")).unwrap();
    c.write("ctl", b"load a echo").unwrap();
    let err = c
        .rdwr("proc/new", b"token=forged\ntool=echo\nagent=a\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid token"), "{err}");
    let err = c
        .rdwr("proc/new", b"tool=echo\nagent=a\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid token"), "{err}");
    // The secret never reaches the log.
    assert!(!s.log_text().contains("right"));
    assert!(!s.log_text().contains("wrong"));
}

#[test]
fn no_auth_mode() {
    let s = TestServer::start(&["--no-auth"]);
    let mut raw = Client::connect(&s.socket).unwrap();
    raw.handshake().unwrap();
    let err = raw.auth("agent", "").unwrap_err().to_string();
    assert!(err.contains("authentication not required"), "{err}");
    raw.attach(None, "agent", "").unwrap();
    let mut c = Session::connect_with_secret(&s.socket, Some(b"x")).unwrap();
    c.write("ctl", b"load a echo").unwrap();
    let r = c.call("a", "echo", &Map::new(), None).unwrap();
    assert!(!r.is_error);
}

#[test]
fn per_fid_state_is_isolated() {
    let s = TestServer::start(&[]);
    let mut c1 = session(&s);
    let mut c2 = session(&s);
    c1.write("ctl", b"load x echo").unwrap();
    // Two fids, one per client, written before either reads.
    let f1 = c1.client.walk_open("tools", ORDWR).unwrap();
    let f2 = c2.client.walk_open("tools", ORDWR).unwrap();
    c1.client.write(f1, b"x").unwrap();
    c2.client.write(f2, b"y").unwrap();
    let r2 = c2.client.read_all(f2).unwrap();
    let r1 = c1.client.read_all(f1).unwrap();
    assert_eq!(r2, b"[]\n");
    assert!(String::from_utf8(r1).unwrap().contains("\"echo\""));
    // A second fid of the same client is independent too.
    let f3 = c1.client.walk_open("tools_rev", ORDWR).unwrap();
    let f4 = c1.client.walk_open("tools_rev", ORDWR).unwrap();
    c1.client.write(f3, b"x").unwrap();
    c1.client.write(f4, b"nobody").unwrap();
    assert_eq!(c1.client.read_all(f3).unwrap(), b"1\n");
    assert_eq!(c1.client.read_all(f4).unwrap(), b"0\n");
}

#[test]
fn bypass_files_before_the_broker() {
    let s = TestServer::start(&[]);
    let mut c = session(&s);
    let err = c
        .write("bypass/resolve", br#"{"id":"nope","approve":true}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no pending request"), "{err}");
    let err = c
        .write("bypass/resolve", b"garbage")
        .unwrap_err()
        .to_string();
    assert!(err.contains("approve"), "{err}");
    // pending blocks: a read does not answer within 300 ms; flushing it works.
    let fid = c.client.walk_open("bypass/pending", OREAD).unwrap();
    let intr = c.client.interrupter();
    let t0 = Instant::now();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        intr.clunk(fid).unwrap();
    });
    let r = c.client.read(fid, 0, 100);
    assert!(t0.elapsed() >= Duration::from_millis(250));
    assert!(r.is_err());
    h.join().unwrap();
}

#[test]
fn clunk_cancels_a_sync_call() {
    let s = TestServer::start(&[]);
    let mut c = session(&s);
    c.write("ctl", b"load a sleep").unwrap();
    let payload = c.payload("a", "sleep", &Map::new(), None);
    let fid = c.client.walk_open("proc/new", ORDWR).unwrap();
    c.client.write(fid, payload.as_bytes()).unwrap();
    let intr = c.client.interrupter();
    let pidfile = s.dir.path().join("sleep.pid");
    let pf = pidfile.clone();
    let h = std::thread::spawn(move || {
        assert!(eventually(Duration::from_secs(5), || pf.exists()));
        std::thread::sleep(Duration::from_millis(100));
        intr.clunk(fid).unwrap();
        Instant::now()
    });
    let r = c.client.read(fid, 0, 8192);
    assert!(r.is_err(), "{r:?}");
    let clunked = h.join().unwrap();
    let child: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(1), || !alive(child)),
        "child still alive 1 s after clunk"
    );
    assert!(clunked.elapsed() < Duration::from_secs(3));
    // The connection still serves.
    assert!(c.read("info").is_ok());
}

#[test]
fn flush_cancels_a_sync_call() {
    let s = TestServer::start(&[]);
    let mut c = session(&s);
    c.write("ctl", b"load a sleep").unwrap();
    let payload = c.payload("a", "sleep", &Map::new(), None);
    let (_, tag) = common::start_call(&mut c, &payload);
    let child = s.sleep_pid();
    assert!(alive(child));
    let ftag = c.client.interrupter().flush(tag).unwrap();
    // The next reply is the Rflush (the flushed read gets none).
    let m = c.client.recv().unwrap();
    assert_eq!(m.tag, ftag);
    assert!(eventually(Duration::from_secs(1), || !alive(child)));
    // The call ran in the flushed request's own future: dropping it
    // recorded the process as ended and cancelled, and `wait` answers.
    let list: Value = serde_json::from_slice(&c.rdwr("proc/list", b"a").unwrap()).unwrap();
    let p = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["tool"] == "sleep")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(p["state"], "exited", "{p}");
    assert_eq!(p["cancelled"], true, "{p}");
    let wait = c.read(&format!("proc/{}/wait", p["pid"])).unwrap();
    assert_eq!(String::from_utf8_lossy(&wait).trim(), "-1");
}

#[test]
fn shutdown_leaves_no_socket_and_no_processes() {
    let mut s = TestServer::start(&[]);
    let mut c = session(&s);
    c.write("ctl", b"load a sleep").unwrap();
    c.call_bg("a", "sleep", &Map::new(), None).unwrap();
    let child = s.sleep_pid();
    let st = s.stop();
    assert!(st.success(), "{st:?}\n{}", s.log_text());
    assert!(!s.socket.exists());
    assert!(!alive(child));
    assert!(s.log_text().contains("stopped"));
}

#[test]
fn stale_socket_replaced_live_socket_refused() {
    let mut s = TestServer::start(&[]);
    // A second server on the same live socket is refused.
    let out = std::process::Command::new(common::bin())
        .args(["serve", "--listen"])
        .arg(&s.socket)
        .arg("--tools")
        .arg(&s.tools)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already listening"));
    // Kill -9 leaves a stale socket; the next start removes it.
    common::unsafe_free_kill(s.pid(), "KILL");
    let mut child = s.child.take().unwrap();
    child.wait().unwrap();
    assert!(s.socket.exists());
    s.spawn(&[]);
    let mut c = session(&s);
    assert!(c.read("info").is_ok());
    let mode = std::fs::metadata(&s.socket).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
}

#[test]
fn idle_timeout_exits() {
    // Nobody connects: exit after the start-up grace.
    let mut s = TestServer::start(&["--idle-timeout", "300ms", "--idle-grace", "500ms"]);
    let child = s.child.as_mut().unwrap();
    assert!(eventually(Duration::from_secs(10), || child
        .try_wait()
        .unwrap()
        .is_some()));
    assert!(!s.socket.exists());

    // One client connects and leaves: exit after the idle timeout.
    let mut s = TestServer::start(&["--idle-timeout", "300ms", "--idle-grace", "60s"]);
    {
        let mut c = session(&s);
        c.read("info").unwrap();
        std::thread::sleep(Duration::from_millis(600));
        // Still alive while connected.
        assert!(s.child.as_mut().unwrap().try_wait().unwrap().is_none());
    }
    let child = s.child.as_mut().unwrap();
    assert!(eventually(Duration::from_secs(10), || child
        .try_wait()
        .unwrap()
        .is_some()));
    assert!(!s.socket.exists());
}

#[test]
fn refused_operations_have_clear_errors() {
    let s = TestServer::start(&[]);
    let mut c = session(&s);
    let err = c.write("info", b"x").unwrap_err().to_string();
    assert!(
        err.contains("permission denied") || err.contains("not writable"),
        "{err}"
    );
    let err = c.read("ctl").unwrap_err().to_string();
    assert!(err.contains("permission denied"), "{err}");
    let err = c.read("nope").unwrap_err().to_string();
    assert!(err.contains("does not exist"), "{err}");
    let root = c.client.root().unwrap();
    for (msg, expect) in [
        (
            toolsrv::ninep::wire::Fcall::Tcreate {
                fid: root,
                name: "x".into(),
                perm: 0o644,
                mode: 1,
            },
            "create",
        ),
        (toolsrv::ninep::wire::Fcall::Tremove { fid: root }, "remove"),
    ] {
        let err = c.client.rpc(msg).unwrap_err().to_string();
        assert!(err.contains(expect), "{err}");
    }
}

/// A peer that sends requests but stops reading replies fills the socket;
/// its running call still times out (and its process group is killed), and
/// every other connection keeps being served.
#[test]
fn a_peer_that_stops_reading_does_not_hold_up_its_calls() {
    use toolsrv::ninep::wire::Fcall;
    let s = TestServer::start(&[]);
    let mut c = session(&s);
    c.write("ctl", b"load a sleep").unwrap();
    let payload = c.payload("a", "sleep", &args(json!({"timeout": 1})), None);
    common::start_call(&mut c, &payload);
    let child = s.sleep_pid();

    // Many reads of `all`, whose replies are never read: megabytes of them.
    let all = c.client.walk_open("all", OREAD).unwrap();
    let intr = c.client.interrupter();
    let flood = std::thread::spawn(move || {
        let mut sent = 0u32;
        while sent < 50_000
            && intr
                .send(Fcall::Tread {
                    fid: all,
                    offset: 0,
                    count: 8192,
                })
                .is_ok()
        {
            sent += 1;
        }
        sent
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!flood.is_finished(), "the socket never filled up");

    // The 1 s timeout ends the call although nobody reads its reply.
    assert!(
        eventually(Duration::from_secs(6), || !alive(child)),
        "the call outlived its timeout while its peer was not reading"
    );
    // Other connections are served meanwhile.
    let mut other = session(&s);
    assert!(other.read("info").is_ok());
    drop(c);
    assert!(flood.join().unwrap() > 0);
    assert!(other.read("info").is_ok());
}
