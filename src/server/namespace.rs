//! The toolsrv namespace: what each file of the table does on read and write,
//! with per-fid state for the write-then-read files.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use serde::Serialize;
use tokio::sync::Mutex;

use super::Server;
use super::files::File;
use crate::meta::Catalog;
use crate::ninep::fs::{FileTree, FsError, OEXEC, ORDWR, OREAD, OWRITE, Qid, Stat};

/// The largest request a fid may accumulate by writing.
const MAX_WRITTEN: usize = 16 << 20;

/// What one fid points at and what it has written and read.
pub struct Node {
    file: File,
    authed: AtomicBool,
    state: Mutex<FidState>,
    /// Bypass requests this fid read from `bypass/pending`; re-offered when it goes.
    claims: crate::bypass::Claims,
}

#[derive(Default)]
struct FidState {
    written: Vec<u8>,
    /// The content this fid reads, computed once per request.
    reply: Option<Arc<[u8]>>,
}

impl Node {
    fn new(file: File) -> Self {
        Node {
            file,
            authed: AtomicBool::new(false),
            state: Mutex::default(),
            claims: crate::bypass::Claims::default(),
        }
    }
}

fn err(e: impl std::fmt::Display) -> FsError {
    FsError(e.to_string())
}

fn json<T: Serialize + ?Sized>(v: &T) -> Result<Arc<[u8]>, FsError> {
    let mut out = serde_json::to_vec(v).map_err(err)?;
    out.push(b'\n');
    Ok(out.into())
}

fn slice(data: &[u8], offset: u64, count: u32) -> Vec<u8> {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = start.saturating_add(count as usize).min(data.len());
    data[start..end].to_vec()
}

/// The text a fid wrote, trimmed: an agent ID for `tools`, `tools_rev`, `proc/list`.
fn written_word(written: &[u8]) -> Result<String, FsError> {
    let s = std::str::from_utf8(written).map_err(|_| FsError::new("request is not UTF-8"))?;
    Ok(s.trim().to_string())
}

/// A catalog (held weakly, so its address cannot be reused) and its `all` bytes.
type SerializedCatalog = (Weak<Catalog>, Arc<[u8]>);

#[derive(Serialize)]
struct ToolSummary<'a> {
    name: &'a str,
    description: &'a str,
    tier: crate::meta::Tier,
    #[serde(rename = "readOnly")]
    read_only: bool,
}

impl Server {
    /// Every file exists except those of a process that is gone.
    fn file_exists(&self, file: File) -> Result<(), FsError> {
        match file.pid() {
            Some(p) if self.procs.get(p).is_none() => Err(gone(p)),
            _ => Ok(()),
        }
    }

    fn stat_of(&self, file: File) -> Stat {
        Stat {
            qid: file.qid(),
            mode: file.perm(),
            atime: self.started_unix,
            mtime: self.started_unix,
            name: file.name(),
            uid: self.user.clone(),
            gid: self.user.clone(),
            muid: self.user.clone(),
            ..Stat::default()
        }
    }

    /// Compute what a fid reads from `file`, given what it wrote.
    async fn content(&self, file: File, written: &[u8]) -> Result<Arc<[u8]>, FsError> {
        match file {
            File::Auth => {
                let token = self.auth.verify_secret(written).map_err(err)?;
                Ok(Arc::from(token.as_bytes()))
            }
            File::Tools => {
                let agent = written_word(written)?;
                let tools = self.registry.loaded(&agent);
                let infos: Vec<&crate::meta::Tool> = tools.iter().map(|t| &**t).collect();
                json(&infos)
            }
            File::ToolsRev => {
                let agent = written_word(written)?;
                Ok(format!("{}\n", self.registry.revision(&agent))
                    .into_bytes()
                    .into())
            }
            File::All => {
                let catalog = self.discoverer.discover();
                // Discovery returns the same catalog while nothing changed:
                // serialise each catalog once.
                static LAST: std::sync::Mutex<Option<SerializedCatalog>> =
                    std::sync::Mutex::new(None);
                let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((c, bytes)) = &*last
                    && std::ptr::eq(c.as_ptr(), Arc::as_ptr(&catalog))
                {
                    return Ok(bytes.clone());
                }
                let all: Vec<ToolSummary> = catalog
                    .tools
                    .values()
                    .map(|t| ToolSummary {
                        name: &t.name,
                        description: &t.description,
                        tier: t.tier,
                        read_only: t.read_only,
                    })
                    .collect();
                let bytes = json(&all)?;
                *last = Some((Arc::downgrade(&catalog), bytes.clone()));
                Ok(bytes)
            }
            File::Info => json(&serde_json::json!({
                "platform": crate::meta::go_os(),
                "arch": crate::meta::go_arch(),
                "version": env!("CARGO_PKG_VERSION"),
            })),
            File::ProcList => {
                let agent = written_word(written)?;
                let agent = (!agent.is_empty()).then_some(agent.as_str());
                let procs = self.procs.list(agent);
                let stats: Vec<_> = procs.iter().map(|p| p.stat()).collect();
                json(&stats)
            }
            File::Search => self.search(written).await,
            File::ProcNew => self.call_sync(written).await,
            File::ProcNewBg => self.call_background(written),
            File::Stat(p) => {
                let proc = self.procs.get(p).ok_or_else(|| gone(p))?;
                json(&proc.stat())
            }
            File::Wait(p) => {
                let proc = self.procs.get(p).ok_or_else(|| gone(p))?;
                let fin = proc.wait().await;
                Ok(format!("{}\n", fin.code()).into_bytes().into())
            }
            _ => Err(FsError::new(format!("{} is not readable", file.name()))),
        }
    }

