//! 9P2000 messages: the `Fcall` types, their little-endian codec and frame readers.
//! Pure data; the connection loop (`server`) and the client (`client`) build on it.

mod codec;
mod frame;

pub use codec::{decode, decode_stat, decode_stats, encode, encode_stat};
pub use frame::{read_frame, read_frame_limited, read_frame_sync};

use super::fs::{Qid, Stat};

/// The tag used by `Tversion`.
pub const NOTAG: u16 = 0xFFFF;
/// "No fid" (for `Tattach.afid` without authentication).
pub const NOFID: u32 = 0xFFFF_FFFF;
/// Most names one `Twalk` may carry.
pub const MAXWELEM: usize = 16;
/// Largest msize this implementation negotiates (1 MiB).
pub const MAX_MSIZE: u32 = 1 << 20;
/// Smallest msize a client may ask for.
pub const MIN_MSIZE: u32 = 256;
/// Bytes of header around the data of a read or write (`msize - IOHDRSZ` is the iounit).
pub const IOHDRSZ: u32 = 24;
/// `size[4] type[1] tag[2]`.
pub const HEADER_LEN: usize = 7;
/// The only dialect spoken.
pub const VERSION: &str = "9P2000";

/// Why bytes are not a 9P message (or a message cannot be encoded).
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("frame of {0} bytes is shorter than the 7-byte header")]
    FrameTooShort(u32),
    #[error("frame of {size} bytes exceeds msize {msize}")]
    FrameTooLarge { size: u32, msize: u32 },
    #[error("frame size field says {declared} bytes but {actual} were given")]
    SizeMismatch { declared: u32, actual: usize },
    #[error("message truncated while reading {0}")]
    Truncated(&'static str),
    #[error("{0} bytes left over after the message body")]
    TrailingBytes(usize),
    #[error("unknown message type {0}")]
    UnknownType(u8),
    #[error("string is not valid UTF-8")]
    BadUtf8,
    #[error("{0} walk elements (at most 16)")]
    TooManyWalkElems(usize),
    #[error("string of {0} bytes is too long for a 9P string")]
    StringTooLong(usize),
    #[error("{0} is too large to encode")]
    TooLarge(&'static str),
    #[error("stat size {declared} disagrees with its container ({container} bytes)")]
    StatSize { declared: usize, container: usize },
    #[error("connection closed in the middle of a frame")]
    UnexpectedEof,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// One 9P message: a tag and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub tag: u16,
    pub body: Fcall,
}

/// The body of every 9P2000 message (`Terror` does not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fcall {
    Tversion {
        msize: u32,
        version: String,
    },
    Rversion {
        msize: u32,
        version: String,
    },
    Tauth {
        afid: u32,
        uname: String,
        aname: String,
    },
    Rauth {
        aqid: Qid,
    },
    Tattach {
        fid: u32,
        afid: u32,
        uname: String,
        aname: String,
    },
    Rattach {
        qid: Qid,
    },
    Rerror {
        ename: String,
    },
    Tflush {
        oldtag: u16,
    },
    Rflush,
    Twalk {
        fid: u32,
        newfid: u32,
        wnames: Vec<String>,
    },
    Rwalk {
        wqids: Vec<Qid>,
    },
    Topen {
        fid: u32,
        mode: u8,
    },
    Ropen {
        qid: Qid,
        iounit: u32,
    },
    Tcreate {
        fid: u32,
        name: String,
        perm: u32,
        mode: u8,
    },
    Rcreate {
        qid: Qid,
        iounit: u32,
    },
    Tread {
        fid: u32,
        offset: u64,
        count: u32,
    },
    Rread {
        data: Vec<u8>,
    },
    Twrite {
        fid: u32,
        offset: u64,
        data: Vec<u8>,
    },
    Rwrite {
        count: u32,
    },
    Tclunk {
        fid: u32,
    },
    Rclunk,
    Tremove {
        fid: u32,
    },
    Rremove,
    Tstat {
        fid: u32,
    },
    Rstat {
        stat: Stat,
    },
    Twstat {
        fid: u32,
        stat: Stat,
    },
    Rwstat,
}

impl Fcall {
    /// The message type byte.
    pub fn type_code(&self) -> u8 {
        match self {
            Fcall::Tversion { .. } => 100,
            Fcall::Rversion { .. } => 101,
            Fcall::Tauth { .. } => 102,
            Fcall::Rauth { .. } => 103,
            Fcall::Tattach { .. } => 104,
            Fcall::Rattach { .. } => 105,
            Fcall::Rerror { .. } => 107,
            Fcall::Tflush { .. } => 108,
            Fcall::Rflush => 109,
            Fcall::Twalk { .. } => 110,
            Fcall::Rwalk { .. } => 111,
            Fcall::Topen { .. } => 112,
            Fcall::Ropen { .. } => 113,
            Fcall::Tcreate { .. } => 114,
            Fcall::Rcreate { .. } => 115,
            Fcall::Tread { .. } => 116,
            Fcall::Rread { .. } => 117,
            Fcall::Twrite { .. } => 118,
            Fcall::Rwrite { .. } => 119,
            Fcall::Tclunk { .. } => 120,
            Fcall::Rclunk => 121,
            Fcall::Tremove { .. } => 122,
            Fcall::Rremove => 123,
            Fcall::Tstat { .. } => 124,
            Fcall::Rstat { .. } => 125,
            Fcall::Twstat { .. } => 126,
            Fcall::Rwstat => 127,
        }
    }

    /// A short name for logs (`"Tread"`), never the contents.
    pub fn name(&self) -> &'static str {
        const NAMES: [&str; 28] = [
            "Tversion", "Rversion", "Tauth", "Rauth", "Tattach", "Rattach", "Terror", "Rerror",
            "Tflush", "Rflush", "Twalk", "Rwalk", "Topen", "Ropen", "Tcreate", "Rcreate", "Tread",
            "Rread", "Twrite", "Rwrite", "Tclunk", "Rclunk", "Tremove", "Rremove", "Tstat",
            "Rstat", "Twstat", "Rwstat",
        ];
        NAMES
            .get(usize::from(self.type_code().saturating_sub(100)))
            .copied()
            .unwrap_or("?")
    }
}
