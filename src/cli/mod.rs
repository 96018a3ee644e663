//! The command line: one file per subcommand, each with its own `Args` and
//! `run`. Errors are reported here with their context chain.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod approve;
mod call;
mod check;
mod list;
mod ninep;
mod remote;
mod run;
mod sandbox_exec;
mod search;
mod search_eval;
mod serve;

/// toolsrv discovers tools from `.meta` sidecar files, serves them to agents
/// over 9P2000 on a Unix socket, and runs each call as a sandboxed child.
#[derive(Debug, Parser)]
#[command(name = "toolsrv", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the tool namespace over 9P2000 on a Unix socket.
    Serve(Box<serve::Args>),
    /// Call a tool through a running server and print its result.
    Call(call::Args),
    /// Run one tool call locally, without a server, and print its result.
    Run(run::Args),
    /// List every discovered tool, its command, its tier and any problems.
    List(list::Args),
    /// Lint `.meta` files for tool authors; exits non-zero on errors.
    Check(check::Args),
    /// Talk to the raw 9P namespace of a running server.
    #[command(name = "9p")]
    NineP(ninep::Args),
    /// Run a command under a sandbox profile, outside the server.
    SandboxExec(sandbox_exec::Args),
    /// Find the tools that fit a request, ranked (through a running server).
    Search(search::Args),
    /// Print recall@1 and recall@5 of the discovery rankers on a labelled set.
    SearchEval(search_eval::Args),
    /// Approve or reject bypass and sudo requests of a running server.
    Approve(approve::Args),
    /// Deploy toolsrv to a host over SSH and serve its tools on a local socket.
    Remote(remote::Args),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::Serve(a) => serve::run(*a),
        Command::Call(a) => call::run(a),
        Command::Run(a) => run::run(a),
        Command::List(a) => list::run(a),
        Command::Check(a) => check::run(a),
        Command::NineP(a) => ninep::run(a),
        Command::SandboxExec(a) => sandbox_exec::run(a),
        Command::Search(a) => search::run(a),
        Command::SearchEval(a) => search_eval::run(a),
        Command::Approve(a) => approve::run(a),
        Command::Remote(a) => remote::run(a),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("toolsrv: {}", error_text(&err));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes as one line, each cause once: many messages
/// already quote their cause, which `{:#}` would then print again.
fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let c = cause.to_string();
        if c.is_empty() || text.contains(&c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&c);
    }
    text
}

/// Logs go to stderr; `RUST_LOG` (default `info`) chooses what is shown.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_text_names_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(2);
        let err = anyhow::Error::new(io)
            .context("i/o error: No such file or directory (os error 2)")
            .context("cannot connect to /x.sock: i/o error: No such file or directory (os error 2) (is it running?)")
            .context("calling echo");
        assert_eq!(
            super::error_text(&err),
            "calling echo: cannot connect to /x.sock: i/o error: No such file or directory (os error 2) (is it running?)"
        );
        let plain = anyhow::anyhow!("outer").context("top");
        assert_eq!(super::error_text(&plain), "top: outer");
    }
}
