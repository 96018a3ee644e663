//! After a batch of calls ending every way there is (success, failure,
//! spawn error, timeout, cancel, dropped future), this process has no
//! children left: every child was reaped. Alone in its binary so that no
//! other test's children are around when `waitpid(-1)` is asked.

#[path = "fixtures/exec/helpers.rs"]
mod helpers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use helpers::*;
use rustix::process::{WaitOptions, wait};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolsrv::exec::{self, Limits, Output};
use toolsrv::meta::Command;

fn quick(script: &str) -> toolsrv::exec::Call {
    let mut c = call(sh(script), json!({"k": "v"}));
    c.limits = Limits {
        kill_grace: Duration::from_millis(200),
        ..Limits::default()
    };
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_of_calls_leaves_no_zombies() {
    let mut calls = Vec::new();
    for i in 0..10 {
        calls.push(tokio::spawn(run(quick(&format!("cat; echo {i}")))));
        calls.push(tokio::spawn(run(quick("echo oops >&2; exit 2"))));
        calls.push(tokio::spawn(run(quick("sleep 1000 & echo bg"))));
    }
    calls.push(tokio::spawn(run(call(
        Command::Exec(PathBuf::from("/nonexistent")),
        json!({}),
    ))));
    let mut t = quick("trap '' TERM; sleep 1000");
    t.timeout = Some(Duration::from_millis(200));
    calls.push(tokio::spawn(run(t)));
    for c in calls {
        c.await.unwrap();
    }

    // Cancelled by token.
    let cancel = CancellationToken::new();
    let output = Arc::new(Output::new(1024));
    let task = tokio::spawn(exec::run(
        quick("echo up; sleep 1000"),
        output.clone(),
        cancel.clone(),
        |_| {},
    ));
    wait_for_line(&output, "up").await;
    assert!(
        !children().is_empty(),
        "the /proc child scan sees a running call"
    );
    cancel.cancel();
    assert!(task.await.unwrap().cancelled);

    // Dropped mid-run.
    for _ in 0..3 {
        let output = Arc::new(Output::new(1024));
        let fut = exec::run(
            quick("echo up; sleep 1000"),
            output.clone(),
            CancellationToken::new(),
            |_| {},
        );
        tokio::select! {
            _ = fut => panic!("ended by itself"),
            () = wait_for_line(&output, "up") => {}
        }
    }

    // Dropped calls are reaped by their cleanup tasks within the grace:
    // wait for our children list to empty (without reaping anything here).
    let end = Instant::now() + Duration::from_secs(5);
    while !children().is_empty() {
        assert!(
            Instant::now() < end,
            "children left: {:?}, zombies among them: {:?}",
            children(),
            zombie_children()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(zombie_children(), Vec::<u32>::new());
    match wait(WaitOptions::NOHANG) {
        Err(e) => assert_eq!(e, rustix::io::Errno::CHILD),
        Ok(r) => panic!("a child was left: {r:?}"),
    }
}
