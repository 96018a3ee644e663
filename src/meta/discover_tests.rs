//! Discovery tests: loading, clashes, broken files, and cache invalidation
//! on a real filesystem.

use super::*;
use crate::meta::Command;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;

const GOOD: &str = r#"{"description":"d","prompt":"p","cmd":"echo hi"}"#;

fn past() -> SystemTime {
    SystemTime::now() - Duration::from_secs(100)
}

/// Sets a path's mtime (files and directories) to `t`.
fn set_mtime(p: &Path, t: SystemTime) {
    File::open(p).unwrap().set_modified(t).unwrap();
}

/// Writes a file and ages it (and its directory) past the racy window.
fn write_old(p: &Path, text: &str) {
    fs::write(p, text).unwrap();
    set_mtime(p, past());
    set_mtime(p.parent().unwrap(), past());
}

fn host(path: Vec<PathBuf>) -> Host {
    Host::new("linux", "amd64", path)
}

/// A discoverer that stats every file on every discovery (the tests below
/// check what a full pass sees; `recheck_*` tests cover the period between).
fn disc(dirs: &[&Path]) -> Discoverer {
    Discoverer::new(dirs.iter().map(|d| d.to_path_buf()).collect())
        .with_host(host(vec![]))
        .with_recheck(Duration::ZERO)
}

#[test]
fn catalog_is_send_and_sync() {
    fn ok<T: Send + Sync>() {}
    ok::<Catalog>();
    ok::<Discoverer>();
}

#[test]
fn loads_tools_hidden_and_problems_without_stopping() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    fs::write(d.join("good.meta"), GOOD).unwrap();
    fs::write(d.join("bad.meta"), "{\n  \"description\": 1\n}").unwrap();
    fs::write(d.join("syntax.meta"), "{\"a\":").unwrap();
    fs::write(
        d.join("schema.meta"),
        r#"{"cmd":"x y","args":{"type":"nope"}}"#,
    )
    .unwrap();
    fs::write(d.join("norun.meta"), r#"{"description":"d","prompt":"p"}"#).unwrap();
    fs::write(
        d.join("hid.meta"),
        r#"{"variants":[{"match":{"os":"plan9"}}]}"#,
    )
    .unwrap();
    fs::write(d.join(".hidden.meta"), GOOD).unwrap();
    fs::write(d.join("notes.txt"), GOOD).unwrap();
    let cat = disc(&[d]).discover();
    let names: Vec<&str> = cat.tools.keys().map(String::as_str).collect();
    assert_eq!(names, ["good", "norun"]);
    assert_eq!(cat.hidden, ["hid"]);
    assert_eq!(
        cat.tools["good"].command,
        Some(Command::Shell("echo hi".into()))
    );
    assert_eq!(cat.tools["norun"].command, None);
    let errs: Vec<String> = cat
        .problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .map(|p| p.to_string())
        .collect();
    let find = |needle: &str| {
        errs.iter()
            .find(|e| e.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not in {errs:#?}"))
    };
    assert!(find("bad.meta:2:").contains("`description`"));
    assert!(find("syntax.meta:1:").contains("EOF"));
    find("schema.meta");
    assert!(find("norun.meta").contains("nothing to run"));
    assert!(cat.has_errors());
}

#[test]
fn first_directory_wins_and_later_duplicates_are_notes() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(
        a.path().join("t.meta"),
        r#"{"description":"from a","cmd":"a x"}"#,
    )
    .unwrap();
    fs::write(
        b.path().join("t.meta"),
        r#"{"description":"from b","cmd":"b x"}"#,
    )
    .unwrap();
    fs::write(b.path().join("u.meta"), r#"{"cmd":"b y"}"#).unwrap();
    let missing = a.path().join("missing");
    let cat = disc(&[&missing, a.path(), b.path()]).discover();
    assert_eq!(cat.tools["t"].description, "from a");
    assert_eq!(cat.tools["t"].dir, a.path());
    assert!(cat.tools.contains_key("u"));
    let note = cat
        .problems
        .iter()
        .find(|p| p.severity == Severity::Note)
        .unwrap();
    assert_eq!(note.path, b.path().join("t.meta"));
    assert!(note.message.contains("shadowed"));
}

#[test]
fn warm_discovery_reuses_everything() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..20 {
        write_old(&t.path().join(format!("t{i}.meta")), GOOD);
    }
    let d = disc(&[t.path()]).with_host_ttl(Duration::from_secs(3600));
    let c1 = d.discover();
    assert_eq!(c1.tools.len(), 20);
    let s1 = d.stats();
    assert_eq!((s1.dirs_listed, s1.files_read), (1, 20));
    let c2 = d.discover();
    assert!(Arc::ptr_eq(&c1, &c2));
    let s2 = d.stats();
    assert_eq!(
        (s2.dirs_listed, s2.files_read, s2.resolutions),
        (s1.dirs_listed, s1.files_read, s1.resolutions),
        "a warm discovery reads nothing"
    );
}

#[test]
fn invalidation_add_change_remove() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    write_old(&dir.join("a.meta"), GOOD);
    let d = disc(&[dir]).with_host_ttl(Duration::from_secs(3600));
    assert_eq!(d.discover().tools.len(), 1);

    // Add.
    write_old(&dir.join("b.meta"), GOOD);
    let c = d.discover();
    assert!(c.tools.contains_key("b"));
    assert_eq!(d.stats().files_read, 2, "only the new file is read");

    // Change in place (directory mtime unchanged).
    let dir_mtime = fs::metadata(dir).unwrap().modified().unwrap();
    write_old(
        &dir.join("a.meta"),
        r#"{"description":"changed","cmd":"echo changed"}"#,
    );
    set_mtime(dir, dir_mtime);
    let c = d.discover();
    assert_eq!(c.tools["a"].description, "changed");
    assert_eq!(
        d.stats().dirs_listed,
        2,
        "unchanged directory is not listed again"
    );

    // Remove.
    fs::remove_file(dir.join("b.meta")).unwrap();
    set_mtime(dir, past() + Duration::from_secs(5));
    let c = d.discover();
    assert!(!c.tools.contains_key("b"));

    // Broken, then fixed.
    write_old(&dir.join("a.meta"), "{");
    assert!(!d.discover().tools.contains_key("a"));
    write_old(&dir.join("a.meta"), GOOD);
    assert!(d.discover().tools.contains_key("a"));
}

