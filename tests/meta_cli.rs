//! End-to-end tests of `toolsrv list` and `toolsrv check`: the real binary
//! on real tools directories (the spec's examples, broken files, `tools/`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_toolsrv");

fn bundled() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools")
}

/// Runs toolsrv with a controlled environment (PATH, tools path, home).
fn run(args: &[&str], path: &str, tools_path: Option<&str>, home: &Path) -> Output {
    let mut c = std::process::Command::new(BIN);
    c.args(args)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("RUST_LOG", "warn");
    if let Some(tp) = tools_path {
        c.env("OLLIE_TOOLS_PATH", tp);
    }
    c.output().expect("run toolsrv")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn list_json(dirs: &[&Path], path: &str, home: &Path) -> Value {
    let mut args = vec!["list", "--json"];
    let ds: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    for d in &ds {
        args.push("--tools");
        args.push(d);
    }
    let o = run(&args, path, None, home);
    assert!(o.status.success(), "list failed: {o:?}");
    serde_json::from_slice(&o.stdout).expect("list --json prints JSON")
}

fn tool<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v["tools"].as_array()?.iter().find(|t| t["name"] == name)
}

fn exe(p: &Path) {
    fs::write(p, "#!/bin/sh\necho fake\n").unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
}

const SPEC_SYSTEM_LOGS: &str = r###"{
  "description": "Read system logs.",
  "variants": [
    {
      "match": {"binary": "journalctl"},
      "description": "Read system logs (journald).",
      "prompt": "## system_logs\n\nFilter by unit, time, pattern.",
      "args": {
        "type": "object",
        "properties": {
          "unit": {"type": "string", "description": "Systemd unit name"},
          "since": {"type": "string", "description": "Time filter"},
          "lines": {"type": "string", "description": "Number of lines"},
          "grep": {"type": "string", "description": "Pattern filter"}
        }
      },
      "cmd": "system_logs_journald",
      "readOnly": true
    },
    {
      "match": {"file": "/var/log/syslog"},
      "description": "Read system logs (syslog).",
      "prompt": "## system_logs\n\nTail syslog with optional grep.",
      "args": {
        "type": "object",
        "properties": {
          "lines": {"type": "string", "description": "Number of lines"},
          "grep": {"type": "string", "description": "Pattern filter"}
        }
      },
      "cmd": "system_logs_syslog",
      "readOnly": true
    }
  ]
}"###;

const SPEC_JSON_VALUE: &str = r###"{
  "description": "Extract a value from JSON.",
  "prompt": "## json_value\n\nRead `.path` from JSON input.",
  "cmd": "input=$(cat); echo \"$input\" | jq -r '.path'",
  "args": {
    "type": "object",
    "required": ["path"],
    "properties": {"path": {"type": "string"}}
  }
}"###;

const SPEC_RG: &str = r###"{"description": "Search with ripgrep.", "prompt": "## rg", "cmd": "rg",
  "args": {"type": "object", "required": ["pattern"], "properties": {"pattern": {"type": "string"}}}}"###;

struct Spec {
    t: tempfile::TempDir,
    tools: PathBuf,
    bin: PathBuf,
}

fn spec_fixture() -> Spec {
    let t = tempfile::tempdir().unwrap();
    let tools = t.path().join("tools");
    let bin = t.path().join("bin");
    fs::create_dir_all(&tools).unwrap();
    fs::create_dir_all(&bin).unwrap();
    fs::write(tools.join("system_logs.meta"), SPEC_SYSTEM_LOGS).unwrap();
    fs::write(tools.join("json_value.meta"), SPEC_JSON_VALUE).unwrap();
    fs::write(tools.join("rg.meta"), SPEC_RG).unwrap();
    exe(&bin.join("rg"));
    exe(&bin.join("journalctl"));
    exe(&bin.join("system_logs_journald"));
    Spec { t, tools, bin }
}

#[test]
fn spec_examples_list_on_a_systemd_like_host() {
    let s = spec_fixture();
    let v = list_json(&[&s.tools], s.bin.to_str().unwrap(), s.t.path());
    let logs = tool(&v, "system_logs").expect("system_logs visible");
    assert_eq!(logs["variant"], 0);
    assert_eq!(logs["description"], "Read system logs (journald).");
    assert_eq!(logs["readOnly"], true);
    let journald = s.bin.join("system_logs_journald");
    assert_eq!(logs["command"]["exec"], journald.to_str().unwrap());
    let jv = tool(&v, "json_value").unwrap();
    assert_eq!(
        jv["command"]["shell"],
        "input=$(cat); echo \"$input\" | jq -r '.path'"
    );
    let rg = tool(&v, "rg").unwrap();
    assert_eq!(rg["command"]["exec"], s.bin.join("rg").to_str().unwrap());
    assert_eq!(v["problems"], Value::Array(vec![]), "{v:#}");

    let o = run(
        &["check", s.tools.to_str().unwrap()],
        s.bin.to_str().unwrap(),
        None,
        s.t.path(),
    );
    assert!(o.status.success(), "{o:?}");
}

