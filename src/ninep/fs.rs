//! The interface between the 9P connection loop and a synthetic file tree:
//! the loop owns fids, tags, framing and flush; the tree owns names and data.

use std::future::Future;

/// `Qid.type` bits.
pub const QTDIR: u8 = 0x80;
pub const QTAUTH: u8 = 0x08;
pub const QTFILE: u8 = 0x00;

/// `Stat.mode` bits.
pub const DMDIR: u32 = 0x8000_0000;
pub const DMAUTH: u32 = 0x0800_0000;

/// Open modes (low two bits of `Topen.mode`) and flags.
pub const OREAD: u8 = 0;
pub const OWRITE: u8 = 1;
pub const ORDWR: u8 = 2;
pub const OEXEC: u8 = 3;
pub const OTRUNC: u8 = 0x10;

/// The server's unique identification of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Qid {
    pub ty: u8,
    pub version: u32,
    pub path: u64,
}

/// A 9P2000 directory entry (`stat`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stat {
    pub ty: u16,
    pub dev: u32,
    pub qid: Qid,
    pub mode: u32,
    pub atime: u32,
    pub mtime: u32,
    pub length: u64,
    pub name: String,
    pub uid: String,
    pub gid: String,
    pub muid: String,
}

/// A refusal: becomes an `Rerror` whose text says what was wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FsError(pub String);

impl FsError {
    pub fn new(msg: impl Into<String>) -> Self {
        FsError(msg.into())
    }
}

/// A file tree served over 9P.
///
/// The connection loop keeps each fid's `Node` in an `Arc` and runs every
/// read and write as a future of its own inside the connection's task (so a
/// blocking read does not stall the connection, and no request hops to
/// another task), and drops that future when the request is flushed or its
/// fid is clunked: dropping a read or write future is how a request is
/// cancelled, so implementations must clean up on drop. A future is polled
/// only while its connection's task runs, so it should not block the thread for long.
pub trait FileTree: Send + Sync + 'static {
    /// What one fid points at, including that fid's own state (for example
    /// what was written to a write-then-read file). Never shared between fids.
    type Node: Send + Sync + 'static;

    /// `Tauth`: a fresh authentication file (its qid has `QTAUTH`).
    fn auth(&self, uname: &str, aname: &str) -> Result<Self::Node, FsError>;

    /// `Tattach`: the root, given the afid's node if the client sent one.
    fn attach(
        &self,
        auth: Option<&Self::Node>,
        uname: &str,
        aname: &str,
    ) -> Result<Self::Node, FsError>;

    /// One step of a `Twalk` (`name` may be `..`), giving a node with fresh per-fid state.
    fn walk(&self, from: &Self::Node, name: &str) -> Result<Self::Node, FsError>;

    /// A `Twalk` with no names: the same file, fresh per-fid state.
    fn clone_node(&self, node: &Self::Node) -> Self::Node;

    fn qid(&self, node: &Self::Node) -> Qid;

    fn stat(&self, node: &Self::Node) -> Result<Stat, FsError>;

    /// `Topen`: refuse modes the file does not allow.
    fn open(&self, node: &Self::Node, mode: u8) -> Result<(), FsError>;

    /// The entries of a directory node (the loop encodes them and handles offsets).
    fn readdir(&self, node: &Self::Node) -> Result<Vec<Stat>, FsError>;

    /// `Tread` on a file. May block (for example until a process exits).
    fn read(
        &self,
        node: &Self::Node,
        offset: u64,
        count: u32,
    ) -> impl Future<Output = Result<Vec<u8>, FsError>> + Send;

    /// `Twrite` on a file; returns the number of bytes taken.
    fn write(
        &self,
        node: &Self::Node,
        offset: u64,
        data: Vec<u8>,
    ) -> impl Future<Output = Result<u32, FsError>> + Send;

    /// The fid is gone (`Tclunk`, or the connection ended). In-flight requests
    /// on it have already been cancelled.
    fn clunk(&self, node: &Self::Node);
}
