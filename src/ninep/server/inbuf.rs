//! The connection's input buffer: one read takes whatever the peer sent
//! (often several frames), and whole frames are cut from it as they complete.

use crate::ninep::wire::{HEADER_LEN, Msg, WireError, decode};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Spare room offered to each read; a larger frame reserves its own size.
const READ_CHUNK: usize = 8 << 10;

/// Bytes read from the peer and not yet consumed as frames.
#[derive(Default)]
pub(super) struct InBuf {
    buf: Vec<u8>,
    start: usize,
}

impl InBuf {
    /// The next whole frame, decoded; `None` until one has fully arrived.
    /// A frame larger than `msize` (checked from its size field, before it
    /// arrives) or one that does not decode is an error.
    pub(super) fn next_frame(&mut self, msize: u32) -> Result<Option<Msg>, WireError> {
        let avail = &self.buf[self.start..];
        let Some(head) = avail.first_chunk::<4>() else {
            return Ok(None);
        };
        let size = u32::from_le_bytes(*head);
        if (size as usize) < HEADER_LEN {
            return Err(WireError::FrameTooShort(size));
        }
        if size > msize {
            return Err(WireError::FrameTooLarge { size, msize });
        }
        let size = size as usize;
        if avail.len() < size {
            return Ok(None);
        }
        let msg = decode(&avail[..size])?;
        self.start += size;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(msg))
    }

    /// True when no partial frame is pending.
    pub(super) fn is_empty(&self) -> bool {
        self.start == self.buf.len()
    }

    /// Reads once from `r`; `false` at end of stream. Cancel-safe: dropping
    /// the future before it completes loses nothing.
    pub(super) async fn fill<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> std::io::Result<bool> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        // Room for the rest of a pending frame whose size is known, else a chunk.
        let want = match self.buf.first_chunk::<4>() {
            Some(head) => (u32::from_le_bytes(*head) as usize).max(READ_CHUNK),
            None => READ_CHUNK,
        };
        if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
            // A large frame has gone: do not keep its buffer per connection.
            self.buf = Vec::new();
        }
        self.buf.reserve(want.saturating_sub(self.buf.len()));
        Ok(r.read_buf(&mut self.buf).await? > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ninep::wire::{Fcall, encode};

    fn frame(tag: u16, body: Fcall) -> Vec<u8> {
        encode(&Msg { tag, body }).unwrap()
    }

    #[tokio::test]
    async fn frames_split_and_joined_anywhere_come_out_whole_and_in_order() {
        let mut bytes = frame(1, Fcall::Tclunk { fid: 7 });
        bytes.extend(frame(
            2,
            Fcall::Twrite {
                fid: 3,
                offset: 0,
                data: vec![b'x'; 20_000],
            },
        ));
        bytes.extend(frame(3, Fcall::Tstat { fid: 9 }));
        for cut in [1, 3, 4, 5, 11, 12, 13, 9_000, bytes.len() - 1] {
            let mut ib = InBuf::default();
            let (a, b) = bytes.split_at(cut);
            let mut got = Vec::new();
            for part in [a, b] {
                let mut r = part;
                while !r.is_empty() {
                    assert!(ib.fill(&mut r).await.unwrap());
                    while let Some(m) = ib.next_frame(1 << 20).unwrap() {
                        got.push(m.tag);
                    }
                }
            }
            assert_eq!(got, vec![1, 2, 3], "cut at {cut}");
            assert!(ib.is_empty());
        }
    }

    #[tokio::test]
    async fn a_frame_over_msize_is_refused_from_its_size_field() {
        let mut ib = InBuf::default();
        let mut r: &[u8] = &[0x00, 0x00, 0x10, 0x00]; // 1 MiB declared, nothing else sent
        assert!(ib.fill(&mut r).await.unwrap());
        assert!(matches!(
            ib.next_frame(8192),
            Err(WireError::FrameTooLarge {
                size: 1_048_576,
                msize: 8192
            })
        ));
        let mut ib = InBuf::default();
        let mut r: &[u8] = &[3, 0, 0, 0];
        ib.fill(&mut r).await.unwrap();
        assert!(matches!(
            ib.next_frame(8192),
            Err(WireError::FrameTooShort(3))
        ));
    }

    #[tokio::test]
    async fn end_of_stream_is_reported_and_a_partial_frame_is_visible() {
        let mut ib = InBuf::default();
        let mut r: &[u8] = &[20, 0, 0, 0, 100];
        assert!(ib.fill(&mut r).await.unwrap());
        assert!(ib.next_frame(8192).unwrap().is_none());
        assert!(!ib.is_empty());
        assert!(!ib.fill(&mut r).await.unwrap());
    }
}