#[test]
fn spec_examples_on_a_bare_host() {
    let s = spec_fixture();
    let empty = s.t.path().join("empty");
    fs::create_dir_all(&empty).unwrap();
    let v = list_json(&[&s.tools], empty.to_str().unwrap(), s.t.path());
    // The rg wrapper stays listed, with nothing to run and a problem.
    let rg = tool(&v, "rg").unwrap();
    assert_eq!(rg["command"], Value::Null);
    let msg = rg["problems"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("nothing to run") && msg.contains("\"rg\""),
        "{msg}"
    );
    // The metadata-only tool does not depend on PATH.
    assert!(tool(&v, "json_value").unwrap()["command"]["shell"].is_string());
    if Path::new("/var/log/syslog").exists() {
        assert_eq!(tool(&v, "system_logs").unwrap()["variant"], 1);
    } else {
        assert!(tool(&v, "system_logs").is_none());
        assert_eq!(v["hidden"], serde_json::json!(["system_logs"]));
    }
    let o = run(
        &["check", s.tools.to_str().unwrap()],
        empty.to_str().unwrap(),
        None,
        s.t.path(),
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = stdout(&o);
    let rg_line = out.lines().find(|l| l.contains("rg.meta")).unwrap();
    assert!(
        rg_line.contains("rg.meta:1:") && rg_line.contains(": error: "),
        "{out}"
    );
}

fn broken_fixture() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    fs::write(
        d.join("good.meta"),
        r#"{"description":"ok","prompt":"p","cmd":"echo ok"}"#,
    )
    .unwrap();
    exe(&d.join("local"));
    fs::write(
        d.join("local.meta"),
        r#"{"description":"local","prompt":"p"}"#,
    )
    .unwrap();
    fs::write(
        d.join("badjson.meta"),
        "{\n  \"description\": \"x\"\n  \"cmd\": \"y\"\n}\n",
    )
    .unwrap();
    fs::write(
        d.join("types.meta"),
        "{\n  \"description\": \"x\",\n  \"readOnly\": \"yes\"\n}",
    )
    .unwrap();
    fs::write(
        d.join("schema.meta"),
        "{\"description\":\"x\",\"prompt\":\"p\",\"cmd\":\"echo x\",\n\"args\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integr\"}}}}",
    )
    .unwrap();
    fs::write(d.join("norun.meta"), r#"{"description":"x","prompt":"p"}"#).unwrap();
    fs::write(
        d.join("lint.meta"),
        "{\"description\":\"x\",\"cmd\":\"echo\",\"tier\":\"tepid\",\n\"args\":{\"type\":\"object\",\"required\":[\"q\"]},\n\"variants\":[{\"match\":{\"os\":\"macos\"}},{},{\"match\":{\"os\":\"linux\"}}]}",
    )
    .unwrap();
    t
}

#[test]
fn broken_files_are_reported_and_good_ones_still_list() {
    let t = broken_fixture();
    let v = list_json(&[t.path()], "/usr/bin:/bin", t.path());
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["good", "lint", "local", "norun"]);
    assert_eq!(
        tool(&v, "local").unwrap()["command"]["exec"],
        t.path().join("local").to_str().unwrap()
    );
    assert_eq!(tool(&v, "norun").unwrap()["command"], Value::Null);
    let problems = v["problems"].as_array().unwrap();
    let find = |file: &str| {
        problems
            .iter()
            .find(|p| p["path"].as_str().unwrap().ends_with(file) && p["severity"] == "error")
            .unwrap_or_else(|| panic!("no error for {file} in {problems:#?}"))
    };
    let bad = find("badjson.meta");
    assert_eq!(
        (bad["line"].as_u64(), bad["column"].as_u64()),
        (Some(3), Some(3))
    );
    let types = find("types.meta");
    assert_eq!(types["line"], 3);
    assert!(types["message"].as_str().unwrap().contains("`readOnly`"));
    assert!(
        find("schema.meta")["message"]
            .as_str()
            .unwrap()
            .contains("JSON Schema")
    );
    assert!(
        find("norun.meta")["message"]
            .as_str()
            .unwrap()
            .contains("nothing to run")
    );

    // The human table shows them too.
    let o = run(
        &["list", "--tools", t.path().to_str().unwrap()],
        "/usr/bin:/bin",
        None,
        t.path(),
    );
    let out = stdout(&o);
    assert!(
        out.contains("(nothing to run)") && out.contains("badjson.meta:3:3: error:"),
        "{out}"
    );
}