#[test]
fn same_second_rewrite_with_different_size_is_seen() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("a.meta");
    let when = past();
    fs::write(&p, r#"{"description":"one","cmd":"x y"}"#).unwrap();
    set_mtime(&p, when);
    set_mtime(t.path(), when);
    let d = disc(&[t.path()]);
    assert_eq!(d.discover().tools["a"].description, "one");
    fs::write(&p, r#"{"description":"two!","cmd":"x y"}"#).unwrap();
    set_mtime(&p, when);
    set_mtime(t.path(), when);
    assert_eq!(d.discover().tools["a"].description, "two!");
}

#[test]
fn racy_recent_files_are_reread() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("a.meta");
    fs::write(&p, r#"{"description":"one","cmd":"x y"}"#).unwrap();
    let d = disc(&[t.path()]);
    let c1 = d.discover();
    let mtime = fs::metadata(&p).unwrap().modified().unwrap();
    // Same size, same mtime: only caught because the entry was too recent to trust.
    fs::write(&p, r#"{"description":"two","cmd":"x y"}"#).unwrap();
    set_mtime(&p, mtime);
    assert_eq!(d.discover().tools["a"].description, "two");
    // Unchanged re-reads keep the same catalog.
    let c3 = d.discover();
    let c4 = d.discover();
    assert!(Arc::ptr_eq(&c3, &c4));
    assert!(!Arc::ptr_eq(&c1, &c3));
}

#[test]
fn host_changes_are_seen_after_the_ttl() {
    let t = tempfile::tempdir().unwrap();
    let tools = t.path().join("tools");
    let bin = t.path().join("bin");
    fs::create_dir_all(&tools).unwrap();
    fs::create_dir_all(&bin).unwrap();
    write_old(
        &tools.join("logs.meta"),
        r#"{"variants":[{"match":{"binary":"journalctl"},"cmd":"journalctl"}]}"#,
    );
    let d = Discoverer::new(vec![tools.clone()])
        .with_host(host(vec![bin.clone()]))
        .with_host_ttl(Duration::ZERO);
    assert_eq!(d.discover().hidden, ["logs"]);
    let j = bin.join("journalctl");
    fs::write(&j, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&j, fs::Permissions::from_mode(0o755)).unwrap();
    let c = d.discover();
    assert!(c.hidden.is_empty());
    assert_eq!(c.tools["logs"].command, Some(Command::Exec(j.clone())));
    // A co-located executable appearing takes over.
    let local = tools.join("logs");
    fs::write(&local, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&local, fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        d.discover().tools["logs"].command,
        Some(Command::Exec(local))
    );
}

#[test]
fn concurrent_discovery() {
    let t = tempfile::tempdir().unwrap();
    for i in 0..10 {
        fs::write(t.path().join(format!("t{i}.meta")), GOOD).unwrap();
    }
    let d = Arc::new(disc(&[t.path()]));
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let d = d.clone();
            std::thread::spawn(move || d.discover().tools.len())
        })
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), 10);
    }
}

