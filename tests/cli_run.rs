//! `toolsrv run`: one local call on the bundled tools, through the same
//! validation and sandbox as the server.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn run(args: &[&str], cfg: &std::path::Path) -> Output {
    Command::new(common::bin())
        .arg("run")
        .arg("--tools")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tools"))
        .args(args)
        .env("XDG_CONFIG_HOME", cfg)
        .current_dir(cfg)
        .output()
        .unwrap()
}

#[test]
fn run_prints_results_and_exit_status() {
    let cfg = tempfile::tempdir().unwrap();
    let out = run(&["echo", r#"{"text":"héllo"}"#], cfg.path());
    assert!(out.status.success(), "{out:?}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["isError"], false);
    assert_eq!(r["content"][0]["text"], "héllo\n");

    let out = run(&["--text", "echo", r#"{"text":"plain"}"#], cfg.path());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "plain\n\n");

    // A failing tool: exit status 1 and its stderr in the result.
    let out = run(&["fail", "{}"], cfg.path());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("isError\":true"));

    // Validation names the field before anything runs.
    let out = run(&["echo", r#"{"text":5}"#], cfg.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("text"),
        "{out:?}"
    );

    // A timeout dispatch field ends the call (and is not passed to the tool).
    let t0 = Instant::now();
    let out = run(
        &["sleep", r#"{"seconds":30,"timeout":"300ms"}"#],
        cfg.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("timed out"),
        "{out:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));

    // Unknown tools and bad JSON are errors with exit status 2.
    let out = run(&["nosuch"], cfg.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no tool \"nosuch\""));
    let out = run(&["echo", "{not json"], cfg.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid JSON"));
}

#[test]
fn run_is_sandboxed_unless_yolo() {
    let cfg = tempfile::tempdir().unwrap();
    let outside = common::outside_dir();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    let arg = format!(r#"{{"path":"{}"}}"#, secret.display());
    let out = run(&["file_read", &arg], cfg.path());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("top secret"), "{text}");
    assert!(text.contains("ermission denied"), "{text}");
    let out = run(&["--yolo", "file_read", &arg], cfg.path());
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("top secret"));
}
