//! 200 concurrent clients each making 20 calls: every result matches its
//! request, none is lost and no process is left behind.

mod common;

use std::time::Duration;

use common::TestServer;
use serde_json::{Map, Value, json};
use toolsrv::client::Session;

#[test]
fn two_hundred_clients_twenty_calls_each() {
    let s = TestServer::start(&[]);
    {
        let mut c = Session::connect_with_secret(&s.socket, Some(b"k")).unwrap();
        c.write("ctl", b"load load echo").unwrap();
    }
    let socket = s.socket.clone();
    let threads: Vec<_> = (0..200)
        .map(|i| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut c = Session::connect_with_secret(&socket, Some(b"k")).unwrap();
                for j in 0..20 {
                    let want = json!({"text": format!("client {i} call {j}")});
                    let args: Map<String, Value> = want.as_object().cloned().unwrap();
                    let r = c.call("load", "echo", &args, None).unwrap();
                    assert!(!r.is_error, "{r:?}");
                    let got: Value = serde_json::from_str(&r.joined_text()).unwrap();
                    assert_eq!(got, want);
                }
                20
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 4000);

    // Every call is accounted for and none is still running.
    let mut c = Session::connect_with_secret(&s.socket, Some(b"k")).unwrap();
    let list: Vec<Value> = serde_json::from_slice(&c.rdwr("proc/list", b"load").unwrap()).unwrap();
    assert_eq!(list.len(), 4000);
    assert!(
        list.iter()
            .all(|p| p["state"] == "exited" && p["exit_code"] == 0)
    );
    // No child of the server remains.
    let server = s.pid();
    assert!(common::eventually(Duration::from_secs(5), || {
        common::children(server).is_empty()
    }));
}
