//! The 9P2000 connection loop: version, fids, tags, flush and cancellation on one stream.
//! Names and data come from a `FileTree`; one task reads, dispatches, runs and answers.
//!
//! Everything of a connection happens in the task that owns its stream: frames
//! are parsed from one buffered read, answered into one output buffer that is
//! written once per batch, and reads or writes that have to wait (a tool call,
//! a `wait`) run as futures inside the same task. Nothing hops between tasks
//! or threads on the way from a request to its reply.

mod dir;
mod inbuf;

use super::fs::{FileTree, FsError, OEXEC, ORDWR, OREAD, OWRITE, QTDIR, Stat};
use super::wire::{
    Fcall, IOHDRSZ, MAX_MSIZE, MAXWELEM, MIN_MSIZE, Msg, NOFID, VERSION, WireError, encode,
};
use dir::{DirState, read_dir};
use futures_util::future::{AbortHandle, Abortable, Aborted};
use futures_util::stream::{FuturesUnordered, StreamExt};
use inbuf::InBuf;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::{debug, warn};

/// `size[4] Rread tag[2] count[4]`: what an Rread adds around its data.
const RREAD_HDR: u32 = 11;

/// A read or write that had to wait, and what it gave.
struct Done {
    tag: u16,
    id: u64,
    body: Result<Fcall, Aborted>,
}

type Running = Pin<Box<dyn Future<Output = Done> + Send>>;

/// A request still running: its fid (a clunk cancels it) and how to stop it.
struct Inflight {
    id: u64,
    fid: u32,
    abort: AbortHandle,
}

struct FidState<N> {
    node: Arc<N>,
    open: Option<u8>,
    is_auth: bool,
    is_dir: bool,
    dir: DirState,
}

/// Serves one 9P2000 connection until the peer goes away or breaks the protocol.
/// On the way out every in-flight request is cancelled and every fid clunked.
pub async fn serve_conn<T, S>(tree: Arc<T>, stream: S, max_msize: u32)
where
    T: FileTree,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let max_msize = max_msize.clamp(MIN_MSIZE, MAX_MSIZE);
    let mut conn = Conn {
        tree,
        fids: HashMap::new(),
        inflight: HashMap::new(),
        running: FuturesUnordered::new(),
        msize: max_msize,
        max_msize,
        negotiated: false,
        out: Vec::new(),
        next_id: 0,
    };
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut inbuf = InBuf::default();
    // Bytes at the front of `conn.out` already written.
    let mut sent = 0;
    'conn: loop {
        // Answer everything that arrived, then what finished meanwhile.
        loop {
            match inbuf.next_frame(conn.msize) {
                Ok(Some(msg)) => conn.handle(msg),
                Ok(None) => break,
                Err(e) => {
                    warn!(error = %e, "9p protocol error; closing connection");
                    break 'conn;
                }
            }
        }
        conn.settle().await;
        // Writing is one of the things waited for, not a wait of its own: a
        // peer that stops reading does not stop its running calls (their
        // timeouts, their output); only new requests wait for the backlog.
        let unsent = conn.out.len() - sent;
        tokio::select! {
            biased;
            Some(done) = conn.running.next(), if !conn.running.is_empty() => conn.finish(done),
            r = wr.write(&conn.out[sent..]), if unsent > 0 => match r {
                Ok(0) => {
                    debug!("9p peer stopped taking replies");
                    break;
                }
                Ok(n) => {
                    sent += n;
                    if sent == conn.out.len() {
                        conn.out.clear();
                        conn.out.shrink_to(OUT_KEEP);
                        sent = 0;
                    }
                }
                Err(e) => {
                    debug!(error = %e, "9p write failed");
                    break;
                }
            },
            r = inbuf.fill(&mut rd), if unsent < OUT_BACKLOG => match r {
                Ok(true) => {}
                Ok(false) => {
                    if inbuf.is_empty() {
                        debug!("9p connection closed by peer");
                    } else {
                        warn!(error = %WireError::UnexpectedEof, "9p protocol error; closing connection");
                    }
                    break;
                }
                Err(e) => {
                    warn!(error = %e, "9p read failed; closing connection");
                    break;
                }
            },
        }
    }
    conn.reset();
    // Replies already made still go out to a peer that only closed its
    // sending side, but nobody waits long for one that does not read.
    if sent < conn.out.len() {
        let _ = tokio::time::timeout(FINAL_FLUSH, wr.write_all(&conn.out[sent..])).await;
    }
    drop(conn);
    let _ = wr.shutdown().await;
}

