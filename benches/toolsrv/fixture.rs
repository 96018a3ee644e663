//! The benchmark's world: the release binary, a temporary directory with the
//! trivial tools (compiled C and `#!/bin/sh`), and real `toolsrv serve` processes.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value};
use toolsrv::client::Session;

/// The secret every benchmark client uses (the first secret a server sees wins).
pub const SECRET: &[u8] = b"toolsrv-bench-secret";
/// The agent every benchmark call is made for.
pub const AGENT: &str = "bench";
/// What every trivial call writes to the tool's stdin (exactly what the server writes).
pub const INPUT: &[u8] = b"{\"text\":\"hello\"}\n";

/// Variables `cargo bench` adds that must not reach the tools. Cargo sets
/// `LD_LIBRARY_PATH` to four directories (target/release, its deps, the
/// toolchain's libs): the dynamic loader of every dynamically linked tool
/// then probes about 30 paths before it finds libc, about 0.1 ms per spawn.
/// The sandboxed server's filtered environment drops it, the direct spawn
/// and `--yolo` calls kept it: that was the `--yolo` ≈ 0.1 ms slower gap.
pub const CARGO_ENV: &[&str] = &["LD_LIBRARY_PATH"];

/// `cmd` without [`CARGO_ENV`], so every way of running a tool sees the same environment.
pub fn clean_env(cmd: &mut Command) -> &mut Command {
    for k in CARGO_ENV {
        cmd.env_remove(k);
    }
    cmd
}

/// `target/release/toolsrv`, or a clear error saying how to build it.
pub fn release_binary() -> Result<PathBuf, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_absolute() { t } else { manifest.join(t) })
        .unwrap_or_else(|| manifest.join("target"));
    let bin = target.join("release/toolsrv");
    if !bin.is_file() {
        return Err(format!(
            "{} is missing: run `cargo build --release && cargo bench --bench toolsrv`",
            bin.display()
        ));
    }
    // Warn when the binary is older than the sources it was built from.
    let built = bin.metadata().and_then(|m| m.modified()).ok();
    let newest_src = newest_mtime(&manifest.join("src"));
    if let (Some(b), Some(s)) = (built, newest_src)
        && s > b
    {
        eprintln!(
            "warning: {} is older than src/: run `cargo build --release` first for current numbers",
            bin.display()
        );
    }
    Ok(bin)
}

fn newest_mtime(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let t = if p.is_dir() {
            newest_mtime(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).ok()
        };
        newest = newest.max(t);
    }
    newest
}

/// The temporary world of one benchmark run.
pub struct World {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    /// Tools directory: `echo_c`, `echo_sh`, `stamp`, `flood`.
    pub tools: PathBuf,
    /// Working directory of every call (the stamp file lands here).
    pub work: PathBuf,
}

const META: &str = r#"{"description":"bench tool","args":{"type":"object","properties":{"text":{"type":"string"}}}}"#;

impl World {
    pub fn new(bin: PathBuf) -> Result<World, String> {
        let dir = tempfile::Builder::new()
            .prefix("toolsrv-bench")
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        let tools = dir.path().join("tools");
        let work = dir.path().join("work");
        for d in [&tools, &work] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/toolsrv/tool.c");
        for (name, mode) in [
            ("echo_c", "MODE_ECHO"),
            ("stamp", "MODE_STAMP"),
            ("flood", "MODE_FLOOD"),
        ] {
            let out = tools.join(name);
            let st = Command::new("gcc")
                .args(["-O2", &format!("-D{mode}"), "-o"])
                .arg(&out)
                .arg(&src)
                .status()
                .map_err(|e| format!("cannot run gcc (needed for the compiled tool): {e}"))?;
            if !st.success() {
                return Err(format!("gcc failed building {name}"));
            }
            std::fs::write(tools.join(format!("{name}.meta")), META).map_err(|e| e.to_string())?;
        }
        let sh = tools.join("echo_sh");
        std::fs::write(&sh, "#!/bin/sh\ncat\n").map_err(|e| e.to_string())?;
        std::fs::set_permissions(&sh, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        std::fs::write(tools.join("echo_sh.meta"), META).map_err(|e| e.to_string())?;
        Ok(World {
            dir,
            bin,
            tools,
            work,
        })
    }

    pub fn tool(&self, name: &str) -> PathBuf {
        self.tools.join(name)
    }

    /// Start `toolsrv serve` on `tools` (sandboxed unless `yolo`).
    pub fn serve(&self, name: &str, tools: &Path, yolo: bool) -> Result<Server, String> {
        let root = self.dir.path().join(name);
        std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
        let socket = root.join("run/toolsrv.sock");
        let log = root.join("server.log");
        let logf = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.bin);
        clean_env(&mut cmd)
            .arg("serve")
            .arg("--listen")
            .arg(&socket)
            .arg("--tools")
            .arg(tools)
            .arg("--cwd")
            .arg(&self.work)
            .env("XDG_CONFIG_HOME", root.join("config"))
            .env_remove("RUST_LOG")
            .env_remove("TOOLSRV_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf);
        if yolo {
            cmd.arg("--yolo");
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start server: {e}"))?;
        let server = Server { child, socket, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&server.socket).is_err() {
            if Instant::now() > deadline {
                return Err(format!(
                    "server did not start; log:\n{}",
                    std::fs::read_to_string(&server.log).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(server)
    }
}

/// A running `toolsrv serve`; killed on drop.
pub struct Server {
    pub child: Child,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn session(&self) -> Result<Session, String> {
        Session::connect_with_secret(&self.socket, Some(SECRET)).map_err(|e| e.to_string())
    }

    /// A session with `tools` loaded for [`AGENT`].
    pub fn loaded_session(&self, tools: &[&str]) -> Result<Session, String> {
        let mut s = self.session()?;
        for t in tools {
            s.ensure_loaded(AGENT, t).map_err(|e| e.to_string())?;
        }
        Ok(s)
    }

    /// (VmRSS, VmHWM) in KiB.
    pub fn memory_kib(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The arguments of a trivial call.
pub fn args() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("text".into(), Value::from("hello"));
    m
}

/// One synchronous call through the server; an error result is an error.
pub fn call(s: &mut Session, tool: &str, cwd: &Path) -> Result<(), String> {
    let r = s
        .call(AGENT, tool, &args(), Some(cwd))
        .map_err(|e| e.to_string())?;
    if r.is_error {
        return Err(format!("{tool}: error result: {r:?}"));
    }
    Ok(())
}

/// Spawn `tool` directly, feed it [`INPUT`], wait for its output.
pub fn direct(tool: &Path, cwd: &Path) -> Result<Vec<u8>, String> {
    let mut c = clean_env(&mut Command::new(tool))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", tool.display()))?;
    if let Some(mut stdin) = c.stdin.take() {
        let _ = stdin.write_all(INPUT);
    }
    let out = c.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{} failed: {:?}", tool.display(), out.status));
    }
    Ok(out.stdout)
}
