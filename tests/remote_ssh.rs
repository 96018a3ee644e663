//! End-to-end: `toolsrv remote` against a real OpenSSH server started by the
//! test on a loopback port: deploy, remote-only variants, reconnects, teardown.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{alive, bin, children, eventually, unsafe_free_kill, write_tool};

/// A throw-away sshd on 127.0.0.1 with its own host key, user key and client config.
struct Sshd {
    dir: tempfile::TempDir,
    child: Child,
    port: u16,
    user: String,
    client_config: PathBuf,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {out:?}");
    out
}

fn keygen(path: &Path) {
    run_ok(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(path),
    );
}

fn start_sshd() -> Sshd {
    let sshd = Path::new("/usr/sbin/sshd");
    assert!(
        sshd.exists(),
        "these tests need OpenSSH: apt-get install openssh-server openssh-client"
    );
    let _ = std::fs::create_dir_all("/run/sshd");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    keygen(&d.join("host_key"));
    keygen(&d.join("user_key"));
    std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
    let user = String::from_utf8(run_ok(Command::new("id").arg("-un")).stdout)
        .unwrap()
        .trim()
        .to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = d.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             StrictModes no\nUsePAM no\nAllowStreamLocalForwarding yes\n\
             Subsystem sftp internal-sftp\nMaxStartups 100\nLogLevel VERBOSE\n",
            d = d.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let log = std::fs::File::create(d.join("sshd.log")).unwrap();
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let client_config = d.join("ssh_config");
    std::fs::write(
        &client_config,
        format!(
            "Host *\n  IdentityFile {d}/user_key\n  IdentitiesOnly yes\n  IdentityAgent none\n\
             UserKnownHostsFile {d}/known_hosts\n  GlobalKnownHostsFile /dev/null\n\
             StrictHostKeyChecking accept-new\n",
            d = d.display()
        ),
    )
    .unwrap();
    let s = Sshd {
        dir,
        child,
        port,
        user,
        client_config,
    };
    assert!(
        eventually(Duration::from_secs(10), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "sshd did not start: {}",
        s.log()
    );
    s
}

impl Sshd {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    /// `toolsrv remote` arguments reaching this sshd.
    fn remote_args(&self) -> Vec<String> {
        vec![
            "remote".into(),
            format!("{}@127.0.0.1", self.user),
            "--port".into(),
            self.port.to_string(),
            "--ssh-config".into(),
            self.client_config.display().to_string(),
            "--ssh-option".into(),
            "LogLevel=ERROR".into(),
        ]
    }
}

/// A running `toolsrv remote`, its stdout lines and its stderr file.
struct Remote {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: PathBuf,
}

impl Remote {
    fn spawn(args: &[String], home: &Path) -> Remote {
        let log = home.join("remote.log");
        let mut child = Command::new(bin())
            .args(args)
            .env("RUST_LOG", "toolsrv=debug")
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env_remove("SSH_AUTH_SOCK")
            .env_remove("TOOLSRV_TEST_REMOTE_SIDE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Remote { child, lines, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for the ready line; returns the socket path it names.
    fn ready(&self) -> PathBuf {
        match self.lines.recv_timeout(Duration::from_secs(45)) {
            Ok(l) => PathBuf::from(
                l.strip_prefix("toolsrv remote: ready on ")
                    .unwrap_or_else(|| panic!("unexpected line {l:?}")),
            ),
            Err(e) => panic!("no ready line ({e}); log:\n{}", self.log_text()),
        }
    }

    /// The ssh forwarder (`ssh -N … -L …`), a child of this process.
    fn forwarder(&self) -> Option<u32> {
        children(self.child.id()).into_iter().find(|p| {
            let args = cmdline(*p);
            args.iter().any(|a| a == "-N") && args.iter().any(|a| a == "-L")
        })
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        // After a failed assertion: let it tear down the remote side first.
        unsafe_free_kill(self.child.id(), "TERM");
        let _ = eventually(Duration::from_secs(15), || {
            self.child.try_wait().ok().flatten().is_some()
        });
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Live processes whose command line contains `needle` as one argument.
fn processes_with_arg(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| alive(*p) && cmdline(*p).iter().any(|a| a == needle))
        .collect()
}

fn call(socket: &Path, home: &Path, tool: &str) -> Output {
    Command::new(bin())
        .args(["call", tool, "--text", "--socket"])
        .arg(socket)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("TOOLSRV_SECRET")
        .env_remove("TOOLSRV_SOCKET")
        .current_dir(home)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Tools: `whereami` exists only where TOOLSRV_TEST_REMOTE_SIDE is set.
fn seed_tools(tools: &Path) {
    write_tool(
        tools,
        "whereami",
        r#"{"description":"Say where it runs.","args":{"type":"object"},"variants":[{"match":{"env":"TOOLSRV_TEST_REMOTE_SIDE"}}]}"#,
        Some("#!/bin/sh\necho \"on the remote side\"\n"),
    );
    write_tool(
        tools,
        "hello",
        r#"{"description":"Say hello.","args":{"type":"object"}}"#,
        Some("#!/bin/sh\necho hello\n"),
    );
}

#[test]
fn deploy_call_reconnect_restart_and_tear_down() {
    let sshd = start_sshd();
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let tools = h.join("tools");
    seed_tools(&tools);
    let profiles = h.join("sandbox");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(profiles.join("extra.yaml"), "network:\n  enabled: false\n").unwrap();
    let remote_dir = sshd.dir.path().join("remote");
    let remote_sock = remote_dir.join("run/toolsrv.sock");
    let local_sock = h.join("local/remote.sock");

    // Locally the variant does not match: the tool is not there.
    let local = Command::new(bin())
        .args(["run", "whereami", "--text", "--tools"])
        .arg(&tools)
        .arg("--profiles-dir")
        .arg(&profiles)
        .env_remove("TOOLSRV_TEST_REMOTE_SIDE")
        .output()
        .unwrap();
    assert!(!local.status.success(), "{}", text(&local));

    let mut args = sshd.remote_args();
    args.extend(
        [
            "--tools",
            tools.to_str().unwrap(),
            "--sandbox",
            profiles.to_str().unwrap(),
            "--remote-dir",
            remote_dir.to_str().unwrap(),
            "--local-socket",
            local_sock.to_str().unwrap(),
            "--remote-env",
            "TOOLSRV_TEST_REMOTE_SIDE=1",
            "--idle-timeout",
            "2s",
        ]
        .map(String::from),
    );
    let mut remote = Remote::spawn(&args, h);
    assert_eq!(remote.ready(), local_sock);

    // Deployed: the binary, the tools with their modes, the profiles.
    let installed = remote_dir.join(format!("bin/toolsrv-{}", env!("CARGO_PKG_VERSION")));
    assert!(installed.is_file(), "{}", remote.log_text());
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(remote_dir.join("tools/0/whereami")), 0o755);
    assert!(remote_dir.join("tools/0/whereami.meta").is_file());
    assert!(remote_dir.join("sandbox/extra.yaml").is_file());

    // Through the forwarded socket the remote's variants count.
    let o = call(&local_sock, h, "whereami");
    assert!(
        o.status.success(),
        "{}\n{}\nsshd: {}",
        text(&o),
        remote.log_text(),
        sshd.log()
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "on the remote side"
    );
    let server_pid: u32 = std::fs::read_to_string(remote_dir.join("run/toolsrv.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(server_pid));

    // The SSH connection drops: reconnect, same local path.
    let fwd = remote.forwarder().expect("an ssh forwarder");
    unsafe_free_kill(fwd, "KILL");
    assert!(
        eventually(Duration::from_secs(20), || remote
            .forwarder()
            .is_some_and(|p| p != fwd)),
        "no new forwarder: {}",
        remote.log_text()
    );
    let o = call(&local_sock, h, "hello");
    assert!(
        o.status.success(),
        "{}\n{}\nsshd: {}",
        text(&o),
        remote.log_text(),
        sshd.log()
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "hello");

    // The remote server exits when idle; the next call starts it again.
    assert!(
        eventually(Duration::from_secs(20), || !alive(server_pid)),
        "the remote server did not exit when idle"
    );
    let o = call(&local_sock, h, "whereami");
    assert!(
        o.status.success(),
        "{}\n{}\nsshd: {}",
        text(&o),
        remote.log_text(),
        sshd.log()
    );
    let new_pid: u32 = std::fs::read_to_string(remote_dir.join("run/toolsrv.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(new_pid, server_pid);

    // SIGTERM tears everything down.
    let fwd = remote.forwarder().expect("an ssh forwarder");
    unsafe_free_kill(remote.child.id(), "TERM");
    let mut status = None;
    assert!(
        eventually(Duration::from_secs(30), || {
            status = remote.child.try_wait().unwrap();
            status.is_some()
        }),
        "toolsrv remote did not exit on SIGTERM"
    );
    assert!(status.unwrap().success(), "{}", remote.log_text());
    let sock = remote_sock.to_str().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || processes_with_arg(sock)
            .is_empty()),
        "remote server left running: {:?}",
        processes_with_arg(sock)
    );
    assert!(!alive(new_pid));
    assert!(!alive(fwd));
    assert!(!remote_sock.exists(), "remote socket left behind");
    assert!(!local_sock.exists(), "local socket left behind");
    assert!(!remote_dir.join("run/toolsrv.pid").exists());

    // A second session reuses the installed binary; Ctrl-C tears it down too.
    let mut again = Remote::spawn(&args, h);
    assert_eq!(again.ready(), local_sock);
    assert!(
        again.log_text().contains("up to date"),
        "{}",
        again.log_text()
    );
    let o = call(&local_sock, h, "hello");
    assert!(o.status.success(), "{}\n{}", text(&o), again.log_text());
    unsafe_free_kill(again.child.id(), "INT");
    let mut status = None;
    assert!(eventually(Duration::from_secs(30), || {
        status = again.child.try_wait().unwrap();
        status.is_some()
    }));
    assert!(status.unwrap().success(), "{}", again.log_text());
    assert!(eventually(Duration::from_secs(5), || processes_with_arg(
        sock
    )
    .is_empty()));
    assert!(!remote_sock.exists() && !local_sock.exists());
    drop(sshd);
}
