//! Unit tests for command validation and the cool-down.
//! Kept apart so `validate.rs` stays readable.

use super::*;
use serde_json::json;

fn rejected(cmd: &str) -> Option<String> {
    Validator::default()
        .check(cmd, &json!({}))
        .err()
        .map(|r| r.rule)
}

#[test]
fn default_rules_reject_dangerous_commands() {
    for (cmd, rule) in [
        ("rm -rf /", "recursive-delete-root"),
        ("rm -fr --no-preserve-root /", "recursive-delete-root"),
        ("rm -r -f ~", "recursive-delete-root"),
        ("rm -rf ~/", "recursive-delete-root"),
        ("rm -rf $HOME", "recursive-delete-root"),
        ("rm -rf \"${HOME}\"/*", "recursive-delete-root"),
        ("sudo /bin/rm -Rf /*", "recursive-delete-root"),
        (
            "cd x && rm --recursive --force / ; ls",
            "recursive-delete-root",
        ),
        ("rm -rf /tmp/x /", "recursive-delete-root"),
        ("dd if=/dev/zero of=/dev/sda bs=1M", "block-device-write"),
        ("dd of=/dev/nvme0n1 if=x", "block-device-write"),
        ("cat img > /dev/vda", "block-device-write"),
        ("echo x | tee /dev/sdb", "block-device-write"),
        ("mkfs.ext4 /dev/sdb1", "mkfs"),
        ("sudo mkfs -t xfs /dev/vdb", "mkfs"),
        ("echo ok; /sbin/mkfs.xfs /dev/vdb", "mkfs"),
        (":(){ :|:& };:", "fork-bomb"),
        ("bomb() { bomb | bomb & }; bomb", "fork-bomb"),
        ("chmod -R 777 /", "recursive-chmod-root"),
        ("chown -R nobody ~", "recursive-chmod-root"),
    ] {
        assert_eq!(rejected(cmd).as_deref(), Some(rule), "{cmd}");
    }
}

#[test]
fn default_rules_allow_ordinary_commands() {
    for cmd in [
        "rm -rf /tmp/build",
        "rm -rf ./target",
        "rm -rf ~/project/target",
        "rm -rf $HOME/.cache/foo",
        "rm /",
        "ls -la /",
        "dd if=/dev/sda of=disk.img",
        "cat /dev/sda1 > backup.img",
        "echo hi > /dev/null",
        "grep mkfs notes.txt",
        "man mkfs",
        "chmod -R 755 ./bin",
        "chmod 644 /etc/foo",
        "git commit -m 'remove ~ files'",
    ] {
        assert_eq!(rejected(cmd), None, "{cmd}");
    }
}

#[test]
fn arguments_are_checked_recursively() {
    let v = Validator::default();
    assert!(v.check("bash", &json!({"command": "ls"})).is_ok());
    let r = v
        .check("bash", &json!({"opts": {"script": ["echo", "rm -rf / "]}}))
        .unwrap_err();
    assert_eq!(r.rule, "recursive-delete-root");
    assert_eq!(r.matched, "rm -rf /");
    // argv arrays are also checked as a joined command line
    let r = v
        .check("exec", &json!({"argv": ["rm", "-rf", "/"]}))
        .unwrap_err();
    assert_eq!(r.rule, "recursive-delete-root");
    assert!(r.to_string().contains("recursive-delete-root"));
}

#[test]
fn profile_rules_extend_override_and_replace() {
    let extra = vec![DenyRule::new("curl-pipe", r"curl[^|]*\|\s*sh").unwrap()];
    let v = Validator::new(extra.clone(), false);
    assert_eq!(
        v.check("curl x | sh", &json!(null)).unwrap_err().rule,
        "curl-pipe"
    );
    assert!(v.check("rm -rf /", &json!(null)).is_err());

    let v = Validator::new(extra, true);
    assert!(v.check("rm -rf /", &json!(null)).is_ok());
    assert_eq!(v.rule_names(), vec!["curl-pipe"]);

    // same name as a built-in replaces it
    let v = Validator::new(vec![DenyRule::new("mkfs", "^never$").unwrap()], false);
    assert!(v.check("mkfs.ext4 /dev/sdb", &json!(null)).is_ok());
    assert!(v.check("rm -rf /", &json!(null)).is_err());
    assert!(DenyRule::new("x", "(").is_err());
}

#[derive(Debug)]
struct TestClock(Mutex<Instant>);

impl TestClock {
    fn advance(&self, d: Duration) {
        let mut t = self.0.lock().unwrap();
        *t += d;
    }
}

impl Clock for TestClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

#[test]
fn cooldown_after_five_rejections_in_window() {
    let clock = Arc::new(TestClock(Mutex::new(Instant::now())));
    let cd = Cooldown::with_clock(CooldownConfig::default(), clock.clone());
    for _ in 0..4 {
        assert!(cd.record_rejection("a").is_ok());
        clock.advance(Duration::from_secs(5));
    }
    assert!(cd.check("a").is_ok());
    let err = cd.record_rejection("a").unwrap_err();
    assert_eq!(err.remaining, Duration::from_secs(60));
    // other agents are unaffected
    assert!(cd.check("b").is_ok());
    clock.advance(Duration::from_secs(30));
    let err = cd.check("a").unwrap_err();
    assert_eq!(err.remaining, Duration::from_secs(30));
    let msg = err.to_string();
    assert!(msg.contains("30s") && msg.contains("UTC"), "{msg}");
    clock.advance(Duration::from_secs(31));
    assert!(cd.check("a").is_ok());
    // counting starts afresh after the cool-down
    assert!(cd.record_rejection("a").is_ok());
}

#[test]
fn rejections_outside_the_window_do_not_count() {
    let clock = Arc::new(TestClock(Mutex::new(Instant::now())));
    let cfg = CooldownConfig {
        max_rejections: 3,
        window: Duration::from_secs(10),
        cooldown: Duration::from_secs(5),
    };
    let cd = Cooldown::with_clock(cfg, clock.clone());
    for _ in 0..10 {
        assert!(cd.record_rejection("a").is_ok());
        clock.advance(Duration::from_secs(6));
    }
    assert!(cd.check("a").is_ok());
}

#[test]
fn utc_formatting() {
    assert_eq!(fmt_utc(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
    let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // 2024-02-29 12:34:56
    assert_eq!(fmt_utc(t), "2024-02-29 12:34:56 UTC");
}
