//! The peer figure: the same trivial tool behind an MCP stdio server built with
//! the official Python SDK (`bench/mcp_peer/bench.py`), called from its client.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The Python with the SDK: `target/mcp-venv` (from `install.sh`), else `python3`.
fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-venv/bin/python");
    if venv.is_file() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// `Ok(None)` with a message printed when the SDK is not installed.
pub fn run(tool: &Path, calls: usize) -> Result<Option<Value>, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/mcp_peer/bench.py");
    let out = crate::fixture::clean_env(&mut Command::new(python()))
        .arg(&script)
        .arg("--tool")
        .arg(tool)
        .arg("--calls")
        .arg(calls.to_string())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if out.status.code() == Some(3) {
        eprintln!(
            "peer skipped: the Python MCP SDK is not installed (run bench/mcp_peer/install.sh)"
        );
        return Ok(None);
    }
    if !out.status.success() {
        return Err(format!(
            "peer benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let v: Value =
        serde_json::from_str(line.trim()).map_err(|e| format!("peer output {line:?}: {e}"))?;
    Ok(Some(v))
}
