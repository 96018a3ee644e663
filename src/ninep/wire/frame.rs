//! Reading whole frames off a byte stream, async (server) and blocking (client),
//! with the msize limit applied before anything is allocated.

use super::{HEADER_LEN, WireError};
use std::io::{ErrorKind, Read};
use tokio::io::{AsyncRead, AsyncReadExt};

fn check_size(size: u32, msize: u32) -> Result<usize, WireError> {
    if (size as usize) < HEADER_LEN {
        return Err(WireError::FrameTooShort(size));
    }
    if size > msize {
        return Err(WireError::FrameTooLarge { size, msize });
    }
    usize::try_from(size).map_err(|_| WireError::FrameTooLarge { size, msize })
}

fn map_eof(e: std::io::Error) -> WireError {
    if e.kind() == ErrorKind::UnexpectedEof {
        WireError::UnexpectedEof
    } else {
        WireError::Io(e)
    }
}

/// Reads one frame (header included). `Ok(None)` is a clean end of stream
/// between frames; a frame larger than `msize` or smaller than 7 bytes is an error.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    msize: u32,
) -> Result<Option<Vec<u8>>, WireError> {
    read_frame_limited(r, || msize).await
}

/// [`read_frame`] with the limit taken once the size field has arrived, so a
/// negotiation that happened while waiting applies to the frame.
pub async fn read_frame_limited<R: AsyncRead + Unpin>(
    r: &mut R,
    msize: impl Fn() -> u32,
) -> Result<Option<Vec<u8>>, WireError> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        let n = r.read(&mut head[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(WireError::UnexpectedEof)
            };
        }
        got += n;
    }
    let size = check_size(u32::from_le_bytes(head), msize())?;
    let mut frame = vec![0u8; size];
    frame[..4].copy_from_slice(&head);
    r.read_exact(&mut frame[4..]).await.map_err(map_eof)?;
    Ok(Some(frame))
}

/// Blocking twin of [`read_frame`].
pub fn read_frame_sync<R: Read>(r: &mut R, msize: u32) -> Result<Option<Vec<u8>>, WireError> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        let n = match r.read(&mut head[got..]) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(WireError::Io(e)),
        };
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(WireError::UnexpectedEof)
            };
        }
        got += n;
    }
    let size = check_size(u32::from_le_bytes(head), msize)?;
    let mut frame = vec![0u8; size];
    frame[..4].copy_from_slice(&head);
    r.read_exact(&mut frame[4..]).map_err(map_eof)?;
    Ok(Some(frame))
}
