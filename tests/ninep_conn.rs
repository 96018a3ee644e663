//! End-to-end tests of the 9P connection loop: a small FileTree served over a real
//! Unix socket, driven by our blocking client, the `ninep` crate's client and raw bytes.

mod ninep_support;

use ninep_support::{STATIC, Server, server_error, session, start, wait_for};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use toolsrv::ninep::client::Client;
use toolsrv::ninep::fs::{DMDIR, ORDWR, OREAD, OWRITE, Qid, Stat};
use toolsrv::ninep::wire::{Fcall, Msg, NOFID, encode};
#[test]
fn version_negotiation() {
    let srv = start();
    let mut c = Client::connect(&srv.path).unwrap();
    // Before any version: refused.
    let e = server_error(c.rpc(Fcall::Tattach {
        fid: 0,
        afid: NOFID,
        uname: "u".into(),
        aname: "".into(),
    }));
    assert!(e.contains("Tversion"), "{e}");

    assert_eq!(
        c.version(8192, "9P2000.u").unwrap(),
        (8192, "9P2000".into())
    );
    assert_eq!(
        c.version(8192, "9P2000.L").unwrap(),
        (8192, "9P2000".into())
    );
    assert_eq!(
        c.version(1 << 24, "9P2000").unwrap(),
        (1 << 20, "9P2000".into())
    );
    assert_eq!(c.version(8192, "junk").unwrap().1, "unknown");
    // "unknown" leaves the session unestablished.
    assert!(c.attach(None, "u", "").is_err());

    // Version resets the session: fids from before are gone and clunked.
    assert_eq!(c.version(8192, "9P2000").unwrap().1, "9P2000");
    let root = c.attach(None, "u", "").unwrap();
    let fid = c.walk(root, "static").unwrap();
    let clunks_before = srv.flags.clunks.load(Ordering::SeqCst);
    c.version(8192, "9P2000").unwrap();
    assert_eq!(srv.flags.clunks.load(Ordering::SeqCst), clunks_before + 2);
    let e = server_error(c.fstat(fid));
    assert!(e.contains("unknown fid"), "{e}");
}

