//! `toolsrv 9p`: read, write and list the raw namespace of a running server.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::client::Session;
use crate::ninep::fs::DMDIR;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    op: Op,
    /// The server's socket.
    #[arg(long, global = true, env = "TOOLSRV_SOCKET", default_value_os_t = crate::client::default_socket())]
    socket: PathBuf,
}

#[derive(Debug, clap::Subcommand)]
enum Op {
    /// List a directory (or show one file) like `ls -l`.
    Ls { path: Option<String> },
    /// Print a file's contents.
    Read { path: String },
    /// Write stdin (or DATA) to a file.
    Write { path: String, data: Option<String> },
    /// Write stdin (or DATA) to a file, then print what the same fid reads back.
    Rdwr { path: String, data: Option<String> },
    /// Show a file's metadata as JSON.
    Stat { path: String },
}

fn input(data: Option<String>) -> anyhow::Result<Vec<u8>> {
    match data {
        Some(d) => Ok(d.into_bytes()),
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("reading stdin")?;
            Ok(buf)
        }
    }
}

fn mode_string(mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(if mode & DMDIR != 0 { 'd' } else { '-' });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut s = Session::connect(&args.socket)?;
    let mut out = std::io::stdout().lock();
    match args.op {
        Op::Ls { path } => {
            let path = path.unwrap_or_default();
            let st = s.stat(&path)?;
            let entries = if st.mode & DMDIR != 0 {
                s.ls(&path)?
            } else {
                vec![st]
            };
            for e in entries {
                writeln!(
                    out,
                    "{} {} {:>8} {}",
                    mode_string(e.mode),
                    e.uid,
                    e.length,
                    e.name
                )?;
            }
        }
        Op::Read { path } => out.write_all(&s.read(&path)?)?,
        Op::Write { path, data } => s.write(&path, &input(data)?)?,
        Op::Rdwr { path, data } => {
            let answer = s.rdwr(&path, &input(data)?)?;
            out.write_all(&answer)?;
        }
        Op::Stat { path } => {
            let st = s.stat(&path)?;
            let v = serde_json::json!({
                "name": st.name,
                "mode": format!("{:o}", st.mode & 0o777),
                "dir": st.mode & DMDIR != 0,
                "qid": {"type": st.qid.ty, "version": st.qid.version, "path": st.qid.path},
                "length": st.length,
                "uid": st.uid, "gid": st.gid, "muid": st.muid,
                "atime": st.atime, "mtime": st.mtime,
            });
            writeln!(out, "{v}")?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
