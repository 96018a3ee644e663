//! `Output`: the capped, shared capture buffer of one call (stdout and stderr
//! interleaved, plus stdout alone), readable while the call runs.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

/// Which pipe a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Default)]
struct Inner {
    /// stdout and stderr in arrival order, at most `cap` bytes.
    combined: Vec<u8>,
    /// stdout alone, at most `cap` bytes.
    stdout: Vec<u8>,
    /// Every byte seen on either pipe, kept or not.
    total: u64,
    /// Every byte seen on stdout, kept or not.
    stdout_total: u64,
    truncated: bool,
    finished: bool,
}

/// Output captured from one call, shared between the executor (writer) and
/// any number of readers (`out` files, the process table).
///
/// Past `cap` bytes further output is counted but dropped, and
/// [`Output::truncated`] turns true; the executor keeps draining the pipes.
#[derive(Debug)]
pub struct Output {
    cap: usize,
    inner: Mutex<Inner>,
    changed: Notify,
}

impl Output {
    /// An empty buffer keeping at most `cap` bytes of combined output (and at
    /// most `cap` bytes of stdout for the result).
    pub fn new(cap: usize) -> Self {
        Output {
            cap,
            inner: Mutex::new(Inner::default()),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the buffers invalid.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The capacity given to [`Output::new`].
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Appends a chunk read from `stream` and wakes readers.
    pub fn push(&self, stream: Stream, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut g = self.lock();
        let n = bytes.len() as u64;
        g.total += n;
        let room = self.cap.saturating_sub(g.combined.len());
        let take = room.min(bytes.len());
        g.combined.extend_from_slice(&bytes[..take]);
        let mut dropped = take < bytes.len();
        if stream == Stream::Stdout {
            g.stdout_total += n;
            let room = self.cap.saturating_sub(g.stdout.len());
            let kept = room.min(bytes.len());
            g.stdout.extend_from_slice(&bytes[..kept]);
            dropped |= kept < bytes.len();
        }
        if dropped {
            g.truncated = true;
        }
        drop(g);
        // Readers only see combined output: wake them only if it grew.
        if take > 0 {
            self.changed.notify_waiters();
        }
    }

    /// Marks the call as over: no more output will come. Wakes readers.
    pub fn finish(&self) {
        self.lock().finished = true;
        self.changed.notify_waiters();
    }

    /// Up to `count` bytes of combined output starting at `offset`.
    pub fn snapshot(&self, offset: usize, count: usize) -> Vec<u8> {
        let g = self.lock();
        let start = offset.min(g.combined.len());
        let end = start.saturating_add(count).min(g.combined.len());
        g.combined[start..end].to_vec()
    }

    /// All combined output kept so far.
    pub fn combined(&self) -> Vec<u8> {
        self.lock().combined.clone()
    }

    /// All stdout kept so far.
    pub fn stdout(&self) -> Vec<u8> {
        self.lock().stdout.clone()
    }

    /// Bytes of combined output kept (what `snapshot` can return).
    pub fn len(&self) -> usize {
        self.lock().combined.len()
    }

    /// True when nothing has been kept yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes seen on both pipes, including those dropped past the cap.
    pub fn total_bytes(&self) -> u64 {
        self.lock().total
    }

    /// Bytes seen on stdout, including those dropped past the cap.
    pub fn stdout_total_bytes(&self) -> u64 {
        self.lock().stdout_total
    }

    /// True once output was dropped because the cap was reached.
    pub fn truncated(&self) -> bool {
        self.lock().truncated
    }

    /// True once the call is over and no more output will come.
    pub fn is_finished(&self) -> bool {
        self.lock().finished
    }

    /// Waits until more than `offset` bytes are kept or the call is over
    /// (a reader at the cap therefore waits for the end of the call).
    ///
    /// Returns true if bytes past `offset` are available, false at the end.
    pub async fn wait_beyond(&self, offset: usize) -> bool {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Register before checking, so a push between check and await is not lost.
            notified.as_mut().enable();
            {
                let g = self.lock();
                if g.combined.len() > offset {
                    return true;
                }
                if g.finished {
                    return false;
                }
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn cap_drops_but_counts() {
        let o = Output::new(10);
        o.push(Stream::Stdout, b"hello");
        o.push(Stream::Stderr, b"world!!");
        o.push(Stream::Stdout, b"more");
        assert_eq!(o.combined(), b"helloworld");
        assert_eq!(o.stdout(), b"hellomore");
        assert_eq!(o.total_bytes(), 16);
        assert_eq!(o.stdout_total_bytes(), 9);
        assert!(o.truncated());
        assert_eq!(o.snapshot(3, 4), b"lowo");
        assert_eq!(o.snapshot(8, 100), b"ld");
        assert_eq!(o.snapshot(100, 5), b"");
    }

    #[tokio::test]
    async fn readers_wake_on_output_and_finish() {
        let o = Arc::new(Output::new(100));
        let r = o.clone();
        let reader = tokio::spawn(async move {
            let first = r.wait_beyond(0).await;
            let data = r.snapshot(0, 100);
            let second = r.wait_beyond(data.len()).await;
            (first, data, second)
        });
        tokio::task::yield_now().await;
        o.push(Stream::Stdout, b"abc");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        o.finish();
        let (first, data, second) = reader.await.unwrap();
        assert!(first);
        assert_eq!(data, b"abc");
        assert!(!second);
    }

    #[tokio::test]
    async fn reader_at_the_cap_waits_for_the_end() {
        let o = Arc::new(Output::new(3));
        o.push(Stream::Stdout, b"abcdef");
        let r = o.clone();
        let t = tokio::spawn(async move { r.wait_beyond(3).await });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        o.push(Stream::Stderr, b"more");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(
            !t.is_finished(),
            "nothing new can appear, but the call runs"
        );
        o.finish();
        assert!(!t.await.unwrap());
    }
}
