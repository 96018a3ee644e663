//! End-to-end tests of `exec::run` with real processes: results, the I/O
//! contract, environment, spawn errors, pre-exec hooks and streaming output.

#[path = "fixtures/exec/helpers.rs"]
mod helpers;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use helpers::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolsrv::exec::{self, Output};
use toolsrv::meta::Command;
use toolsrv::protocol::Content;

#[tokio::test]
async fn success_returns_stdout_and_args_arrive_on_stdin() {
    let args = json!({"path": "/tmp/x", "n": 3, "nested": {"ok": true}});
    let (o, out, pid) = run(call(Command::Exec(fixture("echo_args")), args.clone())).await;
    assert!(!o.result.is_error, "{:?}", o.result);
    assert!(pid > 0);
    assert_eq!(o.status.code, Some(0));
    assert!(!o.timed_out && !o.cancelled && !o.truncated);
    let text = o.result.joined_text();
    let echoed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(echoed, args);
    assert!(out.is_finished());
}

#[tokio::test]
async fn nonzero_exit_is_error_with_stdout_stderr_and_code() {
    let (o, _, _) = run(call(
        sh("echo to-stdout; echo to-stderr >&2; exit 3"),
        json!({}),
    ))
    .await;
    assert!(o.result.is_error);
    assert_eq!(o.status.code, Some(3));
    let msg = o.result.joined_text();
    assert!(msg.contains("exit status 3"), "{msg}");
    assert!(
        msg.contains("to-stdout") && msg.contains("to-stderr"),
        "{msg}"
    );
}

#[tokio::test]
async fn death_by_signal_is_reported() {
    let (o, _, _) = run(call(sh("kill -KILL $$"), json!({}))).await;
    assert!(o.result.is_error);
    assert_eq!(o.status.signal, Some(9));
    assert_eq!(o.status.code, None);
    assert!(o.result.joined_text().contains("SIGKILL"), "{:?}", o.result);
}

