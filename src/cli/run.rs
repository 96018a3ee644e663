//! `toolsrv run`: one call, locally, without a server, through the same
//! validation, sandbox and executor the server uses.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::exec::{self, Limits, Output};
use crate::meta::Discoverer;
use crate::proc::{Policy, Request};
use crate::sandbox::Profiles;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The tool to run.
    tool: String,
    /// Arguments as a JSON object, or `-` to read them from stdin (default `{}`).
    /// Dispatch fields `timeout`, `sandbox` and `bypass` may be included.
    json: Option<String>,
    /// Tool directory (repeatable; default: $OLLIE_TOOLS_PATH, else
    /// $XDG_CONFIG_HOME/ollie/tools).
    #[arg(long = "tools", value_name = "DIR")]
    tools: Vec<PathBuf>,
    /// Print only the result's text, not the JSON `ToolResult`.
    #[arg(long)]
    text: bool,
    /// Run without the sandbox.
    #[arg(long)]
    yolo: bool,
    /// Directory of sandbox profiles (default: $XDG_CONFIG_HOME/ollie/sandbox).
    #[arg(long, value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let call_args = super::call::read_args(args.json.as_deref())?;
    let dirs = if args.tools.is_empty() {
        crate::meta::tools_path_from_env()
    } else {
        args.tools
    };
    let tools_path = std::env::join_paths(&dirs)
        .context("tool directories cannot contain ':'")?
        .to_string_lossy()
        .into_owned();
    let catalog = Discoverer::new(dirs.clone()).discover();
    let Some(tool) = catalog.tools.get(&args.tool).cloned() else {
        let hidden = catalog.hidden.iter().any(|h| h == &args.tool);
        if hidden {
            bail!(
                "tool {:?} is hidden on this host: none of its variants match",
                args.tool
            );
        }
        bail!(
            "no tool {:?} in {} (try `toolsrv list`)",
            args.tool,
            tools_path
        );
    };
    let profiles = if args.yolo {
        None
    } else {
        let dir = args
            .profiles_dir
            .or_else(Profiles::default_dir)
            .context("no configuration directory: set HOME or pass --profiles-dir")?;
        Some(Profiles::new(dir))
    };
    let cwd = std::env::current_dir().context("current directory")?;
    let policy = Policy::new(tools_path, cwd.clone(), Limits::default(), profiles)?;
    let prepared = policy.prepare(Request {
        tool,
        args: call_args,
        cwd: Some(cwd),
        session: std::env::var("OLLIE_SESSION_ID").ok(),
        agent: std::env::var("OLLIE_AGENT_ID").unwrap_or_else(|_| "cli".into()),
        background: false,
    });
    let result = match prepared {
        Err(refusal) => refusal,
        Ok((_, call)) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            let output = Arc::new(Output::new(call.limits.output_cap));
            let cancel = CancellationToken::new();
            let c = cancel.clone();
            rt.block_on(async move {
                // Ctrl-C ends the tool's whole process group, like a server cancel.
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        c.cancel();
                    }
                });
                exec::run(call, output, cancel, |_| {}).await.result
            })
        }
    };
    super::call::print_result(&result, args.text)
}
