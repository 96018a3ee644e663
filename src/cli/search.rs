//! `toolsrv search`: rank the server's tools for what the user asked.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

use crate::client::Session;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// What the user asked, in their words.
    query: Vec<String>,
    /// How many tools to show.
    #[arg(long, default_value_t = 5)]
    limit: usize,
    /// Mark the tools this agent has loaded.
    #[arg(long, default_value = "cli")]
    agent: String,
    /// Print the server's JSON answer.
    #[arg(long)]
    json: bool,
    /// The server's socket.
    #[arg(long, env = "TOOLSRV_SOCKET", default_value_os_t = crate::client::default_socket())]
    socket: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let query = args.query.join(" ");
    if query.trim().is_empty() {
        anyhow::bail!("give a query, e.g. `toolsrv search find large files`");
    }
    let mut s = Session::connect(&args.socket)?;
    let request = crate::protocol::encode_payload(&[
        ("query", &query),
        ("limit", &args.limit.to_string()),
        ("agent", &args.agent),
    ]);
    let answer = s.rdwr("search", request.as_bytes())?;
    if args.json {
        print!("{}", String::from_utf8_lossy(&answer));
        return Ok(ExitCode::SUCCESS);
    }
    let hits: Vec<Value> = serde_json::from_slice(&answer)?;
    if let Some(why) = hits.first().and_then(|h| h["degraded"].as_str()) {
        eprintln!("toolsrv: search degraded: {why}");
    }
    for h in &hits {
        println!(
            "{:5.2}  {:<24} {}{}",
            h["score"].as_f64().unwrap_or(0.0),
            h["name"].as_str().unwrap_or(""),
            h["description"].as_str().unwrap_or(""),
            if h["loaded"] == true {
                "  [loaded]"
            } else {
                ""
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