/// Output buffer capacity kept between batches (a large reply is not kept).
const OUT_KEEP: usize = 64 << 10;
/// Unsent replies past which no new request is read (until the peer reads).
const OUT_BACKLOG: usize = 4 << 20;
/// How long replies made before the connection ended may take to go out.
const FINAL_FLUSH: std::time::Duration = std::time::Duration::from_secs(1);

struct Conn<T: FileTree> {
    tree: Arc<T>,
    fids: HashMap<u32, FidState<T::Node>>,
    inflight: HashMap<u16, Inflight>,
    running: FuturesUnordered<Running>,
    msize: u32,
    max_msize: u32,
    negotiated: bool,
    /// Encoded replies not yet written.
    out: Vec<u8>,
    next_id: u64,
}

type Reply = Result<Option<Fcall>, FsError>;

fn can_read(mode: u8) -> bool {
    matches!(mode & 3, OREAD | ORDWR | OEXEC)
}

fn can_write(mode: u8) -> bool {
    matches!(mode & 3, OWRITE | ORDWR)
}

/// A `Twstat` whose every field says "don't touch" (a request to sync, which is a no-op here).
fn is_noop_wstat(s: &Stat) -> bool {
    s.ty == u16::MAX
        && s.dev == u32::MAX
        && s.qid.ty == u8::MAX
        && s.qid.version == u32::MAX
        && s.qid.path == u64::MAX
        && s.mode == u32::MAX
        && s.atime == u32::MAX
        && s.mtime == u32::MAX
        && s.length == u64::MAX
        && s.name.is_empty()
        && s.uid.is_empty()
        && s.gid.is_empty()
        && s.muid.is_empty()
}

fn unknown_fid(fid: u32) -> FsError {
    FsError::new(format!("unknown fid {fid}: walk or attach to it first"))
}

impl<T: FileTree> Conn<T> {
    /// Queues a reply; it is written with the rest of the batch.
    fn send(&mut self, tag: u16, body: Fcall) {
        let body = match body {
            Fcall::Rerror { ename } => Fcall::Rerror {
                ename: self.fit_error(ename),
            },
            other => other,
        };
        let frame = match encode(&Msg { tag, body }) {
            Ok(frame) => frame,
            Err(e) => {
                warn!(error = %e, "cannot encode 9p reply");
                let body = Fcall::Rerror {
                    ename: self.fit_error(format!("reply cannot be encoded: {e}")),
                };
                match encode(&Msg { tag, body }) {
                    Ok(frame) => frame,
                    Err(_) => return,
                }
            }
        };
        self.out.extend_from_slice(&frame);
    }

    /// Cuts an error text so that its Rerror fits in msize and a 9P string.
    fn fit_error(&self, mut ename: String) -> String {
        let max = (self.msize as usize)
            .saturating_sub(9)
            .min(usize::from(u16::MAX));
        if ename.len() > max {
            let mut cut = max;
            while !ename.is_char_boundary(cut) {
                cut -= 1;
            }
            ename.truncate(cut);
        }
        ename
    }

    /// A request that had to wait is done: answer it, unless it was flushed
    /// or its fid clunked meanwhile (then it was answered, or must not be).
    fn finish(&mut self, done: Done) {
        match (self.inflight.get(&done.tag), done.body) {
            (Some(inf), Ok(body)) if inf.id == done.id => {
                self.inflight.remove(&done.tag);
                self.send(done.tag, body);
            }
            _ => debug!(tag = done.tag, "dropping reply of a flushed request"),
        }
    }

    /// Polls every request that is ready to make progress (new ones get
    /// their first poll with the task's waker) and answers those that end.
    async fn settle(&mut self) {
        std::future::poll_fn(|cx| {
            self.drain(cx);
            Poll::Ready(())
        })
        .await
    }

