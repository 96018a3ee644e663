//! A small blocking 9P2000 client over a Unix socket, for the CLI and tests.
//! One request at a time, plus an `Interrupter` that can flush or clunk from another thread.

use super::fs::{OREAD, Qid, Stat};
use super::wire::{
    Fcall, IOHDRSZ, MAX_MSIZE, MAXWELEM, Msg, NOFID, NOTAG, VERSION, WireError, decode,
    decode_stats, encode, read_frame_sync,
};
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

/// A client-side fid.
pub type Fid = u32;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("9p protocol error: {0}")]
    Wire(#[from] WireError),
    /// The server's `Rerror` text.
    #[error("{0}")]
    Server(String),
    #[error("unexpected {got} in reply to {sent}")]
    Unexpected {
        sent: &'static str,
        got: &'static str,
    },
    #[error("connection closed by the server")]
    Closed,
    #[error("server does not speak 9P2000 (it answered {0:?})")]
    Version(String),
    #[error("{path}: '{name}' does not exist")]
    NotFound { path: String, name: String },
    #[error("not attached: call attach first")]
    NotAttached,
}

type Result<T> = std::result::Result<T, ClientError>;

/// Hands out tags shared by a client and its interrupters (never NOTAG).
#[derive(Debug, Default)]
struct Tags(AtomicU16);

impl Tags {
    fn next(&self) -> u16 {
        loop {
            let t = self.0.fetch_add(1, Ordering::Relaxed);
            if t != NOTAG {
                return t;
            }
        }
    }
}

fn send_on(writer: &Mutex<UnixStream>, tag: u16, body: Fcall) -> Result<()> {
    write_frames(writer, &encode(&Msg { tag, body })?)
}

/// Writes whole encoded frames in one go (under the writer lock, so that
/// an interrupter's frame never lands in the middle of one).
fn write_frames(writer: &Mutex<UnixStream>, frames: &[u8]) -> Result<()> {
    let mut w = writer
        .lock()
        .map_err(|_| ClientError::Io(std::io::Error::other("writer lock poisoned")))?;
    w.write_all(frames)?;
    Ok(())
}

/// A blocking 9P2000 client.
///
/// Replies whose tag is not the one awaited (for example the `Rflush` of an
/// [`Interrupter`]'s request) are skipped.
#[derive(Debug)]
pub struct Client {
    /// Buffered: a reply usually arrives whole and is taken in one read.
    reader: BufReader<UnixStream>,
    writer: Arc<Mutex<UnixStream>>,
    tags: Arc<Tags>,
    msize: u32,
    next_fid: Fid,
    root: Option<Fid>,
}

/// Sends requests on a client's connection from another thread without waiting
/// for their replies (which the client's own reads skip).
#[derive(Debug, Clone)]
pub struct Interrupter {
    writer: Arc<Mutex<UnixStream>>,
    tags: Arc<Tags>,
}

impl Interrupter {
    /// Sends `Tflush(oldtag)`; returns the flush's tag.
    pub fn flush(&self, oldtag: u16) -> Result<u16> {
        self.send(Fcall::Tflush { oldtag })
    }

    /// Sends `Tclunk(fid)`, cancelling the fid's pending requests; returns the tag.
    pub fn clunk(&self, fid: Fid) -> Result<u16> {
        self.send(Fcall::Tclunk { fid })
    }

    /// Sends any request; returns its tag.
    pub fn send(&self, body: Fcall) -> Result<u16> {
        let tag = self.tags.next();
        send_on(&self.writer, tag, body)?;
        Ok(tag)
    }
}

impl Client {
    /// Connects to a 9P server's Unix socket (no messages are sent yet).
    pub fn connect(path: impl AsRef<Path>) -> Result<Self> {
        Self::from_stream(UnixStream::connect(path)?)
    }

    /// Wraps a connected stream.
    pub fn from_stream(stream: UnixStream) -> Result<Self> {
        let reader = BufReader::with_capacity(16 << 10, stream.try_clone()?);
        Ok(Client {
            reader,
            writer: Arc::new(Mutex::new(stream)),
            tags: Arc::new(Tags::default()),
            msize: MAX_MSIZE,
            next_fid: 0,
            root: None,
        })
    }

