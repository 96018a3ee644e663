//! The core namespace tests again, driven by the `ninep` crate's client: a
//! 9P implementation this project did not write. It attaches without
//! authentication, so the server runs with `--no-auth`.

mod common;

use std::time::Duration;

use common::{TestServer, alive, eventually};
use ninep::sync::client::Client;
use serde_json::Value;

fn connect(s: &TestServer) -> Client {
    Client::new_unix_with_explicit_path("agent", &s.socket, "").unwrap()
}

#[test]
fn independent_client_reads_lists_and_calls() {
    let s = TestServer::start(&["--no-auth"]);
    let c = connect(&s);

    let info: Value = serde_json::from_slice(&c.read("info").unwrap()).unwrap();
    assert_eq!(info["platform"], "linux");

    let root: Vec<String> = c
        .read_dir("")
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    for want in ["ctl", "tools", "all", "info", "tools_rev", "bypass", "proc"] {
        assert!(
            root.contains(&want.to_string()),
            "{want} missing from {root:?}"
        );
    }
    let proc_dir: Vec<String> = c
        .read_dir("proc")
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(proc_dir, ["list", "new", "new.bg"]);

    let all: Vec<Value> = serde_json::from_slice(&c.read("all").unwrap()).unwrap();
    assert_eq!(all.len(), 4);

    c.write("ctl", 0, b"load a echo\nload a sleep\n").unwrap();
    c.write("tools_rev", 0, b"a").unwrap();
    assert_eq!(c.read("tools_rev").unwrap(), b"2\n");
    c.write("tools", 0, b"a").unwrap();
    let tools: Vec<Value> = serde_json::from_slice(&c.read("tools").unwrap()).unwrap();
    assert_eq!(tools[0]["name"], "echo");

    // A synchronous call: write the payload, read the result on the same fid.
    c.write("proc/new", 0, b"tool=echo\nagent=a\ntext=from ninep\n")
        .unwrap();
    let r: Value = serde_json::from_slice(&c.read("proc/new").unwrap()).unwrap();
    assert_eq!(r["isError"], false, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("from ninep")
    );

    // A background call: PID, wait, out, stat.
    c.write("proc/new.bg", 0, b"tool=echo\nagent=a\ntext=bg\n")
        .unwrap();
    let pid = String::from_utf8(c.read("proc/new.bg").unwrap()).unwrap();
    let pid = pid.trim();
    assert_eq!(c.read(format!("proc/{pid}/wait")).unwrap(), b"0\n");
    assert!(
        String::from_utf8(c.read(format!("proc/{pid}/out")).unwrap())
            .unwrap()
            .contains("bg")
    );
    let st: Value = serde_json::from_slice(&c.read(format!("proc/{pid}/stat")).unwrap()).unwrap();
    assert_eq!(st["state"], "exited");
    let stat = c.stat(format!("proc/{pid}/stat")).unwrap();
    assert_eq!(stat.name, "stat");

    // Signal 9 on a running background call.
    c.write("proc/new.bg", 0, b"tool=sleep\nagent=a\n").unwrap();
    let pid2 = String::from_utf8(c.read("proc/new.bg").unwrap()).unwrap();
    let pid2 = pid2.trim().to_string();
    let child = s.sleep_pid();
    c.write(format!("proc/{pid2}/ctl"), 0, b"signal 9").unwrap();
    assert_eq!(c.read(format!("proc/{pid2}/wait")).unwrap(), b"-1\n");
    assert!(eventually(Duration::from_secs(2), || !alive(child)));

    // Errors come back as Rerror text.
    let e = c.write("ctl", 0, b"bogus").unwrap_err().to_string();
    assert!(e.contains("unknown ctl command"), "{e}");
    assert!(
        c.create("", "x", ninep::fs::Perm::FILE, ninep::fs::Mode::WRITE)
            .is_err()
    );
}
