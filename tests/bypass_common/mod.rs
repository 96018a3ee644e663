//! Shared helpers of the bypass end-to-end tests: a server with an audit log
//! and short approval timeout, observers, calls in threads, test users.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use toolsrv::client::Session;
use toolsrv::ninep::fs::OREAD;
use toolsrv::protocol::ToolResult;

#[allow(unused_imports)]
pub use crate::common::{TestServer, alive, eventually, outside_dir, write_tool};

/// The secret every test client uses.
pub const SECRET: &[u8] = b"k";

/// A server plus the audit log it writes.
pub struct Bypass {
    pub s: TestServer,
    pub audit: PathBuf,
    _state: tempfile::TempDir,
}

impl Bypass {
    /// Start with the given tools and extra `serve` arguments.
    pub fn start(extra: &[&str], seed: impl FnOnce(&Path)) -> Bypass {
        let state = tempfile::tempdir().unwrap();
        let audit = state.path().join("state/audit.jsonl");
        let mut args = vec!["--audit-log", audit.to_str().unwrap()];
        args.extend_from_slice(extra);
        let s = TestServer::start_with(&args, seed);
        Bypass {
            s,
            audit,
            _state: state,
        }
    }

    pub fn session(&self) -> Session {
        Session::connect_with_secret(&self.s.socket, Some(SECRET)).unwrap()
    }

    pub fn audit_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Run a synchronous call in a thread (it blocks until approved).
    pub fn call_in_thread(&self, agent: &str, tool: &str, args: Value) -> JoinHandle<ToolResult> {
        let socket = self.s.socket.clone();
        let (agent, tool) = (agent.to_string(), tool.to_string());
        let args: Map<String, Value> = args.as_object().cloned().unwrap_or_default();
        std::thread::spawn(move || {
            let mut c = Session::connect_with_secret(&socket, Some(SECRET)).unwrap();
            c.call(&agent, &tool, &args, None).unwrap()
        })
    }
}

/// An observer: its own connection and one open `bypass/pending` fid.
pub struct Observer {
    pub c: Session,
    pub fid: u32,
}

impl Observer {
    pub fn new(socket: &Path) -> Observer {
        let mut c = Session::connect_with_secret(socket, Some(SECRET)).unwrap();
        let fid = c.client.walk_open("bypass/pending", OREAD).unwrap();
        Observer { c, fid }
    }

    /// Block until the next request is handed to this observer.
    pub fn next(&mut self) -> Value {
        let data = self.c.client.read_all(self.fid).unwrap();
        serde_json::from_slice(&data).unwrap()
    }

    /// Resolve through this observer's connection.
    pub fn resolve(&mut self, v: Value) -> Result<(), String> {
        self.c
            .write("bypass/resolve", v.to_string().as_bytes())
            .map_err(|e| e.to_string())
    }

    /// Whether a request is handed out within `wait` (the read is then clunked).
    pub fn nothing_within(socket: &Path, wait: Duration) -> bool {
        let mut o = Observer::new(socket);
        let intr = o.c.client.interrupter();
        let fid = o.fid;
        let h = std::thread::spawn(move || {
            std::thread::sleep(wait);
            let _ = intr.clunk(fid);
        });
        let t0 = Instant::now();
        let r = o.c.client.read(o.fid, 0, 65536);
        h.join().unwrap();
        r.is_err() && t0.elapsed() >= wait.mul_f32(0.8)
    }
}

