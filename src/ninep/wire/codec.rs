//! Encoding and decoding of 9P2000 messages and stat entries.
//! Decoding is total: every input gives a message or a `WireError`, never a panic.

use super::{Fcall, HEADER_LEN, MAXWELEM, Msg, WireError};
use crate::ninep::fs::{Qid, Stat};

/// A bounds-checked little-endian cursor over a byte slice.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated(what));
        }
        let start = self.pos;
        self.pos += n;
        self.buf
            .get(start..self.pos)
            .ok_or(WireError::Truncated(what))
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &'static str) -> Result<String, WireError> {
        let len = usize::from(self.u16(what)?);
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::BadUtf8)
    }

    fn data(&mut self, what: &'static str) -> Result<Vec<u8>, WireError> {
        let len = usize::try_from(self.u32(what)?).map_err(|_| WireError::Truncated(what))?;
        Ok(self.take(len, what)?.to_vec())
    }

    fn qid(&mut self) -> Result<Qid, WireError> {
        Ok(Qid {
            ty: self.u8("qid.type")?,
            version: self.u32("qid.version")?,
            path: self.u64("qid.path")?,
        })
    }

    /// A stat entry: `size[2]` then that many bytes. Bytes past the 9P2000 fields
    /// inside the entry (9P2000.u extensions) are ignored.
    fn stat(&mut self) -> Result<Stat, WireError> {
        let size = usize::from(self.u16("stat size")?);
        let body = self.take(size, "stat")?;
        let mut c = Cursor::new(body);
        Ok(Stat {
            ty: c.u16("stat.type")?,
            dev: c.u32("stat.dev")?,
            qid: c.qid()?,
            mode: c.u32("stat.mode")?,
            atime: c.u32("stat.atime")?,
            mtime: c.u32("stat.mtime")?,
            length: c.u64("stat.length")?,
            name: c.string("stat.name")?,
            uid: c.string("stat.uid")?,
            gid: c.string("stat.gid")?,
            muid: c.string("stat.muid")?,
        })
    }

    /// `n[2]` followed by one stat entry whose own size is `n - 2` (Rstat, Twstat).
    fn wrapped_stat(&mut self) -> Result<Stat, WireError> {
        let n = usize::from(self.u16("stat[n]")?);
        let inner = self.take(n, "stat[n]")?;
        let mut c = Cursor::new(inner);
        let stat = c.stat()?;
        if c.remaining() != 0 {
            return Err(WireError::StatSize {
                declared: c.pos,
                container: n,
            });
        }
        Ok(stat)
    }
}