#[test]
fn walk_open_read_write_stat_readdir() {
    let srv = start();
    let mut c = session(&srv);
    let root = c.root().unwrap();

    let names: Vec<String> = c.ls("/").unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["block", "echo", "static"]);

    let st = c.stat("static").unwrap();
    assert_eq!(st.name, "static");
    assert_eq!(st.length, STATIC.len() as u64);
    assert_eq!(c.stat("/").unwrap().mode & DMDIR, DMDIR);

    let fid = c.walk_open("static", OREAD).unwrap();
    assert_eq!(c.read_all(fid).unwrap(), STATIC);
    assert_eq!(c.read(fid, 6, 4).unwrap(), b"from");
    // Writing a fid opened for reading is refused; opening it again is
    // allowed (clients that cache fids reopen them) and checks the new mode.
    assert!(server_error(c.write_at(fid, 0, b"x")).contains("not open for writing"));
    c.open(fid, OREAD).unwrap();
    assert_eq!(c.read(fid, 0, 6).unwrap(), b"hello ");
    // Walking an open fid onto itself is refused; to a new fid it is fine.
    assert!(
        server_error(c.rpc(Fcall::Twalk {
            fid,
            newfid: fid,
            wnames: vec![]
        }))
        .contains("open")
    );
    c.rpc(Fcall::Twalk {
        fid,
        newfid: 99,
        wnames: vec![],
    })
    .unwrap();
    assert!(server_error(c.read(99, 0, 10)).contains("not open"));
    c.clunk(99).unwrap();
    c.clunk(fid).unwrap();
    assert!(server_error(c.clunk(fid)).contains("unknown fid"));
    // Opening for writing is the tree's decision.
    assert!(server_error(c.walk_open("static", OWRITE)).contains("read-only"));

    // Write-then-read state is per fid.
    let echo = c.walk_open("echo", ORDWR).unwrap();
    assert_eq!(c.write(echo, b"ping\npong").unwrap(), 9);
    assert_eq!(c.read_all(echo).unwrap(), b"ping\npong");
    let other = c.walk_open("echo", OREAD).unwrap();
    assert_eq!(c.read_all(other).unwrap(), b"");
    c.clunk(other).unwrap();
    c.clunk(echo).unwrap();

    // Reading without opening is refused.
    let unopened = c.walk(root, "static").unwrap();
    assert!(server_error(c.read(unopened, 0, 10)).contains("not open for reading"));

    // Walk with no names clones; ".." from the root stays at the root.
    let clone = c.walk(root, "").unwrap();
    assert_eq!(c.fstat(clone).unwrap().name, "/");
    let up = c.walk(root, "../static").unwrap();
    assert_eq!(c.fstat(up).unwrap().name, "static");

    // newfid in use → error.
    let e = server_error(c.rpc(Fcall::Twalk {
        fid: root,
        newfid: clone,
        wnames: vec!["static".into()],
    }));
    assert!(e.contains("already in use"), "{e}");
    // First element fails → Rerror carrying the tree's text.
    let e = server_error(c.rpc(Fcall::Twalk {
        fid: root,
        newfid: 500,
        wnames: vec!["nope".into()],
    }));
    assert!(e.contains("'nope' does not exist"), "{e}");
    // A later element fails → partial Rwalk, newfid not created.
    let r = c
        .rpc(Fcall::Twalk {
            fid: root,
            newfid: 500,
            wnames: vec!["static".into(), "deeper".into()],
        })
        .unwrap();
    match r {
        Fcall::Rwalk { wqids } => {
            assert_eq!(wqids.len(), 1);
            assert_eq!(wqids[0].path, 1);
        }
        other => panic!("{other:?}"),
    }
    assert!(server_error(c.fstat(500)).contains("unknown fid"));
    // Walking a fid onto itself replaces it.
    let me = c.walk(root, "").unwrap();
    c.rpc(Fcall::Twalk {
        fid: me,
        newfid: me,
        wnames: vec!["echo".into()],
    })
    .unwrap();
    assert_eq!(c.fstat(me).unwrap().name, "echo");

    // Directory reads pack whole entries and must continue where they ended.
    let dir = c.walk_open("", OREAD).unwrap();
    let one_entry = c.read(dir, 0, 80).unwrap();
    let stats = toolsrv::ninep::wire::decode_stats(&one_entry).unwrap();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].name, "block");
    let e = server_error(c.read(dir, 3, 1000));
    assert!(e.contains("offset"), "{e}");
    let rest = c.read(dir, one_entry.len() as u64, 1000).unwrap();
    let names: Vec<_> = toolsrv::ninep::wire::decode_stats(&rest)
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["echo", "static"]);
    assert!(
        c.read(dir, (one_entry.len() + rest.len()) as u64, 1000)
            .unwrap()
            .is_empty()
    );
    assert!(server_error(c.read(dir, 0, 10)).contains("too small"));
    // Offset 0 restarts.
    assert_eq!(c.read(dir, 0, 80).unwrap(), one_entry);
}

#[test]
fn auth_fid_is_read_and_written_without_open() {
    let srv = start();
    let mut c = Client::connect(&srv.path).unwrap();
    c.handshake().unwrap();
    let (afid, token) = c.authenticate("agent", "", b"s3cret").unwrap();
    assert_eq!(token, "token-s3cret");
    let qid_e = server_error(c.rpc(Fcall::Twalk {
        fid: afid,
        newfid: 77,
        wnames: vec![],
    }));
    assert!(qid_e.contains("authentication fid"), "{qid_e}");
    c.attach(Some(afid), "agent", "").unwrap();
    assert!(srv.flags.attached_with_auth.load(Ordering::SeqCst));

    // An afid that is not an auth fid, or does not exist, is refused.
    let root = c.root().unwrap();
    let e = server_error(c.rpc(Fcall::Tattach {
        fid: 300,
        afid: root,
        uname: "x".into(),
        aname: "".into(),
    }));
    assert!(e.contains("not an authentication fid"), "{e}");
    let e = server_error(c.rpc(Fcall::Tattach {
        fid: 300,
        afid: 12345,
        uname: "x".into(),
        aname: "".into(),
    }));
    assert!(e.contains("unknown fid"), "{e}");
    // A wrong secret: the tree's refusal reaches the client.
    let bad = c.auth("agent", "").unwrap();
    c.write(bad, b"wrong").unwrap();
    let e = server_error(c.attach(Some(bad), "agent", ""));
    assert_eq!(e, "authentication failed");
}