    fn drain(&mut self, cx: &mut std::task::Context<'_>) {
        while let Poll::Ready(Some(done)) = self.running.poll_next_unpin(cx) {
            self.finish(done);
        }
    }

    /// Drops the futures of requests just aborted, now, so that their
    /// cancellation has happened before the reply that caused it is sent.
    /// (The next `settle` polls everything again with the real waker.)
    fn drop_aborted(&mut self) {
        self.drain(&mut std::task::Context::from_waker(std::task::Waker::noop()));
    }

    fn handle(&mut self, msg: Msg) {
        let Msg { tag, body } = msg;
        let name = body.name();
        let reply = if let Fcall::Tversion { msize, version } = body {
            self.version(msize, &version)
        } else if !self.negotiated {
            Err(FsError::new(
                "no version negotiated: send Tversion \"9P2000\" first",
            ))
        } else if self.inflight.contains_key(&tag) {
            Err(FsError::new(format!(
                "tag {tag} is already in use by a pending request; use a fresh tag"
            )))
        } else {
            self.dispatch(tag, body)
        };
        match reply {
            Ok(Some(body)) => self.send(tag, body),
            Ok(None) => {}
            Err(e) => {
                debug!(tag, request = name, error = %e, "9p request refused");
                self.send(tag, Fcall::Rerror { ename: e.0 });
            }
        }
    }

    fn dispatch(&mut self, tag: u16, body: Fcall) -> Reply {
        match body {
            Fcall::Tauth { afid, uname, aname } => self.auth(afid, &uname, &aname),
            Fcall::Tattach {
                fid,
                afid,
                uname,
                aname,
            } => self.attach(fid, afid, &uname, &aname),
            Fcall::Tflush { oldtag } => {
                if let Some(inf) = self.inflight.remove(&oldtag) {
                    inf.abort.abort();
                    self.drop_aborted();
                }
                Ok(Some(Fcall::Rflush))
            }
            Fcall::Twalk {
                fid,
                newfid,
                wnames,
            } => self.walk(fid, newfid, &wnames),
            Fcall::Topen { fid, mode } => self.open(fid, mode),
            Fcall::Tcreate { fid, .. } => {
                self.fid(fid)?;
                Err(FsError::new(
                    "cannot create files in the toolsrv namespace: its files are fixed by the server",
                ))
            }
            Fcall::Tread { fid, offset, count } => self.read(tag, fid, offset, count),
            Fcall::Twrite { fid, offset, data } => self.write(tag, fid, offset, data),
            Fcall::Tclunk { fid } => {
                self.clunk(fid)?;
                Ok(Some(Fcall::Rclunk))
            }
            Fcall::Tremove { fid } => {
                self.clunk(fid)?;
                Err(FsError::new(
                    "cannot remove files in the toolsrv namespace (the fid was clunked)",
                ))
            }
            Fcall::Tstat { fid } => {
                let stat = self.tree.stat(&self.fid(fid)?.node)?;
                Ok(Some(Fcall::Rstat { stat }))
            }
            Fcall::Twstat { fid, stat } => {
                self.fid(fid)?;
                if is_noop_wstat(&stat) {
                    Ok(Some(Fcall::Rwstat))
                } else {
                    Err(FsError::new(
                        "cannot change file attributes in the toolsrv namespace (wstat is not supported)",
                    ))
                }
            }
            other => Err(FsError::new(format!(
                "unexpected {} from a client: only T-messages are served",
                other.name()
            ))),
        }
    }

    fn fid(&self, fid: u32) -> Result<&FidState<T::Node>, FsError> {
        self.fids.get(&fid).ok_or_else(|| unknown_fid(fid))
    }

    fn fid_free(&self, fid: u32) -> Result<(), FsError> {
        if fid == NOFID {
            return Err(FsError::new(
                "fid NOFID cannot name a file; use another fid",
            ));
        }
        if self.fids.contains_key(&fid) {
            return Err(FsError::new(format!(
                "fid {fid} is already in use; clunk it or pick another"
            )));
        }
        Ok(())
    }