    /// Connects, negotiates 9P2000, authenticates with `secret` if given and
    /// attaches. Returns the client and the session token (when authenticated).
    pub fn open_session(
        path: impl AsRef<Path>,
        uname: &str,
        aname: &str,
        secret: Option<&[u8]>,
    ) -> Result<(Self, Option<String>)> {
        let mut c = Self::connect(path)?;
        c.handshake()?;
        let (afid, token) = match secret {
            Some(secret) => {
                let (afid, token) = c.authenticate(uname, aname, secret)?;
                (Some(afid), Some(token))
            }
            None => (None, None),
        };
        c.attach(afid, uname, aname)?;
        Ok((c, token))
    }

    /// `Tversion` "9P2000" at the largest msize; fails unless the server agrees.
    pub fn handshake(&mut self) -> Result<u32> {
        let (msize, version) = self.version(MAX_MSIZE, VERSION)?;
        if version != VERSION {
            return Err(ClientError::Version(version));
        }
        Ok(msize)
    }

    /// Raw `Tversion`: returns the server's msize and version string.
    pub fn version(&mut self, msize: u32, version: &str) -> Result<(u32, String)> {
        let body = Fcall::Tversion {
            msize,
            version: version.to_owned(),
        };
        send_on(&self.writer, NOTAG, body)?;
        match self.recv_tag(NOTAG)? {
            Fcall::Rversion { msize, version } => {
                self.msize = msize.min(MAX_MSIZE);
                self.root = None;
                Ok((msize, version))
            }
            Fcall::Rerror { ename } => Err(ClientError::Server(ename)),
            other => Err(ClientError::Unexpected {
                sent: "Tversion",
                got: other.name(),
            }),
        }
    }

    /// The negotiated message size.
    pub fn msize(&self) -> u32 {
        self.msize
    }

    /// The fid `attach` gave, if any.
    pub fn root(&self) -> Option<Fid> {
        self.root
    }

    /// A handle for flushing or clunking from another thread.
    pub fn interrupter(&self) -> Interrupter {
        Interrupter {
            writer: Arc::clone(&self.writer),
            tags: Arc::clone(&self.tags),
        }
    }

    /// A fid not used by this client yet.
    pub fn new_fid(&mut self) -> Fid {
        let fid = self.next_fid;
        self.next_fid = self.next_fid.wrapping_add(1);
        if self.next_fid == NOFID {
            self.next_fid = 0;
        }
        fid
    }

    /// Sends a request without waiting; returns its tag.
    pub fn send(&mut self, body: Fcall) -> Result<u16> {
        let tag = self.tags.next();
        send_on(&self.writer, tag, body)?;
        Ok(tag)
    }

    /// Sends a request with a tag of the caller's choosing (for tests of tag handling).
    pub fn send_tagged(&mut self, tag: u16, body: Fcall) -> Result<()> {
        send_on(&self.writer, tag, body)
    }

    /// Receives the next reply, whatever its tag.
    pub fn recv(&mut self) -> Result<Msg> {
        match read_frame_sync(&mut self.reader, self.msize.max(MAX_MSIZE))? {
            Some(frame) => Ok(decode(&frame)?),
            None => Err(ClientError::Closed),
        }
    }

    fn recv_tag(&mut self, tag: u16) -> Result<Fcall> {
        loop {
            let msg = self.recv()?;
            if msg.tag == tag {
                return Ok(msg.body);
            }
            tracing::debug!(tag = msg.tag, "skipping reply to another request");
        }
    }

    /// One request and its reply; an `Rerror` becomes `ClientError::Server`.
    pub fn rpc(&mut self, body: Fcall) -> Result<Fcall> {
        let tag = self.send(body)?;
        match self.recv_tag(tag)? {
            Fcall::Rerror { ename } => Err(ClientError::Server(ename)),
            reply => Ok(reply),
        }
    }

    /// `Tauth`: a new afid.
    pub fn auth(&mut self, uname: &str, aname: &str) -> Result<Fid> {
        let afid = self.new_fid();
        let body = Fcall::Tauth {
            afid,
            uname: uname.to_owned(),
            aname: aname.to_owned(),
        };
        match self.rpc(body)? {
            Fcall::Rauth { .. } => Ok(afid),
            other => Err(unexpected("Tauth", &other)),
        }
    }

    /// `Tauth`, write `secret` to the afid, read the session token back (trimmed).
    pub fn authenticate(
        &mut self,
        uname: &str,
        aname: &str,
        secret: &[u8],
    ) -> Result<(Fid, String)> {
        let afid = self.auth(uname, aname)?;
        self.write(afid, secret)?;
        // One read: a token is short, and this does not depend on the auth
        // file honouring offsets.
        let token = self.read(afid, 0, self.iounit())?;
        let token = String::from_utf8_lossy(&token).trim().to_owned();
        Ok((afid, token))
    }