#[test]
fn flush_aborts_a_blocked_read() {
    let srv = start();
    let mut c = session(&srv);
    let fid = c.walk_open("block", OREAD).unwrap();
    let read_tag = c
        .send(Fcall::Tread {
            fid,
            offset: 0,
            count: 100,
        })
        .unwrap();
    wait_for("the blocking read to start", || {
        srv.flags.block_started.load(Ordering::SeqCst) == 1
    });
    // The connection keeps serving other requests meanwhile.
    assert_eq!(c.stat("static").unwrap().name, "static");

    // A duplicate tag while the read is in flight is refused.
    c.send_tagged(read_tag, Fcall::Tstat { fid }).unwrap();
    let dup = c.recv().unwrap();
    assert_eq!(dup.tag, read_tag);
    match dup.body {
        Fcall::Rerror { ename } => assert!(ename.contains("already in use"), "{ename}"),
        other => panic!("{other:?}"),
    }

    let flush_tag = c.send(Fcall::Tflush { oldtag: read_tag }).unwrap();
    let reply = c.recv().unwrap();
    assert_eq!(
        reply,
        Msg {
            tag: flush_tag,
            body: Fcall::Rflush
        }
    );
    // The read's future was dropped before Rflush was sent.
    assert_eq!(srv.flags.block_dropped.load(Ordering::SeqCst), 1);

    // No reply for the flushed tag ever arrives: the next message is our clunk's.
    let clunk_tag = c.send(Fcall::Tclunk { fid }).unwrap();
    assert_eq!(
        c.recv().unwrap(),
        Msg {
            tag: clunk_tag,
            body: Fcall::Rclunk
        }
    );
    // Flushing a tag that is not in flight is just Rflush.
    let t = c.send(Fcall::Tflush { oldtag: 4242 }).unwrap();
    assert_eq!(
        c.recv().unwrap(),
        Msg {
            tag: t,
            body: Fcall::Rflush
        }
    );
}

#[test]
fn clunk_from_another_thread_aborts_a_blocked_read() {
    let srv = start();
    let mut c = session(&srv);
    let fid = c.walk_open("block", OREAD).unwrap();
    let clunks_before = srv.flags.clunks.load(Ordering::SeqCst);
    let interrupter = c.interrupter();
    let flags = Arc::clone(&srv.flags);
    let t = std::thread::spawn(move || {
        wait_for("the blocking read to start", || {
            flags.block_started.load(Ordering::SeqCst) == 1
        });
        interrupter.clunk(fid).unwrap();
    });
    let e = server_error(c.read(fid, 0, 100));
    assert_eq!(e, "cancelled: fid clunked");
    t.join().unwrap();
    assert_eq!(srv.flags.block_dropped.load(Ordering::SeqCst), 1);
    // The interrupter's Rclunk is skipped; the connection goes on.
    assert_eq!(c.stat("static").unwrap().name, "static");
    assert!(srv.flags.clunks.load(Ordering::SeqCst) > clunks_before);
    assert!(server_error(c.fstat(fid)).contains("unknown fid"));
}

#[test]
fn connection_end_cancels_reads_and_clunks_fids() {
    let srv = start();
    let mut c = session(&srv);
    let fid = c.walk_open("block", OREAD).unwrap();
    c.walk(c.root().unwrap(), "static").unwrap();
    c.send(Fcall::Tread {
        fid,
        offset: 0,
        count: 10,
    })
    .unwrap();
    wait_for("the blocking read to start", || {
        srv.flags.block_started.load(Ordering::SeqCst) == 1
    });
    drop(c);
    wait_for("the read to be dropped", || {
        srv.flags.block_dropped.load(Ordering::SeqCst) == 1
    });
    // root, block, static
    wait_for("every fid to be clunked", || {
        srv.flags.clunks.load(Ordering::SeqCst) == 3
    });
}

#[test]
fn create_remove_wstat_are_refused() {
    let srv = start();
    let mut c = session(&srv);
    let root = c.root().unwrap();
    let e = server_error(c.rpc(Fcall::Tcreate {
        fid: root,
        name: "new".into(),
        perm: 0o644,
        mode: OWRITE,
    }));
    assert!(e.contains("cannot create files"), "{e}");

    let fid = c.walk(root, "static").unwrap();
    let noop = Stat {
        ty: u16::MAX,
        dev: u32::MAX,
        qid: Qid {
            ty: u8::MAX,
            version: u32::MAX,
            path: u64::MAX,
        },
        mode: u32::MAX,
        atime: u32::MAX,
        mtime: u32::MAX,
        length: u64::MAX,
        ..Stat::default()
    };
    assert_eq!(
        c.rpc(Fcall::Twstat {
            fid,
            stat: noop.clone()
        })
        .unwrap(),
        Fcall::Rwstat
    );
    let e = server_error(c.rpc(Fcall::Twstat {
        fid,
        stat: Stat { length: 0, ..noop },
    }));
    assert!(e.contains("cannot change file attributes"), "{e}");

    let e = server_error(c.rpc(Fcall::Tremove { fid }));
    assert!(e.contains("cannot remove"), "{e}");
    // Tremove clunks the fid even though it fails.
    assert!(server_error(c.fstat(fid)).contains("unknown fid"));
    // R-messages from a client are refused, not fatal.
    let e = server_error(c.rpc(Fcall::Rclunk));
    assert!(e.contains("unexpected Rclunk"), "{e}");
    assert_eq!(c.stat("static").unwrap().name, "static");
}

