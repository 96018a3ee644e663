//! End-to-end: a sandboxed tool asks for one command through the bypass
//! socket with its call's capability; forged or stale capabilities are refused.

mod bypass_common;
mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use bypass_common::{Bypass, Observer, outside_dir, write_tool};
use serde_json::{Value, json};

/// A Perl tool (perl-base is on every Debian system) that first tries the
/// path itself (the sandbox refuses), then asks the bypass socket.
const ASKER: &str = r#"#!/usr/bin/perl
use IO::Socket::UNIX;
$| = 1;
my $in = do { local $/; <STDIN> };
my ($path) = $in =~ /"path":\s*"([^"]*)"/;
my $forged = $in =~ /"forged":\s*true/;
print "pid=$$\n";
print "cap=$ENV{OLLIE_BYPASS_CAPABILITY}\n";
if (open(my $f, '>', $path)) { print "direct=allowed\n"; } else { print "direct=denied\n"; }
my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $ENV{OLLIE_BYPASS_SOCKET})
    or die "connect $ENV{OLLIE_BYPASS_SOCKET}: $!\n";
my $cap = $forged ? ('ab' x 32) : $ENV{OLLIE_BYPASS_CAPABILITY};
print $s qq({"capability":"$cap","command":["/bin/sh","-c","touch '$path' && echo made-it; echo err >&2; exit 3"]}\n);
my $line = <$s>;
print "answer=$line";
"#;

fn tools(t: &std::path::Path) {
    write_tool(
        t,
        "asker",
        r#"{"description":"Ask the bypass socket.","args":{"type":"object","properties":{"path":{"type":"string"},"forged":{"type":"boolean"}}}}"#,
        Some(ASKER),
    );
}

/// The log without ANSI colour sequences.
fn plain(log: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for ch in log.chars() {
        match (esc, ch) {
            (false, '\x1b') => esc = true,
            (true, 'm') => esc = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}

fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {text}"))
}

#[test]
fn tool_asks_through_the_socket_with_its_capability() {
    // Both sockets live in a directory no sandbox rule names: connecting to
    // a Unix socket by path needs no Landlock right below ABI 9.
    let mut b = Bypass::start(&[], tools);
    let outside = outside_dir();
    b.s.stop();
    b.s.socket = outside.path().join("run/toolsrv.sock");
    let audit = b.audit.to_str().unwrap().to_string();
    b.s.spawn(&["--audit-log", &audit]);
    let target = outside.path().join("via-socket");
    let mut c = b.session();
    c.write("ctl", b"load a asker").unwrap();
    let h = b.call_in_thread("a", "asker", json!({"path": target.to_str().unwrap()}));
    let mut o = Observer::new(&b.s.socket);
    let req = o.next();
    assert_eq!(req["asked_by"]["origin"], "tool", "{req}");
    assert_eq!(req["asked_by"]["tool"], "asker");
    assert_eq!(req["asked_by"]["agent"], "a");
    assert!(req["asked_by"]["proc"].as_u64().is_some(), "{req}");
    let os_pid = req["asked_by"]["os_pid"].as_u64().unwrap();
    assert!(
        req["command"]
            .as_str()
            .unwrap()
            .starts_with("/bin/sh -c 'touch"),
        "{req}"
    );
    // The sandbox kept the tool itself out.
    assert!(!target.exists());
    o.resolve(json!({"id": req["id"], "approve": true, "approver": "test"}))
        .unwrap();
    let r = h.join().unwrap();
    let text = r.joined_text();
    assert_eq!(field(&text, "direct"), "denied", "{text}");
    assert_eq!(field(&text, "pid").parse::<u64>().unwrap(), os_pid);
    let answer: Value = serde_json::from_str(field(&text, "answer")).unwrap();
    assert_eq!(answer["approved"], true, "{answer}");
    assert_eq!(answer["exit_code"], 3);
    assert_eq!(answer["stdout"], "made-it\n");
    assert_eq!(answer["stderr"], "err\n");
    assert!(
        target.exists(),
        "the approved command ran outside the sandbox"
    );
    let log = plain(&b.s.log_text());
    assert!(log.contains("request from a tool call"), "{log}");
    assert!(log.contains(&format!("peer_pid={os_pid}")), "{log}");

    // The call has ended: its capability no longer works, even from outside.
    let cap = field(&text, "cap").to_string();
    let sock = toolsrv::bypass::socket::socket_path(&b.s.socket);
    let mut s = UnixStream::connect(&sock).unwrap();
    writeln!(s, r#"{{"capability":"{cap}","command":["true"]}}"#).unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["approved"], false);
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("invalid or expired capability")
    );

    // Rejected through the socket: the tool is told who rejected it.
    let target2 = outside.path().join("rejected");
    let h = b.call_in_thread("a", "asker", json!({"path": target2.to_str().unwrap()}));
    let req = o.next();
    o.resolve(json!({"id": req["id"], "approve": false, "approver": "test", "reason": "no"}))
        .unwrap();
    let text = h.join().unwrap().joined_text();
    let answer: Value = serde_json::from_str(field(&text, "answer")).unwrap();
    assert_eq!(answer["approved"], false);
    assert_eq!(answer["reason"], "rejected by test: no");
    assert!(!target2.exists());
}

#[test]
fn forged_capability_is_refused_without_a_request() {
    let b = Bypass::start(&[], tools);
    let outside = outside_dir();
    let target = outside.path().join("forged");
    let mut c = b.session();
    c.write("ctl", b"load a asker").unwrap();
    let r = c
        .call(
            "a",
            "asker",
            json!({"path": target.to_str().unwrap(), "forged": true})
                .as_object()
                .unwrap(),
            None,
        )
        .unwrap();
    let text = r.joined_text();
    let answer: Value = serde_json::from_str(field(&text, "answer")).unwrap();
    assert_eq!(answer["approved"], false, "{text}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("invalid or expired capability")
    );
    assert!(!target.exists());
    assert!(Observer::nothing_within(
        &b.s.socket,
        Duration::from_millis(200)
    ));
    assert!(b.audit_lines().is_empty());
    let log = b.s.log_text();
    assert!(
        log.contains("invalid or expired capability refused"),
        "{log}"
    );

    // Garbage gets a clear answer.
    let sock = toolsrv::bypass::socket::socket_path(&b.s.socket);
    let mut s = UnixStream::connect(&sock).unwrap();
    writeln!(s, "not json").unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    assert!(line.contains("bad request"), "{line}");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}
