//! The audit log: one JSON line per bypass event (requested, approved,
//! rejected, expired, cancelled, credential supplied), mode 0600, no secrets.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::{AskedBy, BypassError, Kind, Request};

/// `$XDG_STATE_HOME/toolsrv/audit.jsonl`, else `~/.local/state/toolsrv/audit.jsonl`.
pub fn default_audit_path() -> Option<PathBuf> {
    Some(crate::dirs::state_home()?.join("toolsrv/audit.jsonl"))
}

/// One line of the log. Built only from [`Request`] fields and decision
/// metadata: there is no field a password could reach.
#[derive(Serialize)]
struct Line<'a> {
    ts: f64,
    event: &'a str,
    id: u64,
    kind: Kind,
    tool: &'a str,
    agent: &'a str,
    session: Option<&'a str>,
    command: &'a str,
    cwd: &'a str,
    sudo_user: Option<&'a str>,
    asked_by: &'a AskedBy,
    #[serde(skip_serializing_if = "Option::is_none")]
    approver: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// The append-only audit log.
pub struct Audit {
    path: PathBuf,
    file: Mutex<File>,
}

impl Audit {
    /// Open (create 0600, parents 0700) `path` for appending.
    pub fn open(path: &Path) -> Result<Audit, BypassError> {
        let err = |source| BypassError::Audit {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).map_err(err)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        // An existing log keeps its content but not looser permissions.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(err)?;
        Ok(Audit {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one event about `req`. A failed write is logged, never fatal.
    pub fn record(&self, event: &str, req: &Request, approver: Option<&str>, reason: Option<&str>) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let line = Line {
            ts: (ts * 1000.0).round() / 1000.0,
            event,
            id: req.id,
            kind: req.kind,
            tool: &req.tool,
            agent: &req.agent,
            session: req.session.as_deref(),
            command: &req.command,
            cwd: &req.cwd,
            sudo_user: req.sudo_user.as_deref(),
            asked_by: &req.asked_by,
            approver,
            reason,
        };
        let mut text = match serde_json::to_vec(&line) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode an audit record");
                return;
            }
        };
        text.push(b'\n');
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = f.write_all(&text) {
            tracing::error!(error = %e, path = %self.path.display(), "cannot write the audit log");
        }
        tracing::info!(
            event,
            id = req.id,
            kind = ?req.kind,
            tool = %req.tool,
            agent = %req.agent,
            approver,
            reason,
            "bypass"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_0600_and_appends_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/toolsrv/audit.jsonl");
        let a = Audit::open(&path).unwrap();
        let req = Request {
            id: 7,
            prompt: String::new(),
            ..Request::sample(Kind::Bypass)
        };
        a.record("requested", &req, None, None);
        a.record("approved", &req, Some("terminal:me"), None);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dmode & 0o777, 0o700);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["event"], "approved");
        assert_eq!(lines[1]["approver"], "terminal:me");
        assert_eq!(lines[0]["id"], 7);
    }
}
