//! `toolsrv list`: every discovered tool with its resolved command, tier and
//! problems, as a table or as JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::meta::{Catalog, Command, Discoverer, Problem, Tool, tools_path_from_env};

/// List the tools discovered in the tools directories.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The tools path is $OLLIE_TOOLS_PATH (colon-separated, first directory wins),
else $XDG_CONFIG_HOME/ollie/tools, else ~/.config/ollie/tools.

Tools whose variants all fail to match this host are shown as hidden.
Use `toolsrv check` for a full lint of the .meta files.

Examples:
  toolsrv list
  toolsrv list --json --tools ./tools --tools ~/.config/ollie/tools")]
pub struct Args {
    /// Print JSON (tools, hidden, problems) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A tools directory to search instead of the tools path; repeat for more.
    #[arg(long = "tools", value_name = "DIR")]
    pub tools: Vec<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dirs = if args.tools.is_empty() {
        tools_path_from_env()
    } else {
        args.tools
    };
    let disc = Discoverer::new(dirs);
    let cat = disc.discover();
    if args.json {
        let v = to_json(disc.dirs(), &cat);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_table(disc.dirs(), &cat);
    }
    Ok(ExitCode::SUCCESS)
}

fn command_json(c: Option<&Command>) -> Value {
    match c {
        Some(Command::Exec(p)) => json!({"exec": p}),
        Some(Command::Shell(s)) => json!({"shell": s}),
        None => Value::Null,
    }
}

fn problems_of<'a>(cat: &'a Catalog, t: &'a Tool) -> impl Iterator<Item = &'a Problem> {
    cat.problems.iter().filter(move |p| p.path == t.meta_path)
}

fn to_json(dirs: &[PathBuf], cat: &Catalog) -> Value {
    let tools: Vec<Value> = cat
        .tools
        .values()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "tier": t.tier,
                "readOnly": t.read_only,
                "sudo": t.sudo,
                "bypass": t.bypass,
                "command": command_json(t.command.as_ref()),
                "variant": t.variant,
                "meta": t.meta_path,
                "dir": t.dir,
                "problems": problems_of(cat, t).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "dirs": dirs,
        "tools": tools,
        "hidden": cat.hidden,
        "problems": cat.problems,
    })
}

fn command_text(c: Option<&Command>) -> String {
    match c {
        Some(Command::Exec(p)) => p.display().to_string(),
        Some(Command::Shell(s)) => {
            let one_line = s.replace('\n', " ");
            let cut: String = one_line.chars().take(60).collect();
            if cut.len() < one_line.len() {
                format!("sh -c '{cut}…'")
            } else {
                format!("sh -c '{cut}'")
            }
        }
        None => "(nothing to run)".to_string(),
    }
}

fn print_table(dirs: &[PathBuf], cat: &Catalog) {
    let mut rows: Vec<[String; 3]> = cat
        .tools
        .values()
        .map(|t| {
            let mut tier = t.tier.to_string();
            if t.sudo {
                tier.push_str(" sudo");
            } else if t.bypass {
                tier.push_str(" bypass");
            }
            [t.name.clone(), tier, command_text(t.command.as_ref())]
        })
        .collect();
    rows.extend(cat.hidden.iter().map(|n| {
        [
            n.clone(),
            "-".into(),
            "(hidden: no variant matches this host)".into(),
        ]
    }));
    rows.sort();
    let paths: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    println!("tools path: {}", paths.join(":"));
    if rows.is_empty() {
        println!("no tools found");
    } else {
        let w0 = rows
            .iter()
            .map(|r| r[0].chars().count())
            .max()
            .unwrap_or(4)
            .max(4);
        let w1 = rows
            .iter()
            .map(|r| r[1].chars().count())
            .max()
            .unwrap_or(4)
            .max(4);
        println!("{:w0$}  {:w1$}  COMMAND", "NAME", "TIER");
        for [name, tier, cmd] in &rows {
            println!("{name:w0$}  {tier:w1$}  {cmd}");
        }
    }
    if !cat.problems.is_empty() {
        println!();
        println!("problems:");
        for p in &cat.problems {
            println!("  {p}");
        }
    }
}
