//! A small `FileTree` for the 9P connection tests (static, echo, blocking and auth
//! files) and a server for it on a Unix socket in a temp dir.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolsrv::ninep::client::{Client, ClientError};
use toolsrv::ninep::fs::{
    DMDIR, FileTree, FsError, ORDWR, OWRITE, QTAUTH, QTDIR, QTFILE, Qid, Stat,
};
use toolsrv::ninep::serve_conn;

pub const STATIC: &[u8] = b"hello from a static file\n";

#[derive(Default)]
pub struct Flags {
    pub block_started: AtomicUsize,
    pub block_dropped: AtomicUsize,
    pub clunks: AtomicUsize,
    pub attached_with_auth: AtomicBool,
}

struct TestTree {
    flags: Arc<Flags>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Root,
    Static,
    Echo,
    Block,
    Auth,
}

struct Node {
    kind: Kind,
    buf: Mutex<Vec<u8>>,
}

impl Node {
    fn new(kind: Kind) -> Self {
        Node {
            kind,
            buf: Mutex::new(Vec::new()),
        }
    }
}

/// Sets a flag when the blocking read's future is dropped.
struct DropFlag(Arc<Flags>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.block_dropped.fetch_add(1, Ordering::SeqCst);
    }
}

fn slice_at(data: &[u8], offset: u64, count: u32) -> Vec<u8> {
    let start = (offset as usize).min(data.len());
    let end = (start + count as usize).min(data.len());
    data[start..end].to_vec()
}

impl FileTree for TestTree {
    type Node = Node;

    fn auth(&self, _uname: &str, _aname: &str) -> Result<Node, FsError> {
        Ok(Node::new(Kind::Auth))
    }

    fn attach(&self, auth: Option<&Node>, _uname: &str, _aname: &str) -> Result<Node, FsError> {
        if let Some(a) = auth {
            if a.buf.lock().unwrap().as_slice() != b"s3cret" {
                return Err(FsError::new("authentication failed"));
            }
            self.flags.attached_with_auth.store(true, Ordering::SeqCst);
        }
        Ok(Node::new(Kind::Root))
    }

    fn walk(&self, from: &Node, name: &str) -> Result<Node, FsError> {
        if from.kind != Kind::Root {
            return Err(FsError::new("not a directory"));
        }
        let kind = match name {
            ".." => Kind::Root,
            "static" => Kind::Static,
            "echo" => Kind::Echo,
            "block" => Kind::Block,
            _ => return Err(FsError::new(format!("'{name}' does not exist"))),
        };
        Ok(Node::new(kind))
    }

    fn clone_node(&self, node: &Node) -> Node {
        Node::new(node.kind)
    }

    fn qid(&self, node: &Node) -> Qid {
        let (ty, path) = match node.kind {
            Kind::Root => (QTDIR, 0),
            Kind::Static => (QTFILE, 1),
            Kind::Echo => (QTFILE, 2),
            Kind::Block => (QTFILE, 3),
            Kind::Auth => (QTAUTH, 4),
        };
        Qid {
            ty,
            version: 0,
            path,
        }
    }

    fn stat(&self, node: &Node) -> Result<Stat, FsError> {
        let (name, mode, length) = match node.kind {
            Kind::Root => ("/", DMDIR | 0o555, 0),
            Kind::Static => ("static", 0o444, STATIC.len() as u64),
            Kind::Echo => ("echo", 0o666, 0),
            Kind::Block => ("block", 0o444, 0),
            Kind::Auth => ("auth", 0o600, 0),
        };
        Ok(Stat {
            qid: self.qid(node),
            mode,
            length,
            name: name.into(),
            uid: "toolsrv".into(),
            gid: "toolsrv".into(),
            muid: "toolsrv".into(),
            ..Stat::default()
        })
    }

    fn open(&self, node: &Node, mode: u8) -> Result<(), FsError> {
        let write = matches!(mode & 3, OWRITE | ORDWR);
        match node.kind {
            Kind::Root | Kind::Static | Kind::Block if write => {
                Err(FsError::new("file is read-only"))
            }
            _ => Ok(()),
        }
    }

    fn readdir(&self, node: &Node) -> Result<Vec<Stat>, FsError> {
        if node.kind != Kind::Root {
            return Err(FsError::new("not a directory"));
        }
        [Kind::Block, Kind::Echo, Kind::Static]
            .into_iter()
            .map(|k| self.stat(&Node::new(k)))
            .collect()
    }

    fn read(
        &self,
        node: &Node,
        offset: u64,
        count: u32,
    ) -> impl Future<Output = Result<Vec<u8>, FsError>> + Send {
        let flags = Arc::clone(&self.flags);
        async move {
            match node.kind {
                Kind::Static => Ok(slice_at(STATIC, offset, count)),
                Kind::Echo => Ok(slice_at(&node.buf.lock().unwrap(), offset, count)),
                Kind::Auth => {
                    let secret = node.buf.lock().unwrap().clone();
                    let mut token = b"token-".to_vec();
                    token.extend_from_slice(&secret);
                    Ok(slice_at(&token, offset, count))
                }
                Kind::Block => {
                    let _guard = DropFlag(Arc::clone(&flags));
                    flags.block_started.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>().await;
                    Ok(Vec::new())
                }
                Kind::Root => Err(FsError::new("is a directory")),
            }
        }
    }

    async fn write(&self, node: &Node, offset: u64, data: Vec<u8>) -> Result<u32, FsError> {
        match node.kind {
            Kind::Echo | Kind::Auth => {
                let mut buf = node.buf.lock().unwrap();
                let off = offset as usize;
                if buf.len() < off + data.len() {
                    buf.resize(off + data.len(), 0);
                }
                buf[off..off + data.len()].copy_from_slice(&data);
                Ok(data.len() as u32)
            }
            _ => Err(FsError::new("file is read-only")),
        }
    }

    fn clunk(&self, _node: &Node) {
        self.flags.clunks.fetch_add(1, Ordering::SeqCst);
    }
}

/// A server on a Unix socket in a temp dir, running on its own runtime.
pub struct Server {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    pub flags: Arc<Flags>,
    _rt: tokio::runtime::Runtime,
}

pub fn start() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("9p.sock");
    let flags = Arc::new(Flags::default());
    let tree = Arc::new(TestTree {
        flags: Arc::clone(&flags),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = {
        let _guard = rt.enter();
        tokio::net::UnixListener::bind(&path).unwrap()
    };
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(serve_conn(Arc::clone(&tree), stream, 1 << 20));
        }
    });
    Server {
        _dir: dir,
        path,
        flags,
        _rt: rt,
    }
}

pub fn session(srv: &Server) -> Client {
    let mut c = Client::connect(&srv.path).unwrap();
    c.handshake().unwrap();
    c.attach(None, "tester", "").unwrap();
    c
}

pub fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn server_error(r: Result<impl std::fmt::Debug, ClientError>) -> String {
    match r {
        Err(ClientError::Server(e)) => e,
        other => panic!("expected an Rerror, got {other:?}"),
    }
}
