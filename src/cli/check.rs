//! `toolsrv check`: lint `.meta` files (syntax, field types, schemas,
//! variants, commands) and print `path:line:col: severity: message`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::meta::{Host, Problem, Severity, check_file, tools_path_from_env};

/// Check .meta files and report problems like a compiler does.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Reports, as `path:line:col: severity: message`:
  errors   bad JSON, wrongly typed fields, `args` that is not a valid JSON
           Schema, `required` names missing from `properties`, unknown
           `tier`, variants that can never match (unknown match key, unknown
           os/arch name, a variant after one without `match`), commands that
           cannot be resolved on this host;
  warnings missing `prompt` or `description`, ignored fields;
  notes    tools hidden on this host, tools shadowed by an earlier directory.

Exit status: 0 when there are no errors (warnings are fine), 1 otherwise.

Examples:
  toolsrv check                     # the whole tools path
  toolsrv check ./tools my_tool.meta")]
pub struct Args {
    /// `.meta` files or tools directories (default: the tools path).
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let explicit = !args.paths.is_empty();
    let paths = if explicit {
        args.paths
    } else {
        tools_path_from_env()
    };
    let host = Host::current();
    let mut problems: Vec<Problem> = Vec::new();
    let mut files = 0usize;
    let mut claimed: HashMap<String, PathBuf> = HashMap::new();
    for path in &paths {
        let metas = match std::fs::metadata(path) {
            Ok(md) if md.is_dir() => list_metas(path)?,
            Ok(_) => vec![path.clone()],
            Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("toolsrv: tools directory {} does not exist", path.display());
                continue;
            }
            Err(e) => {
                problems.push(Problem::error(path, format!("cannot read: {e}")));
                continue;
            }
        };
        for meta in metas {
            files += 1;
            let name = meta
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut ps = Vec::new();
            if let Some(first) = claimed.get(&name) {
                ps.push(Problem::new(
                    &meta,
                    Severity::Note,
                    format!("tool `{name}` is shadowed by {}", first.display()),
                ));
            } else {
                claimed.insert(name.clone(), meta.clone());
            }
            let report = check_file(&meta, &host);
            ps.extend(report.problems);
            if report.hidden {
                ps.push(Problem::new(
                    &meta,
                    Severity::Note,
                    format!(
                        "no variant matches this host (os {}, arch {}): tool `{name}` is hidden here",
                        host.os, host.arch
                    ),
                ));
            }
            ps.sort_by_key(|p| (p.line.unwrap_or(0), p.column.unwrap_or(0)));
            problems.extend(ps);
        }
    }
    for p in &problems {
        println!("{p}");
    }
    let count = |s: Severity| problems.iter().filter(|p| p.severity == s).count();
    let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
    eprintln!(
        "checked {files} file{}: {errors} error{}, {warnings} warning{}",
        if files == 1 { "" } else { "s" },
        if errors == 1 { "" } else { "s" },
        if warnings == 1 { "" } else { "s" },
    );
    Ok(if errors > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The `.meta` files directly in `dir`, sorted (hidden files skipped).
fn list_metas(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    let mut out: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".meta"))
                .is_some_and(|n| !n.is_empty() && !n.starts_with('.'))
                && p.is_file()
        })
        .collect();
    out.sort();
    Ok(out)
}
