//! Shared helpers for end-to-end tests: start the real `toolsrv` binary on a
//! socket in a temporary directory, write tools, and stop it again.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_toolsrv")
}

/// A directory outside every rule of the default sandbox profile: not under
/// /tmp (rw in that profile) nor the checkout, which CI may place under /tmp.
pub fn outside_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("toolsrv-outside")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// A running `toolsrv serve` in its own temporary directory.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub tools: PathBuf,
    pub child: Option<Child>,
    pub log: PathBuf,
}

/// Write an executable tool `name` with `.meta` `meta` and script `script`.
pub fn write_tool(tools: &Path, name: &str, meta: &str, script: Option<&str>) {
    std::fs::create_dir_all(tools).unwrap();
    std::fs::write(tools.join(format!("{name}.meta")), meta).unwrap();
    if let Some(s) = script {
        let p = tools.join(name);
        std::fs::write(&p, s).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A small standard set of tools used by the server tests.
pub fn standard_tools(tools: &Path) {
    write_tool(
        tools,
        "echo",
        r#"{"description":"Echo the text argument.","prompt":"echo(text)","args":{"type":"object","properties":{"text":{"type":"string"},"n":{"type":"integer"}}}}"#,
        Some("#!/bin/sh\ncat\n"),
    );
    write_tool(
        tools,
        "sleep",
        r#"{"description":"Sleep.","args":{"type":"object","properties":{"seconds":{"type":"number"}}}}"#,
        Some(
            "#!/bin/sh\necho \"pid $$\" >&2\necho $$ > \"$PWD/.sleep.pid\" && mv \"$PWD/.sleep.pid\" \"$PWD/sleep.pid\"\nexec sleep 1000\n",
        ),
    );
    write_tool(
        tools,
        "fail",
        r#"{"description":"Fail.","args":{"type":"object"}}"#,
        Some("#!/bin/sh\necho 'it broke' >&2\nexit 3\n"),
    );
    write_tool(
        tools,
        "env",
        r#"{"description":"Show the environment.","args":{"type":"object"}}"#,
        Some("#!/bin/sh\nenv | sort\n"),
    );
}

impl TestServer {
    /// Start with the standard tools and extra arguments.
    pub fn start(extra: &[&str]) -> TestServer {
        Self::start_with(extra, standard_tools)
    }

    pub fn start_with(extra: &[&str], seed: impl FnOnce(&Path)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run/toolsrv.sock");
        let tools = dir.path().join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        seed(&tools);
        let log = dir.path().join("server.log");
        let mut s = TestServer {
            socket,
            tools,
            child: None,
            log,
            dir,
        };
        s.spawn(extra);
        s
    }

    pub fn spawn(&mut self, extra: &[&str]) {
        let logf = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(bin())
            .arg("serve")
            .arg("--listen")
            .arg(&self.socket)
            .arg("--tools")
            .arg(&self.tools)
            .arg("--cwd")
            .arg(self.dir.path())
            .args(extra)
            .env("RUST_LOG", "debug")
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env_remove("TOOLSRV_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "server is not accepting on its socket; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Environment for client commands: socket and a secret file in the temp dir.
    pub fn client_cmd(&self) -> Command {
        let mut c = Command::new(bin());
        c.env("TOOLSRV_SOCKET", &self.socket)
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env_remove("TOOLSRV_SECRET")
            .current_dir(self.dir.path());
        c
    }

    /// Wait for the standard `sleep` tool to start and return its PID.
    pub fn sleep_pid(&self) -> u32 {
        let pidfile = self.dir.path().join("sleep.pid");
        assert!(
            eventually(Duration::from_secs(5), || pidfile.exists()),
            "the sleep tool did not start; log:\n{}",
            self.log_text()
        );
        std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Send SIGTERM and wait for exit; returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("server running");
        unsafe_free_kill(child.id(), "TERM");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `kill -SIG pid` through the kill(1) command, so tests need no unsafe code.
pub fn unsafe_free_kill(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

/// Whether a process with this PID exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The PIDs of every live child of `pid` (scans `/proc/*/stat` for the parent).
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // Fields after the command name: state ppid ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        let ppid = f.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) && state != "Z" {
            out.push(child);
        }
    }
    out
}

/// Wait until `f` holds, up to `timeout`.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Opens `proc/new`, writes `payload` and sends the read that runs the
/// call, without waiting for its answer: the fid and the read's tag (to
/// flush it, clunk the fid, or receive the answer later).
pub fn start_call(c: &mut toolsrv::client::Session, payload: &str) -> (u32, u16) {
    use toolsrv::ninep::fs::ORDWR;
    let fid = c.client.walk_open("proc/new", ORDWR).unwrap();
    c.client.write(fid, payload.as_bytes()).unwrap();
    let tag = c
        .client
        .send(toolsrv::ninep::wire::Fcall::Tread {
            fid,
            offset: 0,
            count: 8192,
        })
        .unwrap();
    (fid, tag)
}
