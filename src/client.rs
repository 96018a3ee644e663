//! The toolsrv client: where the socket and the secret live, an
//! authenticated 9P session, and tool calls over it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::ninep::client::{Client, ClientError, Fid};
use crate::ninep::fs::{ORDWR, OREAD, OWRITE, Stat};
use crate::protocol::{ToolResult, encode_payload};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(
        "cannot connect to {socket}: {source} (is `toolsrv serve` running? set --socket or TOOLSRV_SOCKET)"
    )]
    Connect {
        socket: PathBuf,
        source: ClientError,
    },
    #[error("{socket}: the server refused the session: {message} (the client secret, from TOOLSRV_SECRET or {}, must match the first secret the server saw)", secret_path().display())]
    Refused { socket: PathBuf, message: String },
    #[error("{path}: {source}")]
    Op { path: String, source: ClientError },
    #[error("secret file {path}: {source}")]
    Secret {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the server's answer is not a tool result: {0}")]
    BadResult(String),
}

/// The socket used when none is given: `$XDG_RUNTIME_DIR/toolsrv/toolsrv.sock`,
/// else `/tmp/toolsrv-$UID/toolsrv.sock`.
pub fn default_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("toolsrv/toolsrv.sock"),
        None => PathBuf::from(format!(
            "/tmp/toolsrv-{}/toolsrv.sock",
            rustix::process::getuid().as_raw()
        )),
    }
}

/// Where the client keeps its secret: `$XDG_CONFIG_HOME/toolsrv/secret`
/// (default `~/.config/toolsrv/secret`).
pub fn secret_path() -> PathBuf {
    crate::dirs::config_home()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("toolsrv/secret")
}

/// The secret from `TOOLSRV_SECRET`, else from the secret file, which is
/// created (mode 0600, random) when missing so that reconnects reuse it.
pub fn load_secret() -> Result<Vec<u8>, SessionError> {
    if let Some(s) = std::env::var_os("TOOLSRV_SECRET").filter(|s| !s.is_empty()) {
        return Ok(s.into_encoded_bytes());
    }
    let path = secret_path();
    let err = |source| SessionError::Secret {
        path: path.clone(),
        source,
    };
    match std::fs::read(&path) {
        Ok(s) => {
            let mode = std::fs::metadata(&path).map_err(err)?.permissions().mode();
            if mode & 0o077 != 0 {
                tracing::warn!(path = %path.display(), "secret file is readable by others; restricting to 0600");
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(err)?;
            }
            Ok(s.trim_ascii().to_vec())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(err)?;
            }
            let secret = crate::protocol::random_token().map_err(err)?;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(err)?;
            f.write_all(secret.as_bytes()).map_err(err)?;
            Ok(secret.into_bytes())
        }
        Err(e) => Err(err(e)),
    }
}

/// An attached session with a toolsrv.
pub struct Session {
    pub client: Client,
    /// The token for request payloads (absent with `--no-auth`).
    pub token: Option<String>,
    /// An open `proc/new` fid kept between synchronous calls: a write at
    /// offset 0 starts a new request on it, saving walk, open and clunk.
    call_fid: Option<Fid>,
}

impl Session {
    /// Connect, authenticate with the client secret (falling back to an
    /// unauthenticated attach when the server runs with `--no-auth`) and attach.
    pub fn connect(socket: &Path) -> Result<Session, SessionError> {
        Self::connect_with_secret(socket, None)
    }

    /// Like [`Session::connect`] with an explicit secret (`None`: [`load_secret`]).
    pub fn connect_with_secret(
        socket: &Path,
        secret: Option<&[u8]>,
    ) -> Result<Session, SessionError> {
        let secret = match secret {
            Some(s) => s.to_vec(),
            None => load_secret()?,
        };
        let cerr = |source| SessionError::Connect {
            socket: socket.to_path_buf(),
            source,
        };
        match Client::open_session(socket, "agent", "", Some(&secret)) {
            Ok((client, token)) => Ok(Session {
                client,
                token,
                call_fid: None,
            }),
            Err(ClientError::Server(e)) if e.contains("not required") => {
                let (client, _) = Client::open_session(socket, "agent", "", None).map_err(cerr)?;
                Ok(Session {
                    client,
                    token: None,
                    call_fid: None,
                })
            }
            Err(ClientError::Server(message)) => Err(SessionError::Refused {
                socket: socket.to_path_buf(),
                message,
            }),
            Err(e) => Err(cerr(e)),
        }
    }

    fn op<T>(path: &str, r: Result<T, ClientError>) -> Result<T, SessionError> {
        r.map_err(|source| SessionError::Op {
            path: path.to_string(),
            source,
        })
    }

    /// Read a whole file.
    pub fn read(&mut self, path: &str) -> Result<Vec<u8>, SessionError> {
        let fid = Self::op(path, self.client.walk_open(path, OREAD))?;
        let data = Self::op(path, self.client.read_all(fid));
        let _ = self.client.clunk(fid);
        data
    }