#[test]
fn check_file_reports_everything() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("x.meta");
    fs::write(&p, r#"{"cmd":"/nonexistent/bin/x","tier":"hot"}"#).unwrap();
    let r = check_file(&p, &host(vec![]));
    let msgs: Vec<String> = r.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("x.meta:1:2: error:") && m.contains("does not exist")),
        "{msgs:#?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("warning: no `prompt`")),
        "{msgs:#?}"
    );
    assert!(r.tool.is_some_and(|t| t.command.is_none()));
}

#[test]
fn recheck_between_full_passes_only_new_files_are_looked_at() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    for i in 0..50 {
        write_old(&dir.join(format!("t{i}.meta")), GOOD);
    }
    let d = Discoverer::new(vec![dir.to_path_buf()])
        .with_host(host(vec![]))
        .with_host_ttl(Duration::from_secs(3600))
        .with_recheck(Duration::from_secs(3600));
    let c1 = d.discover();
    assert_eq!(c1.tools.len(), 50);
    let s1 = d.stats();
    assert_eq!(s1.full_checks, 1);
    assert!(Arc::ptr_eq(&c1, &d.discover()), "warm: nothing changed");

    // An in-place edit (directory untouched) waits for the next full pass.
    let dir_mtime = fs::metadata(dir).unwrap().modified().unwrap();
    write_old(
        &dir.join("t0.meta"),
        r#"{"description":"changed","cmd":"echo changed"}"#,
    );
    set_mtime(dir, dir_mtime);
    assert_eq!(d.discover().tools["t0"].description, "d");

    // A new file changes its directory: seen at once, and only it is read.
    write_old(&dir.join("new.meta"), GOOD);
    let c = d.discover();
    assert!(c.tools.contains_key("new"));
    let s2 = d.stats();
    assert_eq!(
        s2.files_read,
        s1.files_read + 1,
        "only the new file is read"
    );
    assert_eq!(s2.full_checks, 1, "no full pass");

    // A removed file disappears at once too.
    fs::remove_file(dir.join("t1.meta")).unwrap();
    set_mtime(dir, past() + Duration::from_secs(7));
    assert!(!d.discover().tools.contains_key("t1"));
}

#[test]
fn recheck_period_catches_in_place_edits() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    write_old(&dir.join("a.meta"), GOOD);
    let d = Discoverer::new(vec![dir.to_path_buf()])
        .with_host(host(vec![]))
        .with_recheck(Duration::from_millis(200));
    assert_eq!(d.discover().tools["a"].description, "d");
    let dir_mtime = fs::metadata(dir).unwrap().modified().unwrap();
    write_old(
        &dir.join("a.meta"),
        r#"{"description":"changed","cmd":"echo changed"}"#,
    );
    set_mtime(dir, dir_mtime);
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(d.discover().tools["a"].description, "changed");
    assert_eq!(d.stats().full_checks, 2);
}

fn refresher_threads() -> usize {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "discover-tools")
        })
        .count()
}

/// With a refresher thread, requests never stat every file: the thread does
/// the full passes (and the first, warming, one); in-place edits still show
/// within the period, new files at once; the thread ends with the discoverer.
#[test]
fn refresher_does_the_full_passes_off_the_request_path() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    for i in 0..20 {
        write_old(&dir.join(format!("t{i}.meta")), GOOD);
    }
    let before = refresher_threads();
    let d = Arc::new(
        Discoverer::new(vec![dir.to_path_buf()])
            .with_host(host(vec![]))
            .with_recheck(Duration::from_millis(100)),
    );
    d.spawn_refresher().unwrap();
    // Warmed by the thread: the first request finds the catalog ready.
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.stats().full_checks == 0 {
        assert!(Instant::now() < deadline, "the refresher never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(d.discover().tools.len(), 20);
    assert_eq!(refresher_threads(), before + 1);

    // Requests alone do no full pass, however long it has been.
    let full = d.stats().full_checks;
    let reads = d.stats().files_read;
    std::thread::sleep(Duration::from_millis(30));
    d.discover();
    assert!(d.stats().files_read == reads, "a warm request read files");

    // An in-place edit (directory untouched) is seen within the period.
    let dir_mtime = fs::metadata(dir).unwrap().modified().unwrap();
    write_old(
        &dir.join("t0.meta"),
        r#"{"description":"changed","cmd":"echo changed"}"#,
    );
    set_mtime(dir, dir_mtime);
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.discover().tools["t0"].description != "changed" {
        assert!(Instant::now() < deadline, "in-place edit never seen");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(d.stats().full_checks > full, "seen by a refresher pass");

    // A new file is seen by the very next request.
    write_old(&dir.join("fresh.meta"), GOOD);
    assert!(d.discover().tools.contains_key("fresh"));

    drop(d);
    let deadline = Instant::now() + Duration::from_secs(5);
    while refresher_threads() > before {
        assert!(
            Instant::now() < deadline,
            "the refresher outlived its discoverer"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
