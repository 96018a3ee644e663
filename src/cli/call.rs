//! `toolsrv call`: load a tool for an agent if needed, run it through a
//! running server and print the result.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::{Map, Value};

use crate::client::Session;
use crate::protocol::ToolResult;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tool to call.
    tool: String,
    /// Arguments as a JSON object, or `-` to read them from stdin (default `{}`).
    json: Option<String>,
    /// The agent the call is made for (the tool is loaded for it if needed).
    #[arg(long, default_value = "cli")]
    agent: String,
    /// Start the call in the background and print its PID.
    #[arg(long)]
    bg: bool,
    /// Print only the result's text, not the JSON `ToolResult`.
    #[arg(long)]
    text: bool,
    /// Working directory of the call (default: this directory).
    #[arg(long, value_name = "DIR", conflicts_with = "server_cwd")]
    cwd: Option<PathBuf>,
    /// Run in the server's own working directory (for a server on another
    /// host, where this directory may not exist).
    #[arg(long)]
    server_cwd: bool,
    /// The server's socket.
    #[arg(long, env = "TOOLSRV_SOCKET", default_value_os_t = crate::client::default_socket())]
    socket: PathBuf,
}

/// Parse the JSON argument (`-` reads stdin) into an object.
pub(super) fn read_args(json: Option<&str>) -> anyhow::Result<Map<String, Value>> {
    let text = match json {
        None => return Ok(Map::new()),
        Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading arguments from stdin")?;
            s
        }
        Some(s) => s.to_string(),
    };
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str(&text).context("arguments are not valid JSON")? {
        Value::Object(m) => Ok(m),
        other => bail!("arguments must be a JSON object, not {other}"),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let call_args = read_args(args.json.as_deref())?;
    let mut s = Session::connect(&args.socket)?;
    s.ensure_loaded(&args.agent, &args.tool)?;
    let cwd = match (args.cwd, args.server_cwd) {
        (_, true) => None,
        (Some(dir), false) => Some(dir),
        (None, false) => std::env::current_dir().ok(),
    };
    if args.bg {
        let pid = s.call_bg(&args.agent, &args.tool, &call_args, cwd.as_deref())?;
        println!("{pid}");
        return Ok(ExitCode::SUCCESS);
    }
    let result = s.call(&args.agent, &args.tool, &call_args, cwd.as_deref())?;
    print_result(&result, args.text)
}

/// Print a result (JSON, or its text with `text`); exit status 1 for `isError`.
pub(super) fn print_result(result: &ToolResult, text: bool) -> anyhow::Result<ExitCode> {
    if text {
        println!("{}", result.joined_text());
    } else {
        println!("{}", serde_json::to_string(result)?);
    }
    Ok(if result.is_error {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