    /// `Tattach` (with the afid from [`Client::auth`] if any); the fid becomes the root.
    pub fn attach(&mut self, afid: Option<Fid>, uname: &str, aname: &str) -> Result<Fid> {
        let fid = self.new_fid();
        let body = Fcall::Tattach {
            fid,
            afid: afid.unwrap_or(NOFID),
            uname: uname.to_owned(),
            aname: aname.to_owned(),
        };
        match self.rpc(body)? {
            Fcall::Rattach { .. } => {
                self.root = Some(fid);
                Ok(fid)
            }
            other => Err(unexpected("Tattach", &other)),
        }
    }

    /// Walks a `/`-separated path from `from` to a new fid (an empty path clones).
    pub fn walk(&mut self, from: Fid, path: &str) -> Result<Fid> {
        let names: Vec<String> = path
            .split('/')
            .filter(|n| !n.is_empty() && *n != ".")
            .map(str::to_owned)
            .collect();
        let newfid = self.new_fid();
        let mut chunks: Vec<&[String]> = names.chunks(MAXWELEM).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let mut fid = from;
        for chunk in chunks {
            let body = Fcall::Twalk {
                fid,
                newfid,
                wnames: chunk.to_vec(),
            };
            let reply = self.rpc(body);
            let failed_at = match &reply {
                Ok(Fcall::Rwalk { wqids }) if wqids.len() == chunk.len() => None,
                Ok(Fcall::Rwalk { wqids }) => Some(wqids.len()),
                Ok(other) => return Err(unexpected("Twalk", other)),
                Err(_) => None,
            };
            if reply.is_err() || failed_at.is_some() {
                if fid == newfid {
                    let _ = self.clunk(newfid);
                }
                let name = chunk
                    .get(failed_at.unwrap_or(0))
                    .cloned()
                    .unwrap_or_default();
                return match reply {
                    Err(e) => Err(e),
                    Ok(_) => Err(ClientError::NotFound {
                        path: path.to_owned(),
                        name,
                    }),
                };
            }
            fid = newfid;
        }
        Ok(newfid)
    }

    /// `Topen`: the file's qid and iounit.
    pub fn open(&mut self, fid: Fid, mode: u8) -> Result<(Qid, u32)> {
        match self.rpc(Fcall::Topen { fid, mode })? {
            Fcall::Ropen { qid, iounit } => Ok((qid, iounit)),
            other => Err(unexpected("Topen", &other)),
        }
    }

    /// Walks from the root to `path` and opens it with `mode`.
    pub fn walk_open(&mut self, path: &str, mode: u8) -> Result<Fid> {
        let root = self.root.ok_or(ClientError::NotAttached)?;
        let fid = self.walk(root, path)?;
        if let Err(e) = self.open(fid, mode) {
            let _ = self.clunk(fid);
            return Err(e);
        }
        Ok(fid)
    }

    /// The largest read or write one message carries.
    pub fn iounit(&self) -> u32 {
        self.msize.saturating_sub(IOHDRSZ).max(1)
    }

    /// Writes `data` (at most one iounit) at offset 0 and reads up to
    /// `count` bytes from offset 0, with both requests sent together: one
    /// round trip for a write-then-read file (`proc/new`, `tools`, ...).
    /// The server takes a connection's requests in order, so the read sees
    /// the write. If the write is refused or short, its error is returned
    /// and the read's answer is not used.
    pub fn write_read(&mut self, fid: Fid, data: &[u8], count: u32) -> Result<Vec<u8>> {
        if data.len() > self.iounit() as usize {
            self.write(fid, data)?;
            return self.read(fid, 0, count);
        }
        let (wtag, rtag) = (self.tags.next(), self.tags.next());
        let mut frames = encode(&Msg {
            tag: wtag,
            body: Fcall::Twrite {
                fid,
                offset: 0,
                data: data.to_vec(),
            },
        })?;
        frames.extend(encode(&Msg {
            tag: rtag,
            body: Fcall::Tread {
                fid,
                offset: 0,
                count,
            },
        })?);
        write_frames(&self.writer, &frames)?;
        // Replies may come in any order; both are always sent.
        let (mut wrote, mut read) = (None, None);
        while wrote.is_none() || read.is_none() {
            let msg = self.recv()?;
            match msg.tag {
                t if t == wtag => wrote = Some(msg.body),
                t if t == rtag => read = Some(msg.body),
                t => tracing::debug!(tag = t, "skipping reply to another request"),
            }
        }
        match wrote {
            Some(Fcall::Rwrite { count }) if count as usize == data.len() => {}
            Some(Fcall::Rwrite { count }) => {
                return Err(ClientError::Server(format!(
                    "short write: the server took {count} of {} bytes",
                    data.len()
                )));
            }
            Some(Fcall::Rerror { ename }) => return Err(ClientError::Server(ename)),
            Some(other) => return Err(unexpected("Twrite", &other)),
            None => return Err(ClientError::Closed),
        }
        match read {
            Some(Fcall::Rread { data }) => Ok(data),
            Some(Fcall::Rerror { ename }) => Err(ClientError::Server(ename)),
            Some(other) => Err(unexpected("Tread", &other)),
            None => Err(ClientError::Closed),
        }
    }

