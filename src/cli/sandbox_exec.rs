//! `toolsrv sandbox-exec`: run one command under a sandbox profile, outside
//! the server (the same preparation and enforcement the server uses).

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::sandbox::{ExpandContext, Profiles};

/// Exit status when validation refuses the command (like "cannot execute").
const REFUSED: u8 = 126;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Runs CMD confined by a sandbox profile, as a tool call would be.\n\n\
        The profile is <profiles-dir>/<NAME>.yaml (default directory: \
        $XDG_CONFIG_HOME/ollie/sandbox, or ~/.config/ollie/sandbox; a commented \
        default.yaml is written there on first use). The command is first checked \
        against the profile's validation rules (exit status 126 when refused). Then, \
        in the child between fork and exec, no_new_privs is set, the Landlock \
        ruleset (filesystem paths, TCP ports, scoping) is applied and, when the \
        network is disabled, a seccomp filter refusing UDP/raw sockets. The \
        environment is reduced to PATH, HOME, PWD, OLLIE_* and the profile's `env` \
        list. Exits with CMD's status (128+N if killed by signal N).\n\n\
        Example: toolsrv sandbox-exec --profile default --cwd . -- ls -la"
)]
pub struct Args {
    /// Sandbox profile name.
    #[arg(long, default_value = "default", value_name = "NAME")]
    profile: String,
    /// Working directory of CMD; `{CWD}` in the profile (default: current directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Directory holding the `<NAME>.yaml` profiles.
    #[arg(long, value_name = "DIR")]
    profiles_dir: Option<PathBuf>,
    /// Pretend the kernel offers at most this Landlock ABI (for tests).
    #[arg(long, hide = true, value_name = "N")]
    simulate_max_abi: Option<u32>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dir = match args.profiles_dir {
        Some(d) => d,
        None => Profiles::default_dir()
            .context("cannot find the profiles directory: set XDG_CONFIG_HOME or HOME")?,
    };
    let profiles = Profiles::new(dir);
    let profile = profiles.load(&args.profile)?;

    let cwd = match args.cwd {
        Some(d) => d,
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let cwd = std::fs::canonicalize(&cwd)
        .with_context(|| format!("working directory {}", cwd.display()))?;

    let Some((program, rest)) = args.command.split_first() else {
        bail!("no command given after `--`");
    };
    let text: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Err(rejection) = profile
        .validator()
        .check(&text.join(" "), &serde_json::Value::Null)
    {
        eprintln!("toolsrv: {rejection}");
        return Ok(ExitCode::from(REFUSED));
    }

    let program_str = program.to_string_lossy();
    let path_var = std::env::var_os("PATH");
    let exe = if program_str.contains('/') {
        cwd.join(program)
    } else {
        crate::sandbox::find_in_path(&program_str, path_var.as_deref())
            .with_context(|| format!("{program_str}: command not found in PATH"))?
    };

    let mut ctx = ExpandContext::from_process(&cwd);
    if let Some(abi) = args.simulate_max_abi {
        ctx = ctx.with_max_abi(abi);
    }
    let prepared = profile
        .prepare(&ctx, Some(&exe))
        .with_context(|| format!("preparing sandbox profile {:?}", args.profile))?;
    for what in prepared.not_enforced() {
        tracing::warn!(profile = %args.profile, "not enforced: {what}");
    }

    let mut env = prepared.filter_env(crate::exec::Env::from(
        std::env::vars_os().collect::<Vec<_>>(),
    ));
    env.set("PWD", cwd.as_os_str());

    let mut cmd = std::process::Command::new(&exe);
    cmd.arg0(program)
        .args(rest)
        .current_dir(&cwd)
        .env_clear()
        .envs(env.iter());
    let pre_exec = prepared.into_pre_exec();
    // SAFETY: the closure runs in the forked child before exec and only makes
    // raw syscalls (prctl, landlock_restrict_self, seccomp) on data it owns;
    // it neither allocates nor takes locks.
    unsafe {
        cmd.pre_exec(pre_exec);
    }
    let status = cmd
        .status()
        .with_context(|| format!("running {} in the sandbox", exe.display()))?;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    };
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
