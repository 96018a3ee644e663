//! The ruleset cache: reuse, keys, and rebuilds when rule paths or the
//! executable change (checked by running real confined children).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::sandbox::{ExpandContext, Profile};

fn profile(yaml: &str) -> Profile {
    Profile::parse("t", Path::new("t.yaml"), yaml).unwrap()
}

const BASE: &str = "filesystem:\n  rox: [/usr, /bin, /lib, /lib64, /lib32, /libx32, /etc]\n  ro: [\"{CWD}/data\"]\nadvanced: {add_exec: true}\n";

/// Run `exe args…` in `cwd` confined by `p`; true if it exited 0.
fn confined_ok(p: &Profile, cwd: &Path, exe: &Path, args: &[&str]) -> bool {
    let prep = p
        .prepare(&ExpandContext::from_process(cwd), Some(exe))
        .unwrap();
    let mut c = Command::new(exe);
    c.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the sandbox hook is async-signal-safe by contract.
    unsafe {
        c.pre_exec(prep.into_pre_exec());
    }
    c.status().is_ok_and(|s| s.success())
}

#[test]
fn same_rules_reuse_one_ruleset_and_a_new_cwd_builds_another() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let p = profile(BASE);
    let cat = Path::new("/bin/cat");
    for _ in 0..3 {
        p.prepare(&ExpandContext::from_process(a.path()), Some(cat))
            .unwrap();
    }
    assert_eq!(p.rulesets_built(), 1);
    p.prepare(&ExpandContext::from_process(b.path()), Some(cat))
        .unwrap();
    assert_eq!(p.rulesets_built(), 2);
    p.prepare(
        &ExpandContext::from_process(a.path()),
        Some(Path::new("/bin/ls")),
    )
    .unwrap();
    assert_eq!(p.rulesets_built(), 3, "another executable, other rules");
    // A clone (e.g. a reloaded profile) starts empty.
    let q = p.clone();
    q.prepare(&ExpandContext::from_process(a.path()), Some(cat))
        .unwrap();
    assert_eq!(q.rulesets_built(), 1);
}

#[test]
fn a_rule_path_that_appears_is_honoured_after_revalidation() {
    let cwd = tempfile::tempdir().unwrap();
    let p = profile(BASE);
    let cat = Path::new("/bin/cat");
    // {CWD}/data does not exist yet: skipped.
    assert!(!confined_ok(
        &p,
        cwd.path(),
        cat,
        &["/etc/hostname", "data/f"]
    ));
    std::fs::create_dir(cwd.path().join("data")).unwrap();
    std::fs::write(cwd.path().join("data/f"), "x").unwrap();
    // Within the trust window the cached ruleset (without data/) is used.
    assert!(!confined_ok(&p, cwd.path(), cat, &["data/f"]));
    assert_eq!(p.rulesets_built(), 1);
    p.rulesets.expire();
    assert!(confined_ok(&p, cwd.path(), cat, &["data/f"]));
    assert_eq!(p.rulesets_built(), 2);
    // Unchanged paths: re-validated and kept.
    p.rulesets.expire();
    assert!(confined_ok(&p, cwd.path(), cat, &["data/f"]));
    assert_eq!(p.rulesets_built(), 2);
}

#[test]
fn a_replaced_rule_directory_is_rebuilt() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("f"), "x").unwrap();
    let p = profile(BASE);
    let cat = Path::new("/bin/cat");
    assert!(confined_ok(&p, cwd.path(), cat, &["data/f"]));
    // Same path, new directory (new inode): the old rule would point at the old one.
    std::fs::rename(&data, cwd.path().join("old")).unwrap();
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("f"), "y").unwrap();
    p.rulesets.expire();
    assert!(confined_ok(&p, cwd.path(), cat, &["data/f"]));
    assert_eq!(p.rulesets_built(), 2);
}

#[test]
fn an_executable_whose_interpreter_changes_is_rebuilt() {
    let cwd = tempfile::tempdir().unwrap();
    let tools = tempfile::tempdir().unwrap();
    // An interpreter outside every profile path; only add_exec allows it.
    let interp = tools.path().join("myinterp");
    std::fs::copy("/bin/sh", &interp).unwrap();
    let tool = tools.path().join("tool");
    let write_tool = |shebang: &str| {
        std::fs::write(&tool, format!("#!{shebang}\nexit 0\n")).unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    write_tool("/bin/sh");
    let p = profile(BASE);
    assert!(confined_ok(&p, cwd.path(), &tool, &[]));
    // Now the tool names the outside interpreter: the cached rules lack it.
    std::thread::sleep(std::time::Duration::from_millis(20));
    write_tool(&interp.display().to_string());
    assert!(
        !confined_ok(&p, cwd.path(), &tool, &[]),
        "stale rules refuse the new interpreter"
    );
    p.rulesets.expire();
    assert!(
        confined_ok(&p, cwd.path(), &tool, &[]),
        "rebuilt with the new interpreter"
    );
    assert_eq!(p.rulesets_built(), 2);
}
