//! The namespace driven by python-9p, whose wire codec is plan9port's C code
//! (an independent 9P2000 implementation, installed by `.ci/run`). The test
//! fails, never skips, when the package is missing.

mod common;

use common::TestServer;

#[test]
fn plan9port_codec_client() {
    let s = TestServer::start(&[]);
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/py/plan9port_client.py"
        ))
        .arg(&s.socket)
        .arg("p9-secret")
        .arg(s.dir.path())
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.trim() == "ok",
        "python-9p client failed (is `pip install python-9p` done? .ci/run does it)\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        s.log_text()
    );
}