    /// A write to a command file, carried out at once.
    fn command(&self, file: File, data: &[u8]) -> Result<(), FsError> {
        let text = std::str::from_utf8(data).map_err(|_| FsError::new("command is not UTF-8"))?;
        match file {
            File::Ctl => {
                for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                    self.ctl(line)?;
                }
                Ok(())
            }
            File::PidCtl(p) => {
                let proc = self.procs.get(p).ok_or_else(|| gone(p))?;
                let words: Vec<&str> = text.split_whitespace().collect();
                match words.as_slice() {
                    ["signal", n] => {
                        let sig = n.parse::<i32>().map_err(|_| {
                            FsError::new(format!("signal: {n:?} is not a number; e.g. `signal 15`"))
                        })?;
                        proc.signal(sig).map_err(err)
                    }
                    ["kill"] => proc.signal(9).map_err(err),
                    ["dismiss"] => self.procs.dismiss(p).map_err(err),
                    _ => Err(FsError::new(format!(
                        "unknown process command {:?}: use `signal N`, `kill` or `dismiss`",
                        text.trim()
                    ))),
                }
            }
            File::Resolve => self.bypass_resolve(text),
            _ => Err(FsError::new(format!("{} is not writable", file.name()))),
        }
    }

    fn ctl(&self, line: &str) -> Result<(), FsError> {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["load", agent, tool] => {
                let catalog = self.discoverer.discover();
                let t = catalog.tools.get(*tool).cloned().ok_or_else(|| {
                    FsError::new(format!(
                        "load: no tool {tool:?} on this host (read `all` for the tools there are)"
                    ))
                })?;
                let rev = self.registry.load(agent, t).map_err(err)?;
                tracing::info!(agent, tool, rev, "tool loaded");
                Ok(())
            }
            ["unload", agent, tool] => {
                let rev = self.registry.unload(agent, tool).map_err(err)?;
                tracing::info!(agent, tool, rev, "tool unloaded");
                Ok(())
            }
            _ => Err(FsError::new(format!(
                "unknown ctl command {line:?}: use `load <agent> <tool>` or `unload <agent> <tool>`"
            ))),
        }
    }
}

fn gone(pid: u64) -> FsError {
    FsError::new(format!(
        "file does not exist: process {pid} is gone (dismissed or garbage-collected)"
    ))
}

impl FileTree for Server {
    type Node = Node;

    fn auth(&self, _uname: &str, _aname: &str) -> Result<Node, FsError> {
        if !self.auth.required() {
            return Err(err(super::auth::AuthError::NotRequired));
        }
        Ok(Node::new(File::Auth))
    }

    fn attach(&self, auth: Option<&Node>, uname: &str, _aname: &str) -> Result<Node, FsError> {
        if self.auth.required() {
            let a = auth.ok_or_else(|| err(super::auth::AuthError::Required))?;
            if a.file != File::Auth {
                return Err(FsError::new("afid is not an authentication file"));
            }
            if !a.authed.load(Ordering::Acquire) {
                // The client may attach without reading the token back: verify now.
                let written = a
                    .state
                    .try_lock()
                    .map(|s| s.written.clone())
                    .map_err(|_| FsError::new("authentication in progress on that afid"))?;
                self.auth.verify_secret(&written).map_err(err)?;
                a.authed.store(true, Ordering::Release);
            }
        }
        tracing::debug!(uname, "attach");
        Ok(Node::new(File::Root))
    }