    fn install(&mut self, fid: u32, node: T::Node, is_auth: bool) -> Option<FidState<T::Node>> {
        let is_dir = self.tree.qid(&node).ty & QTDIR != 0;
        self.fids.insert(
            fid,
            FidState {
                node: Arc::new(node),
                open: None,
                is_auth,
                is_dir,
                dir: DirState::default(),
            },
        )
    }

    fn version(&mut self, msize: u32, version: &str) -> Reply {
        self.reset();
        self.negotiated = false;
        let msize = msize.min(self.max_msize);
        if msize < MIN_MSIZE {
            return Err(FsError::new(format!(
                "msize {msize} is too small: offer at least {MIN_MSIZE}"
            )));
        }
        let version = if version == VERSION || version.starts_with("9P2000.") {
            self.negotiated = true;
            VERSION
        } else {
            "unknown"
        };
        self.msize = msize;
        Ok(Some(Fcall::Rversion {
            msize,
            version: version.to_owned(),
        }))
    }

    /// Cancels every in-flight request (no replies) and clunks every fid.
    fn reset(&mut self) {
        self.inflight.clear();
        // Dropping the futures is what cancels them.
        self.running = FuturesUnordered::new();
        for (_, state) in self.fids.drain() {
            self.tree.clunk(&state.node);
        }
    }

    fn auth(&mut self, afid: u32, uname: &str, aname: &str) -> Reply {
        self.fid_free(afid)?;
        let node = self.tree.auth(uname, aname)?;
        let aqid = self.tree.qid(&node);
        self.install(afid, node, true);
        Ok(Some(Fcall::Rauth { aqid }))
    }

    fn attach(&mut self, fid: u32, afid: u32, uname: &str, aname: &str) -> Reply {
        self.fid_free(fid)?;
        let auth = if afid == NOFID {
            None
        } else {
            let state = self.fid(afid)?;
            if !state.is_auth {
                return Err(FsError::new(format!(
                    "fid {afid} is not an authentication fid; pass the afid from Tauth"
                )));
            }
            Some(Arc::clone(&state.node))
        };
        let node = self.tree.attach(auth.as_deref(), uname, aname)?;
        let qid = self.tree.qid(&node);
        self.install(fid, node, false);
        Ok(Some(Fcall::Rattach { qid }))
    }

    fn walk(&mut self, fid: u32, newfid: u32, wnames: &[String]) -> Reply {
        let from = self.fid(fid)?;
        if from.is_auth {
            return Err(FsError::new("cannot walk an authentication fid"));
        }
        // Walking from an open fid to a new fid is allowed (some clients walk from
        // a root fid they opened); only replacing an open fid in place is refused.
        if newfid == fid && from.open.is_some() {
            return Err(FsError::new(format!(
                "cannot walk open fid {fid} onto itself; walk to a new fid"
            )));
        }
        if newfid != fid {
            self.fid_free(newfid)?;
        }
        if wnames.len() > MAXWELEM {
            return Err(FsError::new(format!(
                "{} names in one walk; at most {MAXWELEM}",
                wnames.len()
            )));
        }
        let start = Arc::clone(&from.node);
        let mut wqids = Vec::with_capacity(wnames.len());
        let node = if wnames.is_empty() {
            self.tree.clone_node(&start)
        } else {
            let mut cur: Option<T::Node> = None;
            for (i, name) in wnames.iter().enumerate() {
                let here = cur.as_ref().unwrap_or(&start);
                match self.tree.walk(here, name) {
                    Ok(next) => {
                        wqids.push(self.tree.qid(&next));
                        cur = Some(next);
                    }
                    Err(e) if i == 0 => return Err(e),
                    Err(_) => return Ok(Some(Fcall::Rwalk { wqids })),
                }
            }
            match cur {
                Some(node) => node,
                None => return Err(FsError::new("empty walk")),
            }
        };
        if let Some(old) = self.install(newfid, node, false) {
            self.tree.clunk(&old.node);
        }
        Ok(Some(Fcall::Rwalk { wqids }))
    }

