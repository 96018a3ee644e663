//! End-to-end filesystem confinement: the real `toolsrv sandbox-exec` binary,
//! a python tool printing the errno the kernel (Landlock) gave it.

mod sandbox_common;

use std::os::unix::fs::PermissionsExt;

use sandbox_common::{World, py, stdout};

#[test]
fn write_outside_rw_is_refused() {
    let w = World::new();
    w.mkdir("outside");
    w.py_profile("p", &[], "");
    let out = w.exec("p", &py(&w, "open(r + '/outside/f', 'w').write('x')"), &[]);
    assert_eq!(stdout(&out), "EACCES");
    assert!(!w.path("outside/f").exists());
    // the same tool may write inside {CWD}
    let out = w.exec("p", &py(&w, "open(w + '/f', 'w').write('x')"), &[]);
    assert_eq!(stdout(&out), "OK");
    assert_eq!(std::fs::read_to_string(w.work.join("f")).unwrap(), "x");
}

#[test]
fn reading_a_secret_outside_every_rule_is_refused() {
    let w = World::new();
    w.py_profile("p", &[("ro", &["/etc"])], "");
    let body = format!(
        "print(open({:?}).read().strip())",
        w.home.join(".ssh/id_secret")
    );
    let out = w.exec("p", &py(&w, &body), &[]);
    let s = stdout(&out);
    assert_eq!(s, "EACCES");
    assert!(!s.contains("TOP-SECRET"));
    // listing the home directory is refused too
    let body = format!("os.listdir({:?})", w.home);
    assert_eq!(stdout(&w.exec("p", &py(&w, &body), &[])), "EACCES");
    // with {HOME} read-only the same tool reads it
    w.py_profile("home", &[("ro", &["{HOME}"])], "");
    let body = format!(
        "print(open({:?}).read().strip())",
        w.home.join(".ssh/id_secret")
    );
    assert_eq!(
        stdout(&w.exec("home", &py(&w, &body), &[])),
        "TOP-SECRET\nOK"
    );
}

#[test]
fn executing_from_a_read_only_directory_is_refused() {
    let w = World::new();
    let bin = w.mkdir("tools");
    let script = bin.join("hello");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let body = format!(
        "import subprocess\nprint(subprocess.run([{:?}], capture_output=True, text=True).stdout.strip())",
        script
    );
    let tools = bin.display().to_string();
    w.py_profile("ro", &[("ro", &[&tools])], "");
    assert_eq!(stdout(&w.exec("ro", &py(&w, &body), &[])), "EACCES");
    // reading is allowed there, only execution is not
    let read = format!("open({script:?}).read()");
    assert_eq!(stdout(&w.exec("ro", &py(&w, &read), &[])), "OK");
    w.py_profile("rox", &[("rox", &[&tools])], "");
    assert_eq!(stdout(&w.exec("rox", &py(&w, &body), &[])), "ran\nOK");
}

#[test]
fn symlinks_and_dotdot_do_not_escape() {
    let w = World::new();
    let secret = w.home.join(".ssh/id_secret");
    std::os::unix::fs::symlink(&secret, w.work.join("link")).unwrap();
    std::os::unix::fs::symlink(&w.home, w.work.join("homelink")).unwrap();
    w.py_profile("p", &[], "");
    for body in [
        "open(w + '/link').read()".to_string(),
        "open(w + '/homelink/.ssh/id_secret').read()".to_string(),
        "open(w + '/../home/.ssh/id_secret').read()".to_string(),
        "open(w + '/../escaped', 'w').write('x')".to_string(),
        "os.symlink('/etc/passwd', w + '/l2'); open(w + '/l2').read()".to_string(),
    ] {
        assert_eq!(
            stdout(&w.exec("p", &py(&w, &body), &[])),
            "EACCES",
            "{body}"
        );
    }
    assert!(!w.path("escaped").exists());
}

#[test]
fn rename_into_a_tree_with_more_rights_is_refused() {
    let w = World::new();
    let a = w.mkdir("a");
    let b = w.mkdir("b");
    let x = w.mkdir("x");
    std::fs::write(a.join("f"), "data").unwrap();
    std::fs::write(a.join("g"), "data").unwrap();
    let (a_s, b_s, x_s) = (
        a.display().to_string(),
        b.display().to_string(),
        x.display().to_string(),
    );
    w.py_profile("p", &[("rw", &[&a_s, &b_s]), ("rwx", &[&x_s])], "");
    // a (rw, no execute) -> x (rwx): the file would gain execute: EXDEV (refer).
    let body = format!("os.rename({:?}, {:?})", a.join("f"), x.join("f"));
    assert_eq!(stdout(&w.exec("p", &py(&w, &body), &[])), "EXDEV");
    assert!(a.join("f").exists());
    // hard links are checked the same way
    let body = format!("os.link({:?}, {:?})", a.join("f"), x.join("f"));
    assert_eq!(stdout(&w.exec("p", &py(&w, &body), &[])), "EXDEV");
    // a (rw) -> b (rw): no rights gained, allowed
    let body = format!("os.rename({:?}, {:?})", a.join("g"), b.join("g"));
    assert_eq!(stdout(&w.exec("p", &py(&w, &body), &[])), "OK");
    assert!(b.join("g").exists());
    // out of a rw tree into a read-only one: refused
    let ro = w.mkdir("ro");
    let ro_s = ro.display().to_string();
    w.py_profile("q", &[("rw", &[&a_s]), ("ro", &[&ro_s])], "");
    let body = format!("os.rename({:?}, {:?})", a.join("f"), ro.join("f"));
    assert_eq!(stdout(&w.exec("q", &py(&w, &body), &[])), "EACCES");
}

#[test]
fn truncating_a_read_only_file_is_refused() {
    let w = World::new();
    let d = w.mkdir("data");
    std::fs::write(d.join("keep"), "precious").unwrap();
    std::fs::write(w.work.join("scratch"), "scratch").unwrap();
    let d_s = d.display().to_string();
    let keep = d.join("keep").display().to_string();
    // the directory, and the file itself as a single-file rule
    w.py_profile("p", &[("ro", &[&d_s]), ("rw", &[])], "");
    w.py_profile("f", &[("ro", &[&keep])], "");
    for profile in ["p", "f"] {
        let body = format!("os.truncate({:?}, 0)", d.join("keep"));
        assert_eq!(stdout(&w.exec(profile, &py(&w, &body), &[])), "EACCES");
        let body = format!("open({:?}, 'r+')", d.join("keep"));
        assert_eq!(stdout(&w.exec(profile, &py(&w, &body), &[])), "EACCES");
    }
    assert_eq!(std::fs::read_to_string(d.join("keep")).unwrap(), "precious");
    let body = "os.truncate(w + '/scratch', 0)";
    assert_eq!(stdout(&w.exec("p", &py(&w, body), &[])), "OK");
    assert_eq!(std::fs::read_to_string(w.work.join("scratch")).unwrap(), "");
}
