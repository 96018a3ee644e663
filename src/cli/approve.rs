//! `toolsrv approve`: an approver for bypass and sudo requests, on the
//! terminal (password without echo) or with kdialog/zenity on a desktop.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use zeroize::Zeroizing;

use crate::client::Session;
use crate::ninep::fs::OREAD;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server's socket.
    #[arg(long, env = "TOOLSRV_SOCKET", default_value_os_t = crate::client::default_socket())]
    socket: PathBuf,
    /// Decide one request, then exit.
    #[arg(long)]
    once: bool,
    /// Reject every request without asking.
    #[arg(long, conflicts_with = "desktop")]
    auto_reject: bool,
    /// Ask with kdialog or zenity (needs DISPLAY or WAYLAND_DISPLAY).
    #[arg(long)]
    desktop: bool,
}

/// What the approver decided about one request.
struct Answer {
    approve: bool,
    password: Option<Zeroizing<String>>,
    reason: Option<String>,
}

/// How requests are put to a person.
enum Asker {
    Terminal,
    AutoReject,
    Desktop { program: PathBuf, kdialog: bool },
}

fn user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| format!("uid{}", rustix::process::getuid().as_raw()))
}

fn tty_name() -> String {
    std::fs::read_link("/proc/self/fd/0")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "notty".into())
}

impl Asker {
    fn from_args(args: &Args) -> anyhow::Result<Asker> {
        if args.auto_reject {
            return Ok(Asker::AutoReject);
        }
        if !args.desktop {
            return Ok(Asker::Terminal);
        }
        let has_display = ["DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|d| !d.is_empty()));
        if !has_display {
            bail!("--desktop needs a desktop session: neither DISPLAY nor WAYLAND_DISPLAY is set");
        }
        let path = std::env::var_os("PATH");
        for (name, kdialog) in [("kdialog", true), ("zenity", false)] {
            if let Some(program) = crate::sandbox::find_in_path(name, path.as_deref()) {
                return Ok(Asker::Desktop { program, kdialog });
            }
        }
        bail!("--desktop needs kdialog or zenity in PATH; install one, or run without --desktop")
    }

    fn name(&self) -> String {
        match self {
            Asker::Terminal => format!("terminal:{}@{}", user(), tty_name()),
            Asker::AutoReject => format!("auto-reject:{}", user()),
            Asker::Desktop { program, .. } => format!(
                "desktop:{}:{}@{}",
                program
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                user(),
                std::env::var("WAYLAND_DISPLAY")
                    .or_else(|_| std::env::var("DISPLAY"))
                    .unwrap_or_default()
            ),
        }
    }

    fn ask(&self, req: &Value, text: &str) -> anyhow::Result<Answer> {
        let credential = req.get("kind").and_then(Value::as_str) == Some("credential");
        match self {
            Asker::AutoReject => Ok(Answer {
                approve: false,
                password: None,
                reason: Some("automatic rejection (toolsrv approve --auto-reject)".into()),
            }),
            Asker::Terminal => ask_terminal(text, credential),
            Asker::Desktop { program, kdialog } => ask_desktop(program, *kdialog, text, credential),
        }
    }
}

fn field<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("-")
}

/// A request as shown to the person deciding.
fn describe(req: &Value) -> String {
    let asked = req.get("asked_by").cloned().unwrap_or(Value::Null);
    let num = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_u64)
            .map_or("-".into(), |n| n.to_string())
    };
    let mut s = format!(
        "toolsrv bypass request {} ({})\n  {}\n  tool:    {}\n  agent:   {}\n  session: {}\n  command: {}\n  cwd:     {}\n  asked by: {} (toolsrv process {}, os pid {}, uid {})\n",
        num(req, "id"),
        field(req, "kind"),
        field(req, "prompt"),
        field(req, "tool"),
        field(req, "agent"),
        field(req, "session"),
        field(req, "command"),
        field(req, "cwd"),
        field(&asked, "origin"),
        num(&asked, "proc"),
        num(&asked, "os_pid"),
        num(&asked, "uid"),
    );
    if let Some(u) = req.get("sudo_user").and_then(Value::as_str) {
        s.push_str(&format!("  runs as: {u} (sudo)\n"));
    }
    if let Some(ms) = req.get("expires_in_ms").and_then(Value::as_u64) {
        s.push_str(&format!("  expires in {} s\n", ms / 1000));
    }
    s
}

/// Turns terminal echo off until dropped (only when stdin is a terminal).
struct NoEcho(Option<rustix::termios::Termios>);

impl NoEcho {
    fn new() -> NoEcho {
        let stdin = std::io::stdin();
        let Ok(saved) = rustix::termios::tcgetattr(&stdin) else {
            return NoEcho(None);
        };
        let mut t = saved.clone();
        t.local_modes.remove(rustix::termios::LocalModes::ECHO);
        t.local_modes.insert(rustix::termios::LocalModes::ECHONL);
        match rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Flush, &t) {
            Ok(()) => NoEcho(Some(saved)),
            Err(_) => NoEcho(None),
        }
    }
}

