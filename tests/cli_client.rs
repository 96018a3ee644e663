//! The client verbs: `toolsrv call` and `toolsrv 9p`, with the secret kept
//! in a 0600 file so reconnects work.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::TestServer;

fn text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn call_and_9p_verbs() {
    let s = TestServer::start(&[]);

    let out = s
        .client_cmd()
        .args(["call", "echo", r#"{"text":"hi"}"#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let r: serde_json::Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(r["isError"], false);

    // The secret was created 0600 and a reconnect reuses it.
    let secret = s.dir.path().join("config/toolsrv/secret");
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let out = s
        .client_cmd()
        .args(["call", "--text", "echo", "-"])
        .stdin(std::fs::File::open(write_tmp(&s, r#"{"text":"again"}"#)).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out).contains("again"));

    // A different secret is refused.
    let out = s
        .client_cmd()
        .env("TOOLSRV_SECRET", "not-the-same")
        .args(["call", "echo", "{}"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("authentication failed"));

    // isError → exit status 1; --bg prints a PID.
    let out = s.client_cmd().args(["call", "fail"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = s
        .client_cmd()
        .args(["call", "--bg", "echo", r#"{"text":"bg"}"#])
        .output()
        .unwrap();
    let pid: u64 = text(&out).trim().parse().unwrap();

    let ninep = |args: &[&str]| s.client_cmd().arg("9p").args(args).output().unwrap();
    let out = ninep(&["read", &format!("proc/{pid}/wait")]);
    assert_eq!(text(&out), "0\n");
    let out = ninep(&["ls"]);
    let ls = text(&out);
    assert!(ls.contains("--w--w--w- ") && ls.contains(" ctl\n"), "{ls}");
    assert!(ls.contains("dr-xr-xr-x ") && ls.contains(" proc\n"), "{ls}");
    let out = ninep(&["read", "info"]);
    assert!(text(&out).contains("\"platform\":\"linux\""));
    let out = ninep(&["write", "ctl", "load other echo"]);
    assert!(out.status.success(), "{out:?}");
    let out = ninep(&["rdwr", "tools_rev", "other"]);
    assert_eq!(text(&out), "1\n");
    let out = ninep(&["stat", "proc/new"]);
    let st: serde_json::Value = serde_json::from_str(&text(&out)).unwrap();
    assert_eq!(st["name"], "new");
    assert_eq!(st["mode"], "666");
    // The call's working directory: here by default, --cwd, or the server's.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = s
        .client_cmd()
        .current_dir(elsewhere.path())
        .args(["call", "--text", "env"])
        .output()
        .unwrap();
    assert!(text(&out).contains(&format!("PWD={}\n", elsewhere.path().display())));
    let out = s
        .client_cmd()
        .current_dir(elsewhere.path())
        .args(["call", "--text", "--server-cwd", "env"])
        .output()
        .unwrap();
    assert!(text(&out).contains(&format!("PWD={}\n", s.dir.path().display())));
    let out = s
        .client_cmd()
        .args(["call", "--text", "--cwd", "/nonexistent/dir", "env"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("does not exist"), "{out:?}");

    let out = ninep(&["read", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
}

#[test]
fn no_server_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["call", "echo", "--socket"])
        .arg(dir.path().join("none.sock"))
        .env("XDG_CONFIG_HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect") && err.contains("toolsrv serve"),
        "{err}"
    );
}

fn write_tmp(s: &TestServer, content: &str) -> std::path::PathBuf {
    let p = s.dir.path().join("args.json");
    std::fs::write(&p, content).unwrap();
    p
}
