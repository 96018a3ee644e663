//! Output limits under a flood: 1 GiB on stdout and 256 MiB on stderr are
//! drained to the end, capped in memory, and flagged truncated. Alone in its
//! binary so the peak-RSS baseline is this test's own.

#[path = "fixtures/exec/helpers.rs"]
mod helpers;

use std::time::Duration;

use helpers::*;
use serde_json::json;

const GIB: u64 = 1 << 30;

/// Peak resident set size of this process, in bytes.
fn vm_hwm() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

#[tokio::test]
async fn gigabyte_of_output_is_drained_capped_and_flagged() {
    let before = vm_hwm();

    let mut c = call(sh(&format!("head -c {GIB} /dev/zero")), json!({}));
    c.timeout = Some(Duration::from_secs(300));
    let (o, out, pid) = run(c).await;
    assert!(!o.timed_out, "the flood must be drained, not timed out");
    assert_eq!(o.status.code, Some(0));
    assert!(!o.result.is_error);
    assert!(o.truncated && out.truncated());
    assert_eq!(out.stdout_total_bytes(), GIB, "every byte was read");
    assert_eq!(out.len(), 4 << 20, "kept exactly the cap");
    let text = o.result.joined_text();
    assert!(
        text.len() < (32 << 10) + 200,
        "model text {} bytes",
        text.len()
    );
    assert!(text.starts_with("\0\0\0\0"));
    assert!(
        text.contains("capture limit of 4194304 bytes"),
        "{}",
        &text[32 << 10..]
    );
    assert!(text.contains(&format!("{} more bytes not shown", GIB - (32 << 10))));
    assert!(live_members(pid).is_empty());

    // The same on stderr with a failing exit: pipes drained, message capped.
    let mut c = call(sh("head -c 268435456 /dev/zero >&2; exit 1"), json!({}));
    c.timeout = Some(Duration::from_secs(300));
    let (o, out, _) = run(c).await;
    assert!(!o.timed_out);
    assert_eq!(o.status.code, Some(1));
    assert!(o.result.is_error && o.truncated);
    assert_eq!(out.total_bytes(), 256 << 20);
    assert!(o.result.joined_text().len() < (32 << 10) + 300);

    let after = vm_hwm();
    eprintln!("VmHWM before {before} after {after}");
    assert!(
        after < 64 << 20,
        "peak RSS {after} bytes (baseline {before})"
    );
}
