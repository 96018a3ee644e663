//! End-to-end: a background call's completion arrives as a write to the
//! agent's prompt file on a 9P server this project did not write (the
//! `ninep` crate's in-memory server).

mod common;

use std::time::Duration;

use common::{TestServer, eventually};
use ninep::fs::{FileType, Perm};
use ninep::sansio::server::Server;
use ninep::sync::client::Client;
use ninep::util::ram::RamFs;
use serde_json::Map;
use toolsrv::client::Session;

#[test]
fn background_completion_is_written_to_the_prompt_file() {
    let dir = tempfile::tempdir().unwrap();
    let ollie = dir.path().join("ollie.sock");
    let fs = RamFs::new("ollie", "ollie");
    let tree = fs.file_tree();
    let d = Perm::DIRECTORY | Perm::any_read() | Perm::any_write() | Perm::any_exec();
    let mut parent = 0;
    for name in ["session", "s1", "agent", "a1"] {
        parent = tree
            .try_add_node(parent, name, d, FileType::DIRECTORY, Vec::new())
            .unwrap()
            .path;
    }
    tree.try_add_node(
        parent,
        "prompt",
        Perm::any_read() | Perm::any_write(),
        FileType::FILE,
        Vec::new(),
    )
    .unwrap();
    let _h = Server::new(fs).serve_socket_with_custom_path(ollie.clone());
    assert!(eventually(Duration::from_secs(5), || ollie.exists()));
    let peer = Client::new_unix_with_explicit_path("ollie", &ollie, "").unwrap();

    let target = format!("unix!{}", ollie.display());
    let s = TestServer::start(&["--notify", &target]);
    let mut c = Session::connect_with_secret(&s.socket, Some(b"k")).unwrap();
    c.write("ctl", b"load a1 fail").unwrap();
    let payload = format!(
        "token={}\ntool=fail\nagent=a1\nsession=s1\n",
        c.token.clone().unwrap()
    );
    let pid = String::from_utf8(c.rdwr("proc/new.bg", payload.as_bytes()).unwrap()).unwrap();
    let pid = pid.trim();

    let mut text = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            text = peer
                .read_str("session/s1/agent/a1/prompt")
                .unwrap_or_default();
            !text.is_empty()
        }),
        "no completion message; server log:\n{}",
        s.log_text()
    );
    assert!(
        text.contains(&format!(
            "Background process {pid} (fail) exited with code 3"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("proc/{pid}/out")), "{text}");

    // A call without a session is not announced; an unreachable target is
    // retried, logged, and the server keeps serving.
    let _ = c.call_bg("a1", "fail", &Map::new(), None).unwrap();
    drop(peer);
    drop(_h);
    std::fs::remove_file(&ollie).unwrap();
    let pid2 = String::from_utf8(c.rdwr("proc/new.bg", payload.as_bytes()).unwrap()).unwrap();
    assert!(eventually(Duration::from_secs(10), || s
        .log_text()
        .contains("could not be delivered")));
    assert!(c.read(&format!("proc/{}/stat", pid2.trim())).is_ok());
}
