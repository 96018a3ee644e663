//! `toolsrv remote`: deploy toolsrv to a host over SSH and serve its tools on
//! a local socket until SIGINT/SIGTERM (see `docs/remote.md`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::remote::{DEFAULT_REMOTE_DIR, Options, SshConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to deploy: `[USER@]HOST`, or a `Host` alias of your ssh config.
    destination: String,
    /// Local tool directory to deploy (repeatable; first wins on a name
    /// clash). None: the remote's own tools path.
    #[arg(long = "tools", value_name = "DIR")]
    tools: Vec<PathBuf>,
    /// Local directory of sandbox profiles to deploy (`*.yaml`).
    #[arg(long, value_name = "DIR")]
    sandbox: Option<PathBuf>,
    /// The local socket clients use (default: `remote-<HOST>.sock` next to
    /// the default toolsrv socket).
    #[arg(long, value_name = "PATH")]
    local_socket: Option<PathBuf>,
    /// An OpenSSH option for ssh and scp, as `KEY=VALUE` (repeatable; passed as `-o`).
    #[arg(long = "ssh-option", value_name = "KEY=VALUE")]
    ssh_options: Vec<String>,
    /// An ssh config file to use instead of `~/.ssh/config` (`-F`).
    #[arg(long, value_name = "FILE")]
    ssh_config: Option<PathBuf>,
    /// The SSH port.
    #[arg(long, short = 'p')]
    port: Option<u16>,
    /// The directory on the remote for the binary, tools, profiles, socket and log.
    #[arg(long, default_value = DEFAULT_REMOTE_DIR)]
    remote_dir: String,
    /// The remote server exits this long after its last client (it is
    /// started again on the next connection).
    #[arg(long, default_value = "10m", value_parser = check_duration)]
    idle_timeout: String,
    /// A toolsrv binary for the remote when its OS or architecture differs
    /// from this one's (must be this version).
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// `KEY=VALUE` in the remote server's environment (repeatable).
    #[arg(long = "remote-env", value_name = "KEY=VALUE")]
    remote_env: Vec<String>,
    /// One more argument for the remote `toolsrv serve` (repeatable).
    #[arg(long = "serve-arg", value_name = "ARG", allow_hyphen_values = true)]
    serve_args: Vec<String>,
}

fn check_duration(s: &str) -> Result<String, String> {
    crate::protocol::parse_duration(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    for o in &args.ssh_options {
        if o.starts_with('-') || !o.contains(['=', ' ']) {
            bail!("--ssh-option {o:?}: give an OpenSSH option as KEY=VALUE, e.g. Port=2222");
        }
    }
    for kv in &args.remote_env {
        if kv.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
            bail!("--remote-env {kv:?}: give KEY=VALUE");
        }
    }
    for d in &args.tools {
        if !d.is_dir() {
            bail!("--tools {}: not a directory", d.display());
        }
    }
    if let Some(d) = &args.sandbox
        && !d.is_dir()
    {
        bail!("--sandbox {}: not a directory", d.display());
    }
    if let Some(b) = &args.binary
        && !b.is_file()
    {
        bail!("--binary {}: not a file", b.display());
    }
    let local_socket = args
        .local_socket
        .clone()
        .unwrap_or_else(|| crate::remote::default_local_socket(&args.destination));
    let opts = Options {
        ssh: SshConfig {
            dest: args.destination,
            config_file: args.ssh_config,
            options: args.ssh_options,
            port: args.port,
        },
        tools: args.tools,
        sandbox: args.sandbox,
        local_socket,
        remote_dir: args.remote_dir,
        idle_timeout: args.idle_timeout,
        binary: args.binary,
        remote_env: args.remote_env,
        serve_args: args.serve_args,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let shutdown = CancellationToken::new();
        watch_signals(shutdown.clone())?;
        crate::remote::run(opts, shutdown, |sock| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "toolsrv remote: ready on {}", sock.display());
            let _ = out.flush();
        })
        .await
        .context("toolsrv remote")
    })?;
    Ok(ExitCode::SUCCESS)
}

/// SIGINT or SIGTERM cancels `token`.
fn watch_signals(token: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
        token.cancel();
    });
    Ok(())
}