/// Decodes one whole frame (`size[4] type[1] tag[2] body`).
pub fn decode(frame: &[u8]) -> Result<Msg, WireError> {
    if frame.len() < HEADER_LEN {
        return Err(WireError::FrameTooShort(
            u32::try_from(frame.len()).unwrap_or(u32::MAX),
        ));
    }
    let mut c = Cursor::new(frame);
    let size = c.u32("size")?;
    if usize::try_from(size).ok() != Some(frame.len()) {
        return Err(WireError::SizeMismatch {
            declared: size,
            actual: frame.len(),
        });
    }
    let ty = c.u8("type")?;
    let tag = c.u16("tag")?;
    let body = match ty {
        100 => Fcall::Tversion {
            msize: c.u32("msize")?,
            version: c.string("version")?,
        },
        101 => Fcall::Rversion {
            msize: c.u32("msize")?,
            version: c.string("version")?,
        },
        102 => Fcall::Tauth {
            afid: c.u32("afid")?,
            uname: c.string("uname")?,
            aname: c.string("aname")?,
        },
        103 => Fcall::Rauth { aqid: c.qid()? },
        104 => Fcall::Tattach {
            fid: c.u32("fid")?,
            afid: c.u32("afid")?,
            uname: c.string("uname")?,
            aname: c.string("aname")?,
        },
        105 => Fcall::Rattach { qid: c.qid()? },
        107 => Fcall::Rerror {
            ename: c.string("ename")?,
        },
        108 => Fcall::Tflush {
            oldtag: c.u16("oldtag")?,
        },
        109 => Fcall::Rflush,
        110 => {
            let fid = c.u32("fid")?;
            let newfid = c.u32("newfid")?;
            let n = usize::from(c.u16("nwname")?);
            if n > MAXWELEM {
                return Err(WireError::TooManyWalkElems(n));
            }
            let mut wnames = Vec::with_capacity(n);
            for _ in 0..n {
                wnames.push(c.string("wname")?);
            }
            Fcall::Twalk {
                fid,
                newfid,
                wnames,
            }
        }
        111 => {
            let n = usize::from(c.u16("nwqid")?);
            if n > MAXWELEM {
                return Err(WireError::TooManyWalkElems(n));
            }
            let mut wqids = Vec::with_capacity(n);
            for _ in 0..n {
                wqids.push(c.qid()?);
            }
            Fcall::Rwalk { wqids }
        }
        112 => Fcall::Topen {
            fid: c.u32("fid")?,
            mode: c.u8("mode")?,
        },
        113 => Fcall::Ropen {
            qid: c.qid()?,
            iounit: c.u32("iounit")?,
        },
        114 => Fcall::Tcreate {
            fid: c.u32("fid")?,
            name: c.string("name")?,
            perm: c.u32("perm")?,
            mode: c.u8("mode")?,
        },
        115 => Fcall::Rcreate {
            qid: c.qid()?,
            iounit: c.u32("iounit")?,
        },
        116 => Fcall::Tread {
            fid: c.u32("fid")?,
            offset: c.u64("offset")?,
            count: c.u32("count")?,
        },
        117 => Fcall::Rread {
            data: c.data("data")?,
        },
        118 => Fcall::Twrite {
            fid: c.u32("fid")?,
            offset: c.u64("offset")?,
            data: c.data("data")?,
        },
        119 => Fcall::Rwrite {
            count: c.u32("count")?,
        },
        120 => Fcall::Tclunk { fid: c.u32("fid")? },
        121 => Fcall::Rclunk,
        122 => Fcall::Tremove { fid: c.u32("fid")? },
        123 => Fcall::Rremove,
        124 => Fcall::Tstat { fid: c.u32("fid")? },
        125 => Fcall::Rstat {
            stat: c.wrapped_stat()?,
        },
        126 => Fcall::Twstat {
            fid: c.u32("fid")?,
            stat: c.wrapped_stat()?,
        },
        127 => Fcall::Rwstat,
        other => return Err(WireError::UnknownType(other)),
    };
    if c.remaining() != 0 {
        return Err(WireError::TrailingBytes(c.remaining()));
    }
    Ok(Msg { tag, body })
}

/// Decodes the concatenated stat entries of a directory read.
pub fn decode_stats(data: &[u8]) -> Result<Vec<Stat>, WireError> {
    let mut c = Cursor::new(data);
    let mut out = Vec::new();
    while c.remaining() > 0 {
        out.push(c.stat()?);
    }
    Ok(out)
}

