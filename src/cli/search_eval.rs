//! `toolsrv search-eval` (hidden, for developers): prints recall@1 and
//! recall@5 of each available discovery ranker on a labelled set.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::search::{EmbedConfig, run_eval};

/// The embedding ranker is evaluated too when `TOOLSRV_EMBED_URL` and
/// `TOOLSRV_EMBED_MODEL` are set (see `TOOLSRV_EMBED_KIND`,
/// `TOOLSRV_EMBED_TIMEOUT`, `TOOLSRV_EMBED_CACHE`).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory of labelled tool `.meta` files.
    #[arg(long, default_value = "eval/tools")]
    pub tools: PathBuf,
    /// JSON array of `{"query": …, "expect": [tool names]}`.
    #[arg(long, default_value = "eval/queries.json")]
    pub queries: PathBuf,
    /// Evaluate the lexical ranker only, even if an endpoint is configured.
    #[arg(long)]
    pub no_embed: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let embed = if args.no_embed {
        None
    } else {
        EmbedConfig::from_env().context("reading the TOOLSRV_EMBED_* settings")?
    };
    let report = run_eval(&args.tools, &args.queries, embed)?;
    print!("{report}");
    Ok(ExitCode::SUCCESS)
}