    /// One `Tread`.
    pub fn read(&mut self, fid: Fid, offset: u64, count: u32) -> Result<Vec<u8>> {
        match self.rpc(Fcall::Tread { fid, offset, count })? {
            Fcall::Rread { data } => Ok(data),
            other => Err(unexpected("Tread", &other)),
        }
    }

    /// Reads from offset 0 until an empty read.
    pub fn read_all(&mut self, fid: Fid) -> Result<Vec<u8>> {
        self.read_on(fid, Vec::new())
    }

    /// Reads on after `out` (what the first reads gave) until an empty read.
    pub fn read_on(&mut self, fid: Fid, mut out: Vec<u8>) -> Result<Vec<u8>> {
        loop {
            let chunk = self.read(fid, out.len() as u64, self.iounit())?;
            if chunk.is_empty() {
                return Ok(out);
            }
            out.extend_from_slice(&chunk);
        }
    }

    /// One `Twrite` at `offset`; returns the count the server took.
    pub fn write_at(&mut self, fid: Fid, offset: u64, data: &[u8]) -> Result<u32> {
        let body = Fcall::Twrite {
            fid,
            offset,
            data: data.to_vec(),
        };
        match self.rpc(body)? {
            Fcall::Rwrite { count } => Ok(count),
            other => Err(unexpected("Twrite", &other)),
        }
    }

    /// Writes all of `data` from offset 0, in iounit-sized pieces.
    pub fn write(&mut self, fid: Fid, data: &[u8]) -> Result<u32> {
        if data.is_empty() {
            return self.write_at(fid, 0, data);
        }
        let mut done = 0usize;
        while done < data.len() {
            let end = data.len().min(done + self.iounit() as usize);
            let n = self.write_at(fid, done as u64, &data[done..end])?;
            if n == 0 {
                break;
            }
            done += n as usize;
        }
        Ok(u32::try_from(done).unwrap_or(u32::MAX))
    }

    /// `Tclunk`.
    pub fn clunk(&mut self, fid: Fid) -> Result<()> {
        match self.rpc(Fcall::Tclunk { fid })? {
            Fcall::Rclunk => Ok(()),
            other => Err(unexpected("Tclunk", &other)),
        }
    }

    /// `Tstat` on an existing fid.
    pub fn fstat(&mut self, fid: Fid) -> Result<Stat> {
        match self.rpc(Fcall::Tstat { fid })? {
            Fcall::Rstat { stat } => Ok(stat),
            other => Err(unexpected("Tstat", &other)),
        }
    }

    /// Stat of the file at `path`.
    pub fn stat(&mut self, path: &str) -> Result<Stat> {
        let root = self.root.ok_or(ClientError::NotAttached)?;
        let fid = self.walk(root, path)?;
        let stat = self.fstat(fid);
        let _ = self.clunk(fid);
        stat
    }

    /// The entries of the directory at `path`.
    pub fn ls(&mut self, path: &str) -> Result<Vec<Stat>> {
        let fid = self.walk_open(path, OREAD)?;
        let data = self.read_all(fid);
        let _ = self.clunk(fid);
        Ok(decode_stats(&data?)?)
    }
}

fn unexpected(sent: &'static str, got: &Fcall) -> ClientError {
    ClientError::Unexpected {
        sent,
        got: got.name(),
    }
}