/// Decodes one stat entry (`size[2]` and the entry) from the start of `data`,
/// returning it and the number of bytes it took.
pub fn decode_stat(data: &[u8]) -> Result<(Stat, usize), WireError> {
    let mut c = Cursor::new(data);
    let stat = c.stat()?;
    Ok((stat, c.pos))
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), WireError> {
    let len = u16::try_from(s.len()).map_err(|_| WireError::StringTooLong(s.len()))?;
    put_u16(out, len);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_data(out: &mut Vec<u8>, d: &[u8]) -> Result<(), WireError> {
    let len = u32::try_from(d.len()).map_err(|_| WireError::TooLarge("data"))?;
    put_u32(out, len);
    out.extend_from_slice(d);
    Ok(())
}

fn put_qid(out: &mut Vec<u8>, q: &Qid) {
    out.push(q.ty);
    put_u32(out, q.version);
    put_u64(out, q.path);
}

/// Appends one stat entry (`size[2]` and the entry), as in a directory read.
pub fn encode_stat(stat: &Stat, out: &mut Vec<u8>) -> Result<(), WireError> {
    let start = out.len();
    put_u16(out, 0);
    put_u16(out, stat.ty);
    put_u32(out, stat.dev);
    put_qid(out, &stat.qid);
    put_u32(out, stat.mode);
    put_u32(out, stat.atime);
    put_u32(out, stat.mtime);
    put_u64(out, stat.length);
    put_str(out, &stat.name)?;
    put_str(out, &stat.uid)?;
    put_str(out, &stat.gid)?;
    put_str(out, &stat.muid)?;
    let size = out.len() - start - 2;
    let size = u16::try_from(size).map_err(|_| WireError::TooLarge("stat"))?;
    out[start..start + 2].copy_from_slice(&size.to_le_bytes());
    Ok(())
}

/// `n[2]` then the stat entry (Rstat, Twstat).
fn put_wrapped_stat(out: &mut Vec<u8>, stat: &Stat) -> Result<(), WireError> {
    let start = out.len();
    put_u16(out, 0);
    encode_stat(stat, out)?;
    let n = u16::try_from(out.len() - start - 2).map_err(|_| WireError::TooLarge("stat"))?;
    out[start..start + 2].copy_from_slice(&n.to_le_bytes());
    Ok(())
}

/// Encodes a message into a whole frame. Fails only for values 9P cannot carry
/// (strings over 65535 bytes, more than 16 walk elements, oversized data).
pub fn encode(msg: &Msg) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(64);
    put_u32(&mut out, 0);
    out.push(msg.body.type_code());
    put_u16(&mut out, msg.tag);
    match &msg.body {
        Fcall::Tversion { msize, version } | Fcall::Rversion { msize, version } => {
            put_u32(&mut out, *msize);
            put_str(&mut out, version)?;
        }
        Fcall::Tauth { afid, uname, aname } => {
            put_u32(&mut out, *afid);
            put_str(&mut out, uname)?;
            put_str(&mut out, aname)?;
        }
        Fcall::Rauth { aqid: qid } | Fcall::Rattach { qid } => put_qid(&mut out, qid),
        Fcall::Tattach {
            fid,
            afid,
            uname,
            aname,
        } => {
            put_u32(&mut out, *fid);
            put_u32(&mut out, *afid);
            put_str(&mut out, uname)?;
            put_str(&mut out, aname)?;
        }
        Fcall::Rerror { ename } => put_str(&mut out, ename)?,
        Fcall::Tflush { oldtag } => put_u16(&mut out, *oldtag),
        Fcall::Rflush | Fcall::Rclunk | Fcall::Rremove | Fcall::Rwstat => {}
        Fcall::Twalk {
            fid,
            newfid,
            wnames,
        } => {
            if wnames.len() > MAXWELEM {
                return Err(WireError::TooManyWalkElems(wnames.len()));
            }
            put_u32(&mut out, *fid);
            put_u32(&mut out, *newfid);
            put_u16(&mut out, wnames.len() as u16);
            for name in wnames {
                put_str(&mut out, name)?;
            }
        }
        Fcall::Rwalk { wqids } => {
            if wqids.len() > MAXWELEM {
                return Err(WireError::TooManyWalkElems(wqids.len()));
            }
            put_u16(&mut out, wqids.len() as u16);
            for q in wqids {
                put_qid(&mut out, q);
            }
        }
        Fcall::Topen { fid, mode } => {
            put_u32(&mut out, *fid);
            out.push(*mode);
        }
        Fcall::Ropen { qid, iounit } | Fcall::Rcreate { qid, iounit } => {
            put_qid(&mut out, qid);
            put_u32(&mut out, *iounit);
        }
        Fcall::Tcreate {
            fid,
            name,
            perm,
            mode,
        } => {
            put_u32(&mut out, *fid);
            put_str(&mut out, name)?;
            put_u32(&mut out, *perm);
            out.push(*mode);
        }
        Fcall::Tread { fid, offset, count } => {
            put_u32(&mut out, *fid);
            put_u64(&mut out, *offset);
            put_u32(&mut out, *count);
        }
        Fcall::Rread { data } => put_data(&mut out, data)?,
        Fcall::Twrite { fid, offset, data } => {
            put_u32(&mut out, *fid);
            put_u64(&mut out, *offset);
            put_data(&mut out, data)?;
        }
        Fcall::Rwrite { count } => put_u32(&mut out, *count),
        Fcall::Tclunk { fid } | Fcall::Tremove { fid } | Fcall::Tstat { fid } => {
            put_u32(&mut out, *fid)
        }
        Fcall::Rstat { stat } => put_wrapped_stat(&mut out, stat)?,
        Fcall::Twstat { fid, stat } => {
            put_u32(&mut out, *fid);
            put_wrapped_stat(&mut out, stat)?;
        }
    }
    let size = u32::try_from(out.len()).map_err(|_| WireError::TooLarge("message"))?;
    out[0..4].copy_from_slice(&size.to_le_bytes());
    Ok(out)
}
