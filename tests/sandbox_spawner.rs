//! Sandboxed calls through restricted spawner threads: real kernel refusals,
//! no leaks between profiles, the thread's lifetime, an unconfined process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use toolsrv::exec::{self, Call, Limits, Output, Spawner};
use toolsrv::meta::Command;
use toolsrv::sandbox::{ExpandContext, Profile};

const SYSTEM: &str = "  rox: [/usr, /bin, /lib, /lib64, /lib32, /libx32, /etc]\n";

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

/// Runs `script` with `/bin/sh` in `cwd` through `spawner`; (exit code, stderr).
async fn sh(spawner: &Arc<Spawner>, cwd: &Path, script: &str) -> (Option<i32>, String) {
    let call = Call {
        tool: "t".into(),
        command: Command::Shell(script.into()),
        args: serde_json::json!({}),
        cwd: cwd.to_path_buf(),
        env: env(),
        timeout: Some(Duration::from_secs(20)),
        limits: Limits::default(),
        pre_exec: None,
        spawner: Some(spawner.clone()),
    };
    let out = Arc::new(Output::new(1 << 20));
    let o = exec::run(call, out.clone(), CancellationToken::new(), |_| {}).await;
    let err = String::from_utf8_lossy(&out.combined()).into_owned();
    (o.status.code, format!("{err} {:?}", o.result))
}

fn spawner_of(p: &Profile, cwd: &Path) -> Arc<Spawner> {
    p.prepare(
        &ExpandContext::new(cwd, std::env::vars_os()),
        Some(Path::new("/bin/sh")),
    )
    .unwrap()
    .spawner()
    .expect("a cached ruleset has a spawner")
}

fn status_field(path: &Path, field: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_children_are_confined_and_allowed_where_permitted() {
    let work = tempfile::tempdir().unwrap();
    let out = outside();
    let p = profile("strict", &[]);
    let s = spawner_of(&p, work.path());
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
    let (s, o) = (
        spawner_of(&strict, work.path()),
        spawner_of(&open, work.path()),
    );
    assert_ne!(s.tid(), 0);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (sp, strict_one) = if i % 2 == 0 {
            (s.clone(), true)
        } else {
            (o.clone(), false)
        };
        let (cwd, file) = (work.path().to_path_buf(), out.path().join(format!("f{i}")));
        tasks.push(tokio::spawn(async move {
            let r = sh(&sp, &cwd, &format!("echo {i} > '{}'", file.display())).await;
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
async fn the_process_stays_unconfined_and_the_thread_ends_with_its_entry() {
    let work = tempfile::tempdir().unwrap();
    let out = outside();
    let p = profile("strict", &[]);
    let s = spawner_of(&p, work.path());
    let (code, _) = sh(&s, work.path(), "true").await;
    assert_eq!(code, Some(0));
    let (code, _) = sh(
        &s,
        work.path(),
        &format!("touch '{}'/no", out.path().display()),
    )
    .await;
    assert_ne!(code, Some(0));

    // The restriction stayed on the spawner thread.
    let tid = s.tid();
    let task: PathBuf = format!("/proc/self/task/{tid}").into();
    assert_eq!(status_field(&task.join("status"), "NoNewPrivs:"), "1");
    assert_eq!(status_field(&task.join("status"), "Seccomp:"), "2");
    assert_eq!(
        status_field(Path::new("/proc/thread-self/status"), "NoNewPrivs:"),
        "0"
    );
    assert_eq!(
        status_field(Path::new("/proc/self/status"), "Seccomp:"),
        "0",
        "the main thread got the filter"
    );
    std::fs::write(out.path().join("from-the-process"), "ok").unwrap();
    let worker = std::thread::spawn({
        let d = out.path().to_path_buf();
        move || std::fs::write(d.join("from-a-new-thread"), "ok")
    });
    worker.join().unwrap().unwrap();

    // The thread lives as long as the cache entry or a call holds it.
    drop(s);
    assert!(task.exists(), "the cache entry still holds the spawner");
    drop(p);
    let end = Instant::now() + Duration::from_secs(10);
    while task.exists() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !task.exists(),
        "spawner thread {tid} outlived its cache entry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_that_cannot_confine_itself_starts_nothing() {
    let work = tempfile::tempdir().unwrap();
    let s = Arc::new(
        Spawner::start("t-fails", || {
            Err(std::io::Error::from_raw_os_error(libc::EPERM))
        })
        .unwrap(),
    );
    let marker = work.path().join("ran");
    let (code, err) = sh(&s, work.path(), &format!("touch '{}'", marker.display())).await;
    assert_eq!(code, None, "{err}");
    assert!(err.contains("cannot start tool"), "{err}");
    assert!(err.contains("Operation not permitted"), "{err}");
    assert!(!marker.exists());
}