    /// Write `data` to a file.
    pub fn write(&mut self, path: &str, data: &[u8]) -> Result<(), SessionError> {
        let fid = Self::op(path, self.client.walk_open(path, OWRITE))?;
        let r = self.client.write(fid, data);
        let _ = self.client.clunk(fid);
        Self::op(path, r).map(|_| ())
    }

    /// Write `data` then read the answer on the same fid (the write and the
    /// first read go out together).
    pub fn rdwr(&mut self, path: &str, data: &[u8]) -> Result<Vec<u8>, SessionError> {
        let fid = Self::op(path, self.client.walk_open(path, ORDWR))?;
        let iounit = self.client.iounit();
        let r = self.client.write_read(fid, data, iounit).and_then(|first| {
            if first.is_empty() {
                Ok(first)
            } else {
                self.client.read_on(fid, first)
            }
        });
        let _ = self.client.clunk(fid);
        Self::op(path, r)
    }

    pub fn stat(&mut self, path: &str) -> Result<Stat, SessionError> {
        Self::op(path, self.client.stat(path))
    }

    pub fn ls(&mut self, path: &str) -> Result<Vec<Stat>, SessionError> {
        Self::op(path, self.client.ls(path))
    }

    /// Load `tool` for `agent` unless it is loaded already.
    pub fn ensure_loaded(&mut self, agent: &str, tool: &str) -> Result<(), SessionError> {
        let loaded = self.rdwr("tools", agent.as_bytes())?;
        let loaded: Vec<Value> = serde_json::from_slice(&loaded).unwrap_or_default();
        if loaded
            .iter()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(tool))
        {
            return Ok(());
        }
        self.write("ctl", format!("load {agent} {tool}\n").as_bytes())
    }

    /// The payload of a call: token, tool, agent, working directory and the
    /// arguments as one JSON object.
    pub fn payload(
        &self,
        agent: &str,
        tool: &str,
        args: &Map<String, Value>,
        cwd: Option<&Path>,
    ) -> String {
        let args = Value::Object(args.clone()).to_string();
        let cwd = cwd.map(|c| c.to_string_lossy().into_owned());
        let mut fields: Vec<(&str, &str)> = Vec::new();
        if let Some(t) = &self.token {
            fields.push(("token", t));
        }
        fields.push(("tool", tool));
        fields.push(("agent", agent));
        if let Some(c) = &cwd {
            fields.push(("cwd", c));
        }
        fields.push(("args", &args));
        encode_payload(&fields)
    }

    /// Run a synchronous call and return its result.
    ///
    /// The `proc/new` fid stays open for the next call. If anything fails
    /// mid-call it is clunked (which also cancels a call still running) and
    /// the next call opens a fresh one.
    pub fn call(
        &mut self,
        agent: &str,
        tool: &str,
        args: &Map<String, Value>,
        cwd: Option<&Path>,
    ) -> Result<ToolResult, SessionError> {
        const PATH: &str = "proc/new";
        let payload = self.payload(agent, tool, args, cwd);
        let fid = match self.call_fid.take() {
            Some(fid) => fid,
            None => Self::op(PATH, self.client.walk_open(PATH, ORDWR))?,
        };
        let answer = match self.send_call(fid, payload.as_bytes()) {
            Ok(a) => a,
            Err(e) => {
                let _ = self.client.clunk(fid);
                return Self::op(PATH, Err(e));
            }
        };
        self.call_fid = Some(fid);
        serde_json::from_slice(&answer)
            .map_err(|_| SessionError::BadResult(String::from_utf8_lossy(&answer).into_owned()))
    }

    /// Sends a call's payload and reads its answer: the write and the first
    /// read go out together (one round trip). The server computes the whole
    /// result before that read returns, so a short read holding a complete
    /// JSON value is all of it (a proper prefix of a JSON object never
    /// parses); anything else is read on until an empty read.
    fn send_call(&mut self, fid: Fid, payload: &[u8]) -> Result<Vec<u8>, ClientError> {
        let iounit = self.client.iounit();
        let out = self.client.write_read(fid, payload, iounit)?;
        if out.is_empty()
            || (out.len() < iounit as usize && serde_json::from_slice::<Value>(&out).is_ok())
        {
            return Ok(out);
        }
        self.client.read_on(fid, out)
    }

    /// Start a background call and return its PID.
    pub fn call_bg(
        &mut self,
        agent: &str,
        tool: &str,
        args: &Map<String, Value>,
        cwd: Option<&Path>,
    ) -> Result<u64, SessionError> {
        let payload = self.payload(agent, tool, args, cwd);
        let answer = self.rdwr("proc/new.bg", payload.as_bytes())?;
        let text = String::from_utf8_lossy(&answer);
        text.trim()
            .parse()
            .map_err(|_| SessionError::BadResult(text.into_owned()))
    }
}
