//! Sandboxed calls whose process confines itself before exec: real kernel
//! refusals, no leaks between profiles, and the server process stays unconfined.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use toolsrv::exec::{self, Call, Limits, Output};
use toolsrv::meta::Command;
use toolsrv::sandbox::{ChildPlan, ExpandContext, Profile};

const SYSTEM: &str = "  rox: [/usr, /bin, /lib, /lib64, /lib32, /libx32, /etc]\n  ro: [/proc]\n";

/// A profile whose only writable places are `{CWD}` and `extra_rw`.
fn profile(name: &str, extra_rw: &[&Path]) -> Profile {
    let mut rw = vec!["\"{CWD}\"".to_string()];
    rw.extend(extra_rw.iter().map(|p| format!("\"{}\"", p.display())));
    let yaml = format!(
        "general: {{best_effort: false}}\nfilesystem:\n{SYSTEM}  rw: [{}]\nnetwork: {{enabled: false}}\nadvanced: {{add_exec: true}}\n",
        rw.join(", ")
    );
    Profile::parse(name, Path::new("t.yaml"), &yaml).unwrap()
}

/// A directory outside every sandbox's writable set (not under /tmp, which
/// some setups make writable).
fn outside() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn env() -> Vec<(OsString, OsString)> {
    vec![("PATH".into(), "/usr/bin:/bin".into())]
}

/// Runs `script` with `/bin/sh` in `cwd` confined by `plan`; (exit code, output and result).
async fn sh(plan: &ChildPlan, cwd: &Path, script: &str) -> (Option<i32>, String) {
    let call = Call {
        tool: "t".into(),
        command: Command::Shell(script.into()),
        args: serde_json::json!({}),
        cwd: cwd.to_path_buf(),
        env: env().into(),
        timeout: Some(Duration::from_secs(20)),
        limits: Limits::default(),
        pre_exec: None,
        confine: Some(plan.clone()),
    };
    let out = Arc::new(Output::new(1 << 20));
    let o = exec::run(call, out.clone(), CancellationToken::new(), |_| {}).await;
    let err = String::from_utf8_lossy(&out.combined()).into_owned();
    (o.status.code, format!("{err} {:?}", o.result))
}

fn plan_of(p: &Profile, cwd: &Path) -> ChildPlan {
    p.prepare(
        &ExpandContext::new(cwd, std::env::vars_os()),
        Some(Path::new("/bin/sh")),
    )
    .unwrap()
    .child_plan()
}

fn status_field(path: &Path, field: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confined_children_are_refused_and_allowed_where_permitted() {
    let work = tempfile::tempdir().unwrap();
    let out = outside();
    let p = profile("strict", &[]);
    let s = plan_of(&p, work.path());
    let target = out.path().join("x");
    let (code, err) = sh(
        &s,
        work.path(),
        &format!("echo in > inside && echo out > '{}'", target.display()),
    )
    .await;
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("inside")).unwrap(),
        "in\n"
    );
    assert!(!target.exists(), "the kernel let the write through");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_used_concurrently_do_not_leak() {
    let work = tempfile::tempdir().unwrap();
    let out = outside();
    let strict = profile("strict", &[]);
    let open = profile("open", &[out.path()]);
    let (s, o) = (plan_of(&strict, work.path()), plan_of(&open, work.path()));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (plan, strict_one) = if i % 2 == 0 {
            (s.clone(), true)
        } else {
            (o.clone(), false)
        };
        let (cwd, file) = (work.path().to_path_buf(), out.path().join(format!("f{i}")));
        tasks.push(tokio::spawn(async move {
            let r = sh(&plan, &cwd, &format!("echo {i} > '{}'", file.display())).await;
            (strict_one, file, r)
        }));
    }
    for t in tasks {
        let (strict_one, file, (code, err)) = t.await.unwrap();
        if strict_one {
            assert_ne!(code, Some(0), "strict call wrote {}: {err}", file.display());
            assert!(!file.exists());
        } else {
            assert_eq!(code, Some(0), "permissive call refused: {err}");
            assert!(file.exists());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_is_confined_and_the_process_is_not() {
    let work = tempfile::tempdir().unwrap();
    let out = outside();
    let p = profile("strict", &[]);
    let s = plan_of(&p, work.path());
    let (code, text) = sh(
        &s,
        work.path(),
        "exec grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status",
    )
    .await;
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
    let (code, _) = sh(
        &s,
        work.path(),
        &format!("touch '{}'/no", out.path().display()),
    )
    .await;
    assert_ne!(code, Some(0));

    // No thread of this process got any of it.
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let status = task.unwrap().path().join("status");
        let Ok(text) = std::fs::read_to_string(&status) else {
            continue;
        };
        if text.is_empty() {
            continue;
        }
        assert_eq!(
            status_field(&status, "NoNewPrivs:"),
            "0",
            "{}",
            status.display()
        );
        assert_eq!(
            status_field(&status, "Seccomp:"),
            "0",
            "{}",
            status.display()
        );
    }
    std::fs::write(out.path().join("from-the-process"), "ok").unwrap();
    let worker = std::thread::spawn({
        let d = out.path().to_path_buf();
        move || std::fs::write(d.join("from-a-new-thread"), "ok")
    });
    worker.join().unwrap().unwrap();
}