/// Tools of the bypass tests.
pub fn tools(t: &Path) {
    crate::common::standard_tools(t);
    let touch = "#!/bin/sh\np=$(sed 's/.*\"path\": *\"\\([^\"]*\\)\".*/\\1/')\nif : > \"$p\"; then echo created; else echo refused; exit 1; fi\n";
    let touch_args =
        r#""args":{"type":"object","required":["path"],"properties":{"path":{"type":"string"}}}"#;
    write_tool(
        t,
        "touch",
        &format!(r#"{{"description":"Create a file.",{touch_args}}}"#),
        Some(touch),
    );
    write_tool(
        t,
        "etouch",
        &format!(r#"{{"description":"Create a file, elevated.","elevated":true,{touch_args}}}"#),
        Some(touch),
    );
}

/// `uid` of a system user, if it exists.
pub fn uid_of(user: &str) -> Option<u32> {
    let out = Command::new("id").arg("-u").arg(user).output().ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// The sudo test users exist (created by `.ci/bypass-users`, run here when
/// missing and we are root).
pub fn ensure_test_users() -> bool {
    if uid_of("toolsrv-pw").is_some() && uid_of("toolsrv-np").is_some() {
        return true;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/bypass-users");
    let ok = Command::new("bash")
        .arg(script)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok && uid_of("toolsrv-pw").is_some()
}

/// Make `p` and every parent reachable by other users.
pub fn open_up(p: &Path) {
    let mut cur = Some(p);
    while let Some(d) = cur {
        if d == Path::new("/") {
            break;
        }
        if let Ok(m) = std::fs::metadata(d) {
            let mode = m.permissions().mode();
            if mode & 0o005 != 0o005 {
                let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o005));
            }
        }
        cur = d.parent();
    }
}

/// Whether every directory above `p` lets others through and `p` is
/// readable and executable by others.
fn reachable_by_others(p: &Path) -> bool {
    let file_ok = std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005);
    file_ok
        && p.ancestors()
            .skip(1)
            .all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

impl Bypass {
    /// Start `toolsrv serve` as the system user `user` (tests run as root),
    /// in a directory under /tmp that user owns.
    pub fn start_as(user: &str, extra: &[&str], seed: impl FnOnce(&Path)) -> Bypass {
        use std::os::unix::process::CommandExt;
        let uid = uid_of(user).expect("test user exists");
        let gid: u32 = String::from_utf8(
            Command::new("id")
                .arg("-g")
                .arg(user)
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap();
        let dir = tempfile::Builder::new()
            .prefix("toolsrv-bypass-")
            .tempdir_in("/tmp")
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let tools = dir.path().join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        seed(&tools);
        let mut bin = PathBuf::from(crate::common::bin());
        if !reachable_by_others(&bin) {
            let copy = dir.path().join("toolsrv");
            std::fs::copy(&bin, &copy).unwrap();
            bin = copy;
        }
        let st = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success());
        let socket = dir.path().join("run/toolsrv.sock");
        let audit = dir.path().join("state/audit.jsonl");
        let log = dir.path().join("server.log");
        let logf = std::fs::File::create(&log).unwrap();
        let child = Command::new(&bin)
            .arg("serve")
            .arg("--listen")
            .arg(&socket)
            .arg("--tools")
            .arg(&tools)
            .arg("--cwd")
            .arg(dir.path())
            .arg("--audit-log")
            .arg(&audit)
            .args(extra)
            .uid(uid)
            .gid(gid)
            .env("USER", user)
            .env("LOGNAME", user)
            .env("HOME", dir.path())
            .env("RUST_LOG", "debug")
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env_remove("TOOLSRV_SECRET")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .unwrap();
        let s = TestServer {
            dir,
            socket,
            tools,
            child: Some(child),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&s.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "server (as {user}) is not accepting; log:\n{}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Bypass {
            s,
            audit,
            _state: tempfile::tempdir().unwrap(),
        }
    }
}

/// Every process whose argument list or environment contains `needle`
/// (other than this test process).
pub fn procs_exposing(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut hits = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return hits;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        for what in ["cmdline", "environ"] {
            if let Ok(data) = std::fs::read(e.path().join(what))
                && data.windows(needle.len()).any(|w| w == needle.as_bytes())
            {
                hits.push(format!("{name}/{what}: {}", String::from_utf8_lossy(&data)));
            }
        }
    }
    hits
}