    fn open(&mut self, fid: u32, mode: u8) -> Reply {
        let iounit = self.msize - IOHDRSZ;
        let state = self.fids.get_mut(&fid).ok_or_else(|| unknown_fid(fid))?;
        // Opening an open fid again is allowed (the `ninep` crate's client
        // reopens the fids it caches); the new mode is checked and replaces
        // the old one.
        self.tree.open(&state.node, mode)?;
        state.open = Some(mode);
        let qid = self.tree.qid(&state.node);
        Ok(Some(Fcall::Ropen { qid, iounit }))
    }

    fn read(&mut self, tag: u16, fid: u32, offset: u64, count: u32) -> Reply {
        let count = count.min(self.msize - RREAD_HDR);
        let state = self.fids.get_mut(&fid).ok_or_else(|| unknown_fid(fid))?;
        if !state.is_auth && !state.open.is_some_and(can_read) {
            return Err(FsError::new(format!(
                "fid {fid} is not open for reading; open it with OREAD or ORDWR"
            )));
        }
        if state.is_dir {
            let data = read_dir(&*self.tree, &state.node, &mut state.dir, offset, count)?;
            return Ok(Some(Fcall::Rread { data }));
        }
        let tree = Arc::clone(&self.tree);
        let node = Arc::clone(&state.node);
        Ok(self.spawn(tag, fid, async move {
            match tree.read(&node, offset, count).await {
                Ok(mut data) => {
                    data.truncate(count as usize);
                    Fcall::Rread { data }
                }
                Err(e) => Fcall::Rerror { ename: e.0 },
            }
        }))
    }

    fn write(&mut self, tag: u16, fid: u32, offset: u64, data: Vec<u8>) -> Reply {
        let state = self.fid(fid)?;
        if !state.is_auth && !state.open.is_some_and(can_write) {
            return Err(FsError::new(format!(
                "fid {fid} is not open for writing; open it with OWRITE or ORDWR"
            )));
        }
        if state.is_dir {
            return Err(FsError::new("cannot write to a directory"));
        }
        let tree = Arc::clone(&self.tree);
        let node = Arc::clone(&state.node);
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        Ok(self.spawn(tag, fid, async move {
            match tree.write(&node, offset, data).await {
                Ok(n) => Fcall::Rwrite { count: n.min(len) },
                Err(e) => Fcall::Rerror { ename: e.0 },
            }
        }))
    }

    /// Runs a read or write: answered at once when it completes without
    /// waiting (most do: a write that buffers, a read of computed content),
    /// else kept running in this connection's task until it ends, is
    /// flushed, or its fid is clunked.
    fn spawn<F>(&mut self, tag: u16, fid: u32, fut: F) -> Option<Fcall>
    where
        F: Future<Output = Fcall> + Send + 'static,
    {
        let mut fut = Box::pin(fut);
        // A first poll with a no-op waker keeps requests in order (a write
        // is taken before the read pipelined after it); a future that is not
        // ready is polled again with the task's waker by `settle`.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let Poll::Ready(body) = fut.as_mut().poll(&mut cx) {
            return Some(body);
        }
        self.next_id += 1;
        let id = self.next_id;
        let (abort, reg) = AbortHandle::new_pair();
        let fut = Abortable::new(fut, reg);
        self.running.push(Box::pin(async move {
            Done {
                tag,
                id,
                body: fut.await,
            }
        }));
        self.inflight.insert(tag, Inflight { id, fid, abort });
        None
    }

    /// Cancels the fid's in-flight requests (each gets an Rerror), then clunks it.
    fn clunk(&mut self, fid: u32) -> Result<(), FsError> {
        let state = self.fids.remove(&fid).ok_or_else(|| unknown_fid(fid))?;
        let tags: Vec<u16> = self
            .inflight
            .iter()
            .filter(|(_, inf)| inf.fid == fid)
            .map(|(tag, _)| *tag)
            .collect();
        for tag in &tags {
            if let Some(inf) = self.inflight.remove(tag) {
                inf.abort.abort();
            }
        }
        if !tags.is_empty() {
            self.drop_aborted();
        }
        for tag in tags {
            let ename = "cancelled: fid clunked".to_owned();
            self.send(tag, Fcall::Rerror { ename });
        }
        self.tree.clunk(&state.node);
        Ok(())
    }
}
