//! End-to-end: Landlock availability guard, environment filtering, the
//! default profile, best_effort refusal, profile errors, validation, scoping.

mod sandbox_common;

use sandbox_common::{World, py, stdout};

/// Fails (never skips) when the kernel cannot enforce: the suite must not
/// pass by quietly running unconfined.
#[test]
fn sandbox_landlock_available() {
    let info = toolsrv::sandbox::enforcement_available()
        .unwrap_or_else(|e| panic!("Landlock must be available for these tests: {e}"));
    assert!(
        info.abi >= 6,
        "need Landlock ABI >= 6 (scoping), kernel offers {info}"
    );
}

#[test]
fn unlisted_env_vars_do_not_reach_the_tool() {
    let w = World::new();
    w.py_profile("p", &[], "env: [ALLOWED_VAR]\n");
    let body = "for k in sorted(os.environ): print(k + '=' + os.environ[k])";
    let out = w.exec(
        "p",
        &py(&w, body),
        &[
            ("ALLOWED_VAR", "yes"),
            ("SECRET_TOKEN", "hunter2"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("OLLIE_SESSION_ID", "sess-1"),
            ("OLLIE_BYPASS_SOCKET", "/run/b.sock"),
        ],
    );
    let text = stdout(&out);
    assert!(text.contains("ALLOWED_VAR=yes"), "{text}");
    assert!(text.contains("OLLIE_SESSION_ID=sess-1"), "{text}");
    assert!(text.contains("OLLIE_BYPASS_SOCKET=/run/b.sock"), "{text}");
    assert!(
        text.contains(&format!("HOME={}", w.home.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("PWD={}", w.work.display())),
        "{text}"
    );
    assert!(text.contains("PATH="), "{text}");
    assert!(
        !text.contains("hunter2") && !text.contains("SECRET_TOKEN"),
        "{text}"
    );
    assert!(!text.contains("AWS_SECRET_ACCESS_KEY"), "{text}");
}

#[test]
fn default_profile_is_written_and_keeps_tools_working() {
    let w = World::new();
    let argv: Vec<std::ffi::OsString> = [
        "sh",
        "-c",
        "echo made > out.txt && cat out.txt && ls /usr >/dev/null && echo listed; \
         cat \"$HOME/.ssh/id_secret\" 2>/dev/null || echo secret-refused",
    ]
    .map(Into::into)
    .to_vec();
    let out = w.exec("default", &argv, &[]);
    // (the default profile grants /tmp and $TMPDIR; the world is normally under target/)
    let tmp = std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into());
    let under_tmp = w.root.path().starts_with("/tmp") || w.root.path().starts_with(&tmp);
    let expected = if under_tmp {
        "made\nlisted\nTOP-SECRET"
    } else {
        "made\nlisted\nsecret-refused"
    };
    assert_eq!(stdout(&out), expected);
    let yaml = std::fs::read_to_string(w.profiles.join("default.yaml")).unwrap();
    assert!(yaml.starts_with('#') && yaml.contains("{CWD}"), "{yaml}");
}

#[test]
fn best_effort_false_refuses_when_the_kernel_lacks_a_feature() {
    let w = World::new();
    w.py_profile("strict", &[], "network:\n  enabled: false\n");
    let argv = py(&w, "pass");
    let out = w.exec_with("strict", &argv, &[], &["--simulate-max-abi", "3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("best_effort: false"), "{err}");
    assert!(
        err.contains("TCP bind/connect restriction needs Landlock ABI 4"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "the tool must not have run");

    // best_effort: true runs with what there is and says what is missing
    let yaml = std::fs::read_to_string(w.profiles.join("strict.yaml"))
        .unwrap()
        .replace("best_effort: false", "best_effort: true");
    w.profile("loose", &yaml);
    let out = w.exec_with("loose", &argv, &[], &["--simulate-max-abi", "3"]);
    assert_eq!(stdout(&out), "OK");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not enforced") && err.contains("ABI 4"),
        "{err}"
    );
}

#[test]
fn broken_or_unknown_profiles_are_errors_not_fallbacks() {
    let w = World::new();
    w.profile(
        "broken",
        "general:\n  best_effort: false\nfilesystem:\n  ro: [/etc\n",
    );
    let out = w.exec("broken", &["true".into()], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broken.yaml:"), "{err}");

    w.profile("typo", "network:\n  enabled: perhaps\n");
    let err = String::from_utf8_lossy(&w.exec("typo", &["true".into()], &[]).stderr).to_string();
    assert!(err.contains("typo.yaml:2"), "{err}");

    let out = w.exec("nosuch", &["true".into()], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown sandbox profile \"nosuch\""), "{err}");
    assert!(err.contains("broken, default, typo"), "{err}");
}

#[test]
fn validation_refuses_before_running() {
    let w = World::new();
    let marker = w.work.join("ran");
    let cmd = format!("touch {}; rm -rf /", marker.display());
    let out = w.exec("default", &["sh".into(), "-c".into(), cmd.into()], &[]);
    assert_eq!(out.status.code(), Some(126));
    assert!(!marker.exists(), "a refused command must not run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recursive-delete-root"), "{err}");

    w.py_profile(
        "custom",
        &[],
        "validation:\n  deny:\n    - name: no-curl\n      pattern: '\\bcurl\\b'\n",
    );
    let out = w.exec("custom", &["curl".into(), "x".into()], &[]);
    assert_eq!(out.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-curl"));
}

#[test]
fn signals_to_processes_outside_the_sandbox_are_refused() {
    let mut victim = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let w = World::new();
    w.py_profile("p", &[], "network:\n  unrestricted: true\n");
    let body = format!("import signal\nos.kill({}, signal.SIGTERM)", victim.id());
    assert_eq!(stdout(&w.exec("p", &py(&w, &body), &[])), "EPERM");
    assert!(victim.try_wait().unwrap().is_none(), "victim must survive");
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[test]
fn help_explains_the_command() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolsrv"))
        .args(["sandbox-exec", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("--profile") && text.contains("Landlock"),
        "{text}"
    );
}