impl Drop for NoEcho {
    fn drop(&mut self) {
        if let Some(saved) = self.0.take() {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin(),
                rustix::termios::OptionalActions::Now,
                &saved,
            );
        }
    }
}

fn read_line() -> anyhow::Result<Zeroizing<String>> {
    let mut line = Zeroizing::new(String::new());
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the terminal")?;
    if n == 0 {
        bail!("end of input on the terminal");
    }
    while line.ends_with('\n') || line.ends_with('\r') {
        line.pop();
    }
    Ok(line)
}

fn ask_terminal(text: &str, credential: bool) -> anyhow::Result<Answer> {
    let mut out = std::io::stdout().lock();
    write!(out, "\n{text}")?;
    if credential {
        // Echo goes off before the prompt appears: nothing typed after it is shown.
        let guard = NoEcho::new();
        write!(out, "sudo password (empty to reject): ")?;
        out.flush()?;
        let pw = read_line()?;
        drop(guard);
        writeln!(out)?;
        if pw.is_empty() {
            return Ok(Answer {
                approve: false,
                password: None,
                reason: Some("no password given".into()),
            });
        }
        return Ok(Answer {
            approve: true,
            password: Some(pw),
            reason: None,
        });
    }
    write!(out, "Approve? [y/N] ")?;
    out.flush()?;
    let line = read_line()?;
    let yes = matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes");
    writeln!(out, "{}", if yes { "approved" } else { "rejected" })?;
    Ok(Answer {
        approve: yes,
        password: None,
        reason: (!yes).then(|| "declined at the terminal".to_string()),
    })
}

fn ask_desktop(
    program: &Path,
    kdialog: bool,
    text: &str,
    credential: bool,
) -> anyhow::Result<Answer> {
    let mut cmd = std::process::Command::new(program);
    match (kdialog, credential) {
        (true, false) => cmd.args(["--title", "toolsrv", "--yesno", text]),
        (true, true) => cmd.args(["--title", "toolsrv", "--password", text]),
        (false, false) => cmd.args(["--question", "--title=toolsrv", "--text", text]),
        (false, true) => cmd.args(["--password", "--title=toolsrv"]),
    };
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    let stdout = Zeroizing::new(out.stdout);
    if !out.status.success() {
        return Ok(Answer {
            approve: false,
            password: None,
            reason: Some("declined in the desktop dialog".into()),
        });
    }
    if !credential {
        return Ok(Answer {
            approve: true,
            password: None,
            reason: None,
        });
    }
    let mut pw = Zeroizing::new(String::from_utf8_lossy(&stdout).into_owned());
    while pw.ends_with('\n') || pw.ends_with('\r') {
        pw.pop();
    }
    Ok(Answer {
        approve: !pw.is_empty(),
        reason: pw.is_empty().then(|| "no password given".to_string()),
        password: (!pw.is_empty()).then_some(pw),
    })
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let asker = Asker::from_args(&args)?;
    let approver = asker.name();
    let mut s = Session::connect(&args.socket)?;
    // One fid for the whole session: requests it read stay ours until resolved,
    // and go back to other observers if we exit first.
    let fid = s
        .client
        .walk_open("bypass/pending", OREAD)
        .context("opening bypass/pending")?;
    eprintln!("toolsrv approve: waiting for requests as {approver}");
    loop {
        let data = s.client.read_all(fid).context("reading bypass/pending")?;
        let req: Value = serde_json::from_slice(&data).context("bypass/pending is not JSON")?;
        let id = req
            .get("id")
            .and_then(Value::as_u64)
            .context("a pending request without an id")?;
        let answer = asker.ask(&req, &describe(&req))?;
        let mut msg = json!({"id": id, "approve": answer.approve, "approver": approver});
        if let Some(r) = &answer.reason {
            msg["reason"] = json!(r);
        }
        if let Some(pw) = &answer.password {
            msg["password"] = Value::String(pw.to_string());
        }
        let text = Zeroizing::new(serde_json::to_vec(&msg).context("encoding the resolution")?);
        if let Some(Value::String(pw)) = msg.get_mut("password") {
            zeroize::Zeroize::zeroize(pw);
        }
        drop(answer);
        match s.write("bypass/resolve", &text) {
            Ok(()) => eprintln!(
                "request {id}: {}",
                if msg["approve"] == json!(true) {
                    "approved"
                } else {
                    "rejected"
                }
            ),
            Err(e) => eprintln!("request {id}: {e}"),
        }
        if args.once {
            break;
        }
    }
    let _ = s.client.clunk(fid);
    Ok(ExitCode::SUCCESS)
}
