//! What a tool finds when it starts (signals, process group, descriptors,
//! stdin), and that the spawn's errors and endings reach the result.

#[path = "fixtures/exec/helpers.rs"]
mod helpers;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use helpers::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolsrv::exec::{self, Output};
use toolsrv::meta::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_starts_with_default_signals_and_its_own_group() {
    // The test process ignores SIGPIPE (Rust does): the tool must not.
    let (o, out, pid) = run(call(
        sh(
            "read -r p c s pp g rest < /proc/$$/stat; echo \"ids $p $g\"; \
            exec grep -E '^Sig(Blk|Ign)' /proc/self/status",
        ),
        json!({}),
    ))
    .await;
    let text = String::from_utf8_lossy(&out.combined()).into_owned();
    assert!(!o.result.is_error, "{text}");
    assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
    assert!(text.contains("SigIgn:\t0000000000000000"), "{text}");
    assert!(
        text.contains(&format!("ids {pid} {pid}\n")),
        "pid {pid}: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_stdin_stdout_stderr_are_open_and_cancel_reaps() {
    let pid = Arc::new(Mutex::new(0u32));
    let p = pid.clone();
    let cancel = CancellationToken::new();
    let output = Arc::new(Output::new(1 << 16));
    let task = tokio::spawn(exec::run(
        call(sh("exec sleep 60"), json!({"x": 1})),
        output.clone(),
        cancel.clone(),
        move |id| *p.lock().unwrap() = id,
    ));
    let end = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        let id = *pid.lock().unwrap();
        if id != 0
            && std::fs::read_to_string(format!("/proc/{id}/comm"))
                .is_ok_and(|c| c.trim() == "sleep")
        {
            break id;
        }
        assert!(Instant::now() < end, "the tool never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().parse().unwrap())
        .collect();
    fds.sort();
    cancel.cancel();
    let o = task.await.unwrap();
    assert_eq!(fds, [0, 1, 2]);
    assert!(o.cancelled);
    assert_eq!(o.status.signal, Some(libc::SIGTERM));
    assert!(
        proc_state(pid).is_none(),
        "the cancelled tool was not reaped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_signals_and_large_stdin() {
    let (o, _, _) = run(call(sh("exit 3"), json!({}))).await;
    assert_eq!((o.status.code, o.status.signal), (Some(3), None));
    let (o, _, _) = run(call(sh("kill -KILL $$"), json!({}))).await;
    assert_eq!(
        (o.status.code, o.status.signal),
        (None, Some(libc::SIGKILL))
    );

    // Bigger than a pipe: written while the tool reads.
    let big = "y".repeat(300_000);
    let (o, out, _) = run(call(sh("wc -c"), json!({ "s": big }))).await;
    assert!(!o.result.is_error, "{:?}", o.result);
    let n: usize = String::from_utf8_lossy(&out.combined())
        .trim()
        .parse()
        .unwrap();
    assert_eq!(n, big.len() + r#"{"s":""}"#.len() + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_as_command_names_the_errno() {
    let (o, _, pid) = run(call(Command::Exec(PathBuf::from("/usr")), json!({}))).await;
    assert_eq!(pid, 0);
    let msg = o.result.joined_text();
    assert!(msg.contains("cannot start tool `t` (/usr"), "{msg}");
    assert!(msg.contains("Permission denied (os error 13)"), "{msg}");
}

/// Output is complete whichever way it is collected: all at once after the
/// spawn (a tool that is already done), partly then and the rest through
/// the event loop (a tool still writing), and past the 64 KiB taken at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_whole_whether_taken_at_once_or_later() {
    let cases = [
        // Done before anyone looks: both streams and the code, at once.
        ("printf out; printf err >&2; exit 4", "out", "err", 4),
        // Writes, pauses, writes again.
        (
            "printf early; sleep 0.2; printf ' late'; printf e2 >&2; exit 5",
            "early late",
            "e2",
            5,
        ),
    ];
    for (script, want_out, want_err, code) in cases {
        let (o, out, _) = run(call(sh(script), json!({}))).await;
        assert_eq!(o.status.code, Some(code), "{script}");
        assert_eq!(String::from_utf8_lossy(&out.stdout()), want_out, "{script}");
        let all = String::from_utf8_lossy(&out.combined()).into_owned();
        assert!(all.contains(want_err), "{script}: {all}");
        assert_eq!(
            all.len(),
            want_out.len() + want_err.len(),
            "{script}: {all}"
        );
    }
    // More than is read at once (64 KiB) from a tool that exits right away.
    let (o, out, _) = run(call(sh("head -c 300000 /dev/zero; exit 0"), json!({}))).await;
    assert_eq!(o.status.code, Some(0));
    assert_eq!(out.stdout().len(), 300_000);
}