    fn walk(&self, from: &Node, name: &str) -> Result<Node, FsError> {
        if from.file == File::Auth {
            return Err(FsError::new("cannot walk from an authentication file"));
        }
        if name == ".." {
            return Ok(Node::new(from.file.parent()));
        }
        let next = match from.file.child(name) {
            Some(f) => Some(f),
            None if from.file == File::ProcDir => name
                .parse::<u64>()
                .ok()
                .filter(|p| self.procs.get(*p).is_some())
                .map(File::Pid),
            None => None,
        };
        match next {
            Some(f) if self.file_exists(f).is_ok() => Ok(Node::new(f)),
            _ => Err(FsError::new(format!("file does not exist: {name}"))),
        }
    }

    fn clone_node(&self, node: &Node) -> Node {
        let n = Node::new(node.file);
        n.authed
            .store(node.authed.load(Ordering::Acquire), Ordering::Release);
        n
    }

    fn qid(&self, node: &Node) -> Qid {
        node.file.qid()
    }

    fn stat(&self, node: &Node) -> Result<Stat, FsError> {
        self.file_exists(node.file)?;
        Ok(self.stat_of(node.file))
    }

    fn open(&self, node: &Node, mode: u8) -> Result<(), FsError> {
        let perm = node.file.perm();
        let (read, write) = match mode & 3 {
            OREAD => (true, false),
            OWRITE => (false, true),
            ORDWR => (true, true),
            OEXEC => {
                return Err(FsError::new(
                    "permission denied: nothing here is executable",
                ));
            }
            _ => (false, false),
        };
        if (read && perm & 0o444 == 0) || (write && perm & 0o222 == 0) {
            let want = if write { "written" } else { "read" };
            return Err(FsError::new(format!(
                "permission denied: {} cannot be {want}",
                node.file.name()
            )));
        }
        if node.file.is_dir() && write {
            return Err(FsError::new("permission denied: cannot write a directory"));
        }
        self.file_exists(node.file)
    }

    fn readdir(&self, node: &Node) -> Result<Vec<Stat>, FsError> {
        let mut files = node.file.children();
        if node.file == File::ProcDir {
            files.extend(self.procs.ids().into_iter().map(File::Pid));
        }
        Ok(files.into_iter().map(|f| self.stat_of(f)).collect())
    }

    async fn read(&self, node: &Node, offset: u64, count: u32) -> Result<Vec<u8>, FsError> {
        if let File::Out(p) = node.file {
            let proc = self.procs.get(p).ok_or_else(|| gone(p))?;
            let offset = usize::try_from(offset).unwrap_or(usize::MAX);
            return Ok(proc.output.snapshot(offset, count as usize));
        }
        let mut state = node.state.lock().await;
        // A read from the start asks again, except where the answer is a
        // request's one result (or the auth token) that must not run twice.
        let rerun = offset == 0
            && !matches!(
                node.file,
                File::ProcNew | File::ProcNewBg | File::Wait(_) | File::Auth
            );
        if state.reply.is_none() || rerun {
            let written = state.written.clone();
            let reply = match node.file {
                File::Pending => self.bypass_pending(&node.claims).await?,
                f => self.content(f, &written).await?,
            };
            if node.file == File::Auth {
                node.authed.store(true, Ordering::Release);
            }
            state.reply = Some(reply);
        }
        Ok(state
            .reply
            .as_deref()
            .map_or_else(Vec::new, |r| slice(r, offset, count)))
    }

    async fn write(&self, node: &Node, offset: u64, data: Vec<u8>) -> Result<u32, FsError> {
        let n = u32::try_from(data.len()).map_err(err)?;
        match node.file {
            File::Auth
            | File::Tools
            | File::ToolsRev
            | File::Search
            | File::ProcList
            | File::ProcNew
            | File::ProcNewBg => {
                let mut state = node.state.lock().await;
                if offset == 0 {
                    state.written.clear();
                }
                if state.written.len() + data.len() > MAX_WRITTEN {
                    return Err(FsError::new(format!(
                        "request too large: at most {MAX_WRITTEN} bytes"
                    )));
                }
                state.written.extend_from_slice(&data);
                state.reply = None;
                if node.file == File::Auth {
                    node.authed.store(false, Ordering::Release);
                }
                Ok(n)
            }
            f => {
                self.command(f, &data)?;
                Ok(n)
            }
        }
    }

    fn clunk(&self, _node: &Node) {}
}