#[tokio::test]
async fn content_array_passes_through_with_image() {
    let (o, _, _) = run(call(Command::Exec(fixture("image_tool")), json!({}))).await;
    assert!(!o.result.is_error, "{:?}", o.result);
    assert_eq!(o.result.content.len(), 2, "{:?}", o.result);
    assert_eq!(
        o.result.content[0],
        Content::Text {
            text: "a picture".into()
        }
    );
    assert_eq!(
        o.result.content[1],
        Content::Image {
            data: "iVBORw0KGgo=".into(),
            mime_type: "image/png".into()
        }
    );
    let wire = serde_json::to_string(&o.result).unwrap();
    assert!(wire.contains(r#""mimeType":"image/png""#), "{wire}");

    // A structured result may flag itself as an error.
    let (o, _, _) = run(call(
        sh(r#"echo '{"content":[{"type":"text","text":"nope"}],"isError":true}'"#),
        json!({}),
    ))
    .await;
    assert!(o.result.is_error);
    assert_eq!(o.result.joined_text(), "nope");

    // A JSON object without `content` is just text.
    let (o, _, _) = run(call(sh(r#"echo '{"x":1}'"#), json!({}))).await;
    assert!(!o.result.is_error);
    assert_eq!(o.result.joined_text(), "{\"x\":1}\n");
}

#[tokio::test]
async fn tool_that_ignores_stdin_is_fine_even_with_big_args() {
    // 1 MiB of arguments does not fit a pipe: the writer meets EPIPE.
    let big = "x".repeat(1 << 20);
    let (o, _, _) = run(call(sh("echo ignored"), json!({ "blob": big }))).await;
    assert!(!o.result.is_error, "{:?}", o.result);
    assert_eq!(o.result.joined_text(), "ignored\n");
}

#[tokio::test]
async fn big_args_echoed_back_do_not_deadlock() {
    let big = "y".repeat(1 << 20);
    let args = json!({ "blob": big });
    let expected = serde_json::to_vec(&args).unwrap().len() as u64 + 1;
    let (o, out, _) = run(call(Command::Exec(fixture("echo_args")), args)).await;
    assert!(!o.result.is_error);
    assert_eq!(out.stdout_total_bytes(), expected);
    assert!(!o.truncated);
    let text = o.result.joined_text();
    assert!(text.len() < 33 << 10, "model text not cut: {}", text.len());
    assert!(
        text.contains("more bytes not shown"),
        "{}",
        &text[text.len() - 100..]
    );
}

#[tokio::test]
async fn environment_is_exactly_what_the_call_gives() {
    let mut c = call(sh("env"), json!({}));
    c.cwd = std::env::temp_dir();
    c.env = exec::tool_env(
        &vec![("PATH".into(), "/usr/bin:/bin".into())].into(),
        "/a:/b",
        &c.cwd,
        Some("sess-1"),
        Some("agent-7"),
    );
    let (o, _, _) = run(c).await;
    let text = o.result.joined_text();
    assert!(text.contains("OLLIE_TOOLS_PATH=/a:/b"), "{text}");
    assert!(text.contains("OLLIE_SESSION_ID=sess-1"), "{text}");
    assert!(text.contains("OLLIE_AGENT_ID=agent-7"), "{text}");
    let tmp = std::env::temp_dir();
    assert!(text.contains(&format!("PWD={}", tmp.display())), "{text}");
    // Nothing leaks from this process's environment.
    assert!(!text.contains("CARGO"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("HOME=")), "{text}");
}

#[tokio::test]
async fn runs_in_cwd_and_own_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = call(sh("pwd; cut -d' ' -f5 /proc/$$/stat"), json!({}));
    c.cwd = dir.path().to_path_buf();
    let (o, _, pid) = run(c).await;
    let text = o.result.joined_text();
    let mut lines = text.lines();
    let cwd = PathBuf::from(lines.next().unwrap());
    assert_eq!(
        cwd.canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
    let pgid: u32 = lines.next().unwrap().parse().unwrap();
    assert_eq!(pgid, pid, "the tool leads its own process group");
}

#[tokio::test]
async fn spawn_errors_are_error_results() {
    let (o, _, pid) = run(call(
        Command::Exec(PathBuf::from("/nonexistent/tool")),
        json!({}),
    ))
    .await;
    assert!(o.result.is_error);
    assert_eq!(pid, 0, "on_spawn must not run when spawn fails");
    let msg = o.result.joined_text();
    assert!(msg.contains("/nonexistent/tool"), "{msg}");
    assert!(msg.contains("No such file"), "{msg}");

    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("not_exec");
    std::fs::write(&tool, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (o, _, _) = run(call(Command::Exec(tool), json!({}))).await;
    assert!(o.result.is_error);
    assert!(
        o.result.joined_text().contains("Permission denied"),
        "{:?}",
        o.result
    );

    let mut c = call(sh("echo hi"), json!({}));
    c.cwd = PathBuf::from("/nonexistent/dir");
    let (o, _, _) = run(c).await;
    assert!(o.result.is_error);
    assert!(
        o.result.joined_text().contains("/nonexistent/dir"),
        "{:?}",
        o.result
    );
}

#[tokio::test]
async fn pre_exec_hook_runs_in_the_child_and_can_refuse() {
    let mut c = call(sh("umask"), json!({}));
    c.pre_exec = Some(Box::new(|| {
        rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
        Ok(())
    }));
    let (o, _, _) = run(c).await;
    assert_eq!(o.result.joined_text().trim(), "0077", "{:?}", o.result);

    let mut c = call(sh("echo should-not-run"), json!({}));
    c.pre_exec = Some(Box::new(|| {
        Err(std::io::Error::from_raw_os_error(libc::EPERM))
    }));
    let (o, out, _) = run(c).await;
    assert!(o.result.is_error);
    assert!(out.is_empty());
    assert!(
        o.result.joined_text().contains("not permitted"),
        "{:?}",
        o.result
    );
}

#[tokio::test]
async fn output_streams_to_readers_while_running() {
    let output = Arc::new(Output::new(1 << 20));
    let c = call(sh("echo first; sleep 0.3; echo second"), json!({}));
    let task = tokio::spawn(exec::run(
        c,
        output.clone(),
        CancellationToken::new(),
        |_| {},
    ));
    assert!(output.wait_beyond(0).await);
    assert_eq!(output.snapshot(0, 100), b"first\n");
    assert!(!output.is_finished());
    let o = task.await.unwrap();
    assert_eq!(o.result.joined_text(), "first\nsecond\n");
    assert!(output.is_finished());
    assert!(!output.wait_beyond(13).await);
}

#[tokio::test]
async fn background_grandchild_holding_stdout_does_not_block_the_call() {
    let t0 = Instant::now();
    let (o, _, pid) = run(call(sh("sleep 1000 & echo done"), json!({}))).await;
    assert!(!o.result.is_error, "{:?}", o.result);
    assert_eq!(o.result.joined_text(), "done\n");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(live_members(pid), Vec::<u32>::new());
}

#[tokio::test]
async fn daemon_that_detaches_from_the_pipes_is_left_alone() {
    let (o, out, pid) = run(call(
        sh("sleep 1000 </dev/null >/dev/null 2>&1 & echo \"grandchild $!\""),
        json!({}),
    ))
    .await;
    assert!(!o.result.is_error);
    let gc = grandchild_pid(&out).unwrap();
    assert!(alive(gc), "a detached daemon may outlive its call");
    assert_eq!(live_members(pid), vec![gc]);
    rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
}

#[tokio::test]
async fn non_utf8_output_is_lossy() {
    let (o, _, _) = run(call(sh(r"printf 'a\377b'"), json!({}))).await;
    assert_eq!(o.result.joined_text(), "a\u{fffd}b");
}