/// Sends `garbage` after a good Tversion and expects the server to close the connection.
fn assert_closed_after(srv: &Server, garbage: &[u8]) {
    let mut s = UnixStream::connect(&srv.path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let tv = encode(&Msg {
        tag: u16::MAX,
        body: Fcall::Tversion {
            msize: 8192,
            version: "9P2000".into(),
        },
    })
    .unwrap();
    s.write_all(&tv).unwrap();
    let mut rv = [0u8; 19];
    s.read_exact(&mut rv).unwrap();
    assert_eq!(rv[4], 101, "Rversion");
    s.write_all(garbage).unwrap();
    let mut rest = Vec::new();
    // EOF (Ok) or a reset: either way the server closed it, with nothing sent.
    match s.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "unexpected reply {rest:?}"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let srv = start();
    let mut good = session(&srv);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("size below header", vec![3, 0, 0, 0, 120, 1, 0]),
        (
            "size above msize",
            [0x00u8, 0x00, 0x10, 0x00, 120, 1, 0].to_vec(),
        ),
        // Tclunk whose fid is cut short (size consistent with the bytes sent).
        ("truncated body", vec![9, 0, 0, 0, 120, 1, 0, 7, 0]),
        ("unknown type", vec![11, 0, 0, 0, 200, 1, 0, 0, 0, 0, 0]),
        ("Terror", vec![7, 0, 0, 0, 106, 1, 0]),
        (
            "trailing bytes",
            vec![12, 0, 0, 0, 120, 1, 0, 0, 0, 0, 0, 9],
        ),
        (
            "bad utf-8",
            vec![16, 0, 0, 0, 102, 1, 0, 1, 0, 0, 0, 1, 0, 0xff, 0, 0],
        ),
        ("17 walk names", {
            let mut b = vec![0, 0, 0, 0, 110, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 17, 0];
            for _ in 0..17 {
                b.extend_from_slice(&[1, 0, b'a']);
            }
            let n = b.len() as u32;
            b[..4].copy_from_slice(&n.to_le_bytes());
            b
        }),
    ];
    for (what, bytes) in cases {
        eprintln!("case: {what}");
        assert_closed_after(&srv, &bytes);
        // The other connection is untouched.
        assert_eq!(good.stat("static").unwrap().name, "static", "after {what}");
    }
}

#[test]
fn ninep_crate_client_interoperates() {
    let srv = start();
    let c =
        ninep::sync::client::Client::new_unix_with_explicit_path("tester", &srv.path, "").unwrap();
    let mut names: Vec<String> = c
        .read_dir("/")
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.sort();
    assert_eq!(names, ["block", "echo", "static"]);
    assert_eq!(c.read_str("static").unwrap().as_bytes(), STATIC);
    c.clunk_path("static").unwrap();
    assert_eq!(c.read_from("static", 6, 4).unwrap(), b"from");
    c.clunk_path("static").unwrap();
    let st = c.stat("static").unwrap();
    assert_eq!(st.name, "static");
    assert_eq!(st.n_bytes, STATIC.len() as u64);
    c.clunk_path("static").unwrap();
    assert_eq!(c.write("echo", 0, b"hi there").unwrap(), 8);
    c.clunk_path("echo").unwrap();
    // The ninep client reopens the fid it cached for a path; that works.
    assert_eq!(c.read("static").unwrap(), STATIC);
    assert_eq!(c.read("static").unwrap(), STATIC);
    c.clunk_path("static").unwrap();

    let e = c
        .create("/", "new", ninep::fs::Perm::FILE, ninep::fs::Mode::WRITE)
        .unwrap_err();
    assert!(e.to_string().contains("cannot create files"), "{e}");
    let e = c.remove("echo").unwrap_err();
    assert!(e.to_string().contains("cannot remove"), "{e}");
}
