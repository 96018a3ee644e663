//! Ending calls: timeout, cancellation by token and dropping the `run`
//! future all end the whole process group, including members ignoring SIGTERM.

#[path = "fixtures/exec/helpers.rs"]
mod helpers;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use helpers::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolsrv::exec::{self, Limits, Output};

const GRACE: Duration = Duration::from_millis(300);

fn limits() -> Limits {
    Limits {
        kill_grace: GRACE,
        ..Limits::default()
    }
}

fn stubborn(quiet: bool) -> toolsrv::exec::Call {
    let script = format!(
        "exec '{}' {}",
        fixture("stubborn").display(),
        if quiet { "quiet" } else { "" }
    );
    let mut c = call(sh(&script), json!({}));
    c.limits = limits();
    c
}

async fn check_timeout(quiet: bool) {
    let timeout = Duration::from_millis(400);
    let mut c = stubborn(quiet);
    c.timeout = Some(timeout);
    let t0 = Instant::now();
    let (o, out, pid) = run(c).await;
    let took = t0.elapsed();
    // The group is checked right away: `run` returns only once it is gone.
    assert_eq!(live_members(pid), Vec::<u32>::new(), "group {pid} left");
    let gc = grandchild_pid(&out).expect("grandchild pid printed");
    assert!(!alive(gc), "grandchild {gc} survived");
    assert!(o.timed_out && !o.cancelled);
    assert!(o.result.is_error);
    let msg = o.result.joined_text();
    assert!(msg.contains("timed out after 0.4s"), "{msg}");
    assert!(msg.contains("grandchild"), "output so far is shown: {msg}");
    assert!(took >= timeout, "{took:?}");
    assert!(
        took < timeout + GRACE + Duration::from_secs(3),
        "took {took:?}"
    );
}

#[tokio::test]
async fn timeout_kills_group_including_term_ignoring_grandchild() {
    check_timeout(false).await;
}

#[tokio::test]
async fn timeout_kills_term_ignoring_grandchild_that_left_the_pipes() {
    check_timeout(true).await;
}

#[tokio::test]
async fn default_timeout_applies() {
    let mut c = call(sh("sleep 1000"), json!({}));
    c.limits = Limits {
        default_timeout: Duration::from_millis(200),
        ..limits()
    };
    let (o, _, pid) = run(c).await;
    assert!(o.timed_out);
    assert_eq!(o.status.signal, Some(15), "sleep dies of SIGTERM");
    assert!(live_members(pid).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_token_kills_group() {
    let output = Arc::new(Output::new(1 << 20));
    let cancel = CancellationToken::new();
    let pid = Arc::new(Mutex::new(0));
    let p = pid.clone();
    let task = tokio::spawn(exec::run(
        stubborn(false),
        output.clone(),
        cancel.clone(),
        move |id| *p.lock().unwrap() = id,
    ));
    wait_for_line(&output, "grandchild ").await;
    let gc = grandchild_pid(&output).unwrap();
    assert!(alive(gc));
    let t0 = Instant::now();
    cancel.cancel();
    let o = task.await.unwrap();
    let pid = *pid.lock().unwrap();
    assert_eq!(live_members(pid), Vec::<u32>::new());
    assert!(!alive(gc));
    assert!(o.cancelled && !o.timed_out);
    assert!(o.result.is_error);
    assert!(o.result.joined_text().contains("cancelled"));
    assert!(t0.elapsed() < GRACE + Duration::from_secs(3));
    assert!(output.is_finished());
}

#[tokio::test]
async fn cancelled_before_start_runs_nothing() {
    let cancel = CancellationToken::new();
    cancel.cancel();
    let output = Arc::new(Output::new(1024));
    let mut spawned = false;
    let o = exec::run(call(sh("echo hi"), json!({})), output, cancel, |_| {
        spawned = true
    })
    .await;
    assert!(!spawned);
    assert!(o.cancelled && o.result.is_error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_future_kills_group() {
    let output = Arc::new(Output::new(1 << 20));
    let pid = Arc::new(Mutex::new(0));
    let p = pid.clone();
    let fut = exec::run(
        stubborn(false),
        output.clone(),
        CancellationToken::new(),
        move |id| *p.lock().unwrap() = id,
    );
    let out2 = output.clone();
    // Runs until the grandchild is up, then drops the call future.
    tokio::select! {
        _ = fut => panic!("call ended by itself"),
        () = wait_for_line(&out2, "grandchild ") => {}
    }
    let pid = *pid.lock().unwrap();
    let gc = grandchild_pid(&output).unwrap();
    assert!(pid > 0);
    let left = wait_group_gone(pid, GRACE + Duration::from_secs(3)).await;
    assert_eq!(left, Vec::<u32>::new(), "group {pid} left after drop");
    assert!(!alive(gc));
    // The main process is reaped by the cleanup task, not left a zombie.
    let end = Instant::now() + Duration::from_secs(3);
    while proc_state(pid).is_some() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(proc_state(pid), None, "main process {pid} not reaped");
}
