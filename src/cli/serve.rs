//! `toolsrv serve`: run the 9P2000 tool service on a Unix socket.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::exec::Limits;
use crate::server::Config;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Working directory for calls that do not name one (`~` is expanded).
    #[arg(long, default_value = ".")]
    cwd: String,
    /// Unix socket to listen on (its directory is created 0700 if missing).
    #[arg(long, env = "TOOLSRV_SOCKET", default_value_os_t = crate::client::default_socket())]
    listen: PathBuf,
    /// Tool directory (repeatable; first wins on a name clash).
    /// Default: $OLLIE_TOOLS_PATH, else $XDG_CONFIG_HOME/ollie/tools.
    #[arg(long = "tools", value_name = "DIR")]
    tools: Vec<PathBuf>,
    /// Directory of sandbox profiles (default: $XDG_CONFIG_HOME/ollie/sandbox).
    #[arg(long, value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Write a completion message to the agent's prompt file when a background
    /// process with a session and agent ends: `unix!/path/to/socket` (a 9P
    /// server) or a directory where that namespace is mounted.
    #[arg(long, value_name = "TARGET")]
    notify: Option<crate::notify::Target>,
    /// Path of the prompt file under the --notify target.
    #[arg(long, value_name = "TEMPLATE", default_value = crate::notify::DEFAULT_TEMPLATE)]
    notify_path: String,
    /// Embedding endpoint for `search` (OpenAI-compatible or Ollama base URL,
    /// plain HTTP); default $TOOLSRV_EMBED_URL. Without one, search is lexical only.
    #[arg(long, value_name = "URL")]
    embed_url: Option<String>,
    /// Embedding model name (default $TOOLSRV_EMBED_MODEL).
    #[arg(long, value_name = "MODEL", requires = "embed_url")]
    embed_model: Option<String>,
    /// Endpoint kind: `openai` (/v1/embeddings) or `ollama` (/api/embed).
    #[arg(long, value_name = "KIND", default_value = "openai", value_parser = ["openai", "ollama"])]
    embed_kind: String,
    /// Run tools without the sandbox (development only; logged loudly).
    #[arg(long)]
    yolo: bool,
    /// Accept clients without authentication (debugging only).
    #[arg(long)]
    no_auth: bool,
    /// Exit this long after the last client disconnects (e.g. `10m`, `90s`).
    #[arg(long, value_parser = parse_duration)]
    idle_timeout: Option<Duration>,
    /// With --idle-timeout: exit this long after start if nobody connects.
    #[arg(long, value_parser = parse_duration, default_value = "60s", hide = true)]
    idle_grace: Duration,
    /// Forget finished processes this long after they ended.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    gc_age: Duration,
    /// Default time limit of a call (a call's `timeout` field overrides it).
    #[arg(long, value_parser = parse_duration, default_value = "120s")]
    timeout: Duration,
    /// Captured output kept per process, in bytes (the pipe is drained past it).
    #[arg(long, default_value_t = 4 << 20)]
    output_cap: usize,
    /// A bypass/sudo approval not given within this time is rejected.
    #[arg(long, value_parser = parse_duration, default_value = "120s")]
    bypass_timeout: Duration,
    /// JSON-lines audit log of bypass decisions
    /// (default: $XDG_STATE_HOME/toolsrv/audit.jsonl, else ~/.local/state/toolsrv/audit.jsonl).
    #[arg(long, value_name = "PATH")]
    audit_log: Option<PathBuf>,
    /// The user `sudo: true` tools run as.
    #[arg(long, value_name = "USER", default_value = "root")]
    sudo_user: String,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::protocol::parse_duration(s).map_err(|e| e.to_string())
}

fn expand_tilde(p: &str) -> PathBuf {
    match (p.strip_prefix('~'), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(home).join(rest.trim_start_matches('/'))
        }
        _ => PathBuf::from(p),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cwd = expand_tilde(&args.cwd);
    let cwd = cwd
        .canonicalize()
        .with_context(|| format!("--cwd {}", cwd.display()))?;
    let tools_dirs = if args.tools.is_empty() {
        crate::meta::tools_path_from_env()
    } else {
        args.tools
    };
    let limits = Limits {
        output_cap: args.output_cap,
        default_timeout: args.timeout,
        ..Limits::default()
    };
    let config = Config {
        cwd,
        listen: args.listen,
        tools_dirs,
        yolo: args.yolo,
        no_auth: args.no_auth,
        idle_timeout: args.idle_timeout,
        idle_grace: args.idle_grace,
        gc_age: args.gc_age,
        limits,
        profiles_dir: args.profiles_dir,
        embed: match args.embed_url {
            Some(url) => {
                let kind = if args.embed_kind == "ollama" {
                    crate::search::EmbedKind::Ollama
                } else {
                    crate::search::EmbedKind::OpenAi
                };
                let model = args
                    .embed_model
                    .context("--embed-url needs --embed-model")?;
                Some(crate::search::EmbedConfig::new(url, model, kind))
            }
            None => crate::search::EmbedConfig::from_env().context("TOOLSRV_EMBED_* settings")?,
        },
        notify: args
            .notify
            .map(|t| crate::notify::Notifier::new(t, args.notify_path))
            .transpose()?,
        bypass: crate::bypass::Settings {
            timeout: args.bypass_timeout,
            audit_log: args.audit_log,
            sudo_user: args.sudo_user,
        },
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(crate::server::serve(config))?;
    Ok(ExitCode::SUCCESS)
}