#[test]
fn check_prints_compiler_style_diagnostics() {
    let t = broken_fixture();
    let o = run(
        &["check", t.path().to_str().unwrap()],
        "/usr/bin:/bin",
        None,
        t.path(),
    );
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let dir = t.path().display().to_string();
    for want in [
        format!("{dir}/badjson.meta:3:3: error: expected `,` or `}}`"),
        format!("{dir}/types.meta:3:"),
        format!("{dir}/schema.meta:2:"),
        format!("{dir}/lint.meta:1:33: error: unknown tier \"tepid\""),
        format!("{dir}/lint.meta:2:"),
    ] {
        assert!(out.contains(&want), "missing {want:?} in:\n{out}");
    }
    for want in [
        "required property \"q\" is not defined in `properties`",
        "unknown `os` value \"macos\" (Go calls it \"darwin\")",
        "variant 2 can never be chosen: variant 1 has no conditions",
        "warning: variant 0: no `prompt`",
        "nothing to run",
        "`args` is not a valid JSON Schema: /properties/n/type: unknown type \"integr\"",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(String::from_utf8_lossy(&o.stderr).contains("errors"));
    // Only warnings: exit 0.
    let ok = t.path().join("warn");
    fs::create_dir(&ok).unwrap();
    fs::write(ok.join("w.meta"), r#"{"cmd":"echo hi"}"#).unwrap();
    let o = run(
        &["check", ok.join("w.meta").to_str().unwrap()],
        "/usr/bin:/bin",
        None,
        t.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("w.meta:1:1: warning: no `prompt`"));
}

#[test]
fn tools_path_from_env_first_directory_wins() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(
        a.path().join("t.meta"),
        r#"{"description":"from a","prompt":"p","cmd":"echo a"}"#,
    )
    .unwrap();
    fs::write(
        b.path().join("t.meta"),
        r#"{"description":"from b","prompt":"p","cmd":"echo b"}"#,
    )
    .unwrap();
    let tp = format!("{}:{}", a.path().display(), b.path().display());
    let o = run(&["list", "--json"], "/usr/bin:/bin", Some(&tp), a.path());
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(tool(&v, "t").unwrap()["description"], "from a");
    assert_eq!(v["problems"][0]["severity"], "note");
    let o = run(&["check"], "/usr/bin:/bin", Some(&tp), a.path());
    assert!(o.status.success());
    assert!(stdout(&o).contains("note: tool `t` is shadowed"));
}

#[test]
fn bundled_tools_pass_check_and_list() {
    let home = tempfile::tempdir().unwrap();
    let tools = bundled();
    let path = std::env::var("PATH").unwrap_or_default();
    let o = run(
        &["check", tools.to_str().unwrap()],
        &path,
        None,
        home.path(),
    );
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(
        stdout(&o).trim().is_empty(),
        "bundled tools have no warnings:\n{}",
        stdout(&o)
    );
    let v = list_json(&[&tools], &path, home.path());
    for name in [
        "echo",
        "json_value",
        "now",
        "system_logs",
        "file_read",
        "sleep",
        "fail",
    ] {
        let t = tool(&v, name).unwrap_or_else(|| panic!("{name} missing: {v:#}"));
        assert!(!t["command"].is_null(), "{name} has nothing to run");
    }
    assert_eq!(
        tool(&v, "echo").unwrap()["command"]["exec"],
        tools.join("echo").to_str().unwrap()
    );
    assert!(tool(&v, "json_value").unwrap()["command"]["shell"].is_string());
}

#[test]
fn help_texts() {
    let home = tempfile::tempdir().unwrap();
    let o = run(&["list", "--help"], "/usr/bin", None, home.path());
    let out = stdout(&o);
    assert!(
        out.contains("--json") && out.contains("OLLIE_TOOLS_PATH"),
        "{out}"
    );
    let o = run(&["check", "--help"], "/usr/bin", None, home.path());
    let out = stdout(&o);
    assert!(
        out.contains("Exit status") && out.contains("path:line:col"),
        "{out}"
    );
}
