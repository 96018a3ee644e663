//! Optional embedding ranker: asks an OpenAI-compatible or Ollama endpoint for
//! vectors, caches tool vectors on disk, and scores docs by cosine similarity.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;

use super::Doc;
use super::cache::{self, Key};

/// Default time allowed for one embeddings request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Texts sent per request, so a first indexing of many tools stays within
/// what local servers accept in one body.
const BATCH: usize = 64;

/// Characters of a tool's text that are embedded; small embedding models
/// have short context windows and the start of a tool's text says the most.
const MAX_TEXT_CHARS: usize = 2000;

/// Largest response body read (a batch of 64 large vectors is a few MiB).
const MAX_RESPONSE: u64 = 64 << 20;

/// Which wire format the endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedKind {
    /// `POST {base}/v1/embeddings`, answer `{"data":[{"embedding":[…],"index":n}]}`.
    OpenAi,
    /// `POST {base}/api/embed`, answer `{"embeddings":[[…]]}`.
    Ollama,
}

impl std::str::FromStr for EmbedKind {
    type Err = EmbedError;
    fn from_str(s: &str) -> Result<Self, EmbedError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" | "" => Ok(Self::OpenAi),
            "ollama" => Ok(Self::Ollama),
            other => Err(EmbedError::Config(format!(
                "unknown embedding endpoint kind {other:?}; use \"openai\" or \"ollama\""
            ))),
        }
    }
}

/// Where and how to get embeddings.
#[derive(Clone)]
pub struct EmbedConfig {
    /// Base URL, e.g. `http://127.0.0.1:11434`. A full endpoint path is also
    /// accepted. Plain HTTP only: endpoints are expected to be local.
    pub url: String,
    pub model: String,
    pub kind: EmbedKind,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Directory for the on-disk vector cache; `None` keeps vectors in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Sent as `Authorization: Bearer …` when set. Never logged.
    pub api_key: Option<String>,
}

impl fmt::Debug for EmbedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbedConfig")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("kind", &self.kind)
            .field("timeout", &self.timeout)
            .field("cache_dir", &self.cache_dir)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl EmbedConfig {
    /// A config with the default timeout, no disk cache and no API key.
    pub fn new(url: impl Into<String>, model: impl Into<String>, kind: EmbedKind) -> Self {
        Self {
            url: url.into(),
            model: model.into(),
            kind,
            timeout: DEFAULT_TIMEOUT,
            cache_dir: None,
            api_key: None,
        }
    }

    /// Reads `TOOLSRV_EMBED_URL`, `TOOLSRV_EMBED_MODEL`, `TOOLSRV_EMBED_KIND`
    /// (`openai`, the default, or `ollama`), `TOOLSRV_EMBED_TIMEOUT` (seconds,
    /// default 2), `TOOLSRV_EMBED_CACHE` (default
    /// `$XDG_CACHE_HOME/toolsrv` or `~/.cache/toolsrv`) and
    /// `TOOLSRV_EMBED_API_KEY`. `Ok(None)` when no URL is set.
    pub fn from_env() -> Result<Option<Self>, EmbedError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let Some(url) = var("TOOLSRV_EMBED_URL") else {
            return Ok(None);
        };
        let model = var("TOOLSRV_EMBED_MODEL").ok_or_else(|| {
            EmbedError::Config("TOOLSRV_EMBED_URL is set but TOOLSRV_EMBED_MODEL is not".into())
        })?;
        let kind = var("TOOLSRV_EMBED_KIND").unwrap_or_default().parse()?;
        let mut cfg = Self::new(url, model, kind);
        if let Some(t) = var("TOOLSRV_EMBED_TIMEOUT") {
            let secs: f64 = t
                .trim()
                .parse()
                .ok()
                .filter(|s: &f64| *s > 0.0 && s.is_finite())
                .ok_or_else(|| {
                    EmbedError::Config(format!(
                        "TOOLSRV_EMBED_TIMEOUT={t:?} is not a positive number of seconds"
                    ))
                })?;
            cfg.timeout = Duration::from_secs_f64(secs);
        }
        cfg.cache_dir = var("TOOLSRV_EMBED_CACHE")
            .map(PathBuf::from)
            .or_else(|| crate::dirs::cache_home().map(|c| c.join("toolsrv")));
        cfg.api_key = var("TOOLSRV_EMBED_API_KEY");
        Ok(Some(cfg))
    }

    /// The endpoint URL requests go to.
    pub fn endpoint(&self) -> String {
        let base = self.url.trim_end_matches('/');
        match self.kind {
            EmbedKind::OpenAi if base.ends_with("/embeddings") => base.to_string(),
            EmbedKind::OpenAi if base.ends_with("/v1") => format!("{base}/embeddings"),
            EmbedKind::OpenAi => format!("{base}/v1/embeddings"),
            EmbedKind::Ollama if base.ends_with("/api/embed") => base.to_string(),
            EmbedKind::Ollama => format!("{base}/api/embed"),
        }
    }
}

/// Why embeddings could not be had.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding configuration: {0}")]
    Config(String),
    #[error("embedding endpoint {url} did not answer in time ({timeout:?})")]
    Timeout { url: String, timeout: Duration },
    #[error("embedding endpoint {url} failed: {reason}")]
    Request { url: String, reason: String },
    #[error("embedding endpoint {url} gave an unusable answer: {reason}")]
    BadResponse { url: String, reason: String },
}

#[derive(Deserialize)]
struct OpenAiResponse {
    data: Vec<OpenAiItem>,
}

#[derive(Deserialize)]
struct OpenAiItem {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

#[derive(Deserialize)]
struct OllamaResponse {
    embeddings: Vec<Vec<f32>>,
}

/// The text embedded for a doc: its name, description, keywords and the start
/// of its prompt (the spec's ranking text: description, prompt, keywords).
pub fn embedding_text(doc: &Doc) -> String {
    let mut s = format!("{}: {}\n", doc.name, doc.description);
    if !doc.keywords.is_empty() {
        s.push_str(&doc.keywords.join(", "));
        s.push('\n');
    }
    s.push_str(&doc.prompt);
    match s.char_indices().nth(MAX_TEXT_CHARS) {
        Some((cut, _)) => s[..cut].to_string(),
        None => s,
    }
}

/// Embedding client plus vector cache. Tool vectors are kept in memory and,
/// with a cache directory, on disk; a doc's text is sent only when its
/// SHA-256 key is in neither.
pub struct EmbeddingRanker {
    config: EmbedConfig,
    agent: ureq::Agent,
    memory: Mutex<Option<HashMap<Key, Vec<f32>>>>,
}

impl EmbeddingRanker {
    pub fn new(config: EmbedConfig) -> Self {
        let agent_cfg = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            // Endpoints are local; a proxy from the environment would only get in the way.
            .proxy(None)
            .http_status_as_error(true)
            .build();
        Self {
            agent: ureq::Agent::new_with_config(agent_cfg),
            config,
            memory: Mutex::new(None),
        }
    }

    pub fn config(&self) -> &EmbedConfig {
        &self.config
    }

    /// Embeds `texts` (in batches), one vector per text, in order.
    pub fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            out.extend(self.embed_batch(chunk)?);
        }
        Ok(out)
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let url = self.config.endpoint();
        let body = serde_json::json!({ "model": self.config.model, "input": texts }).to_string();
        let mut req = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.config.api_key {
            req = req.header("Authorization", &format!("Bearer {key}"));
        }
        let fail = |e: ureq::Error| match e {
            ureq::Error::Timeout(_) => EmbedError::Timeout {
                url: url.clone(),
                timeout: self.config.timeout,
            },
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                EmbedError::Timeout {
                    url: url.clone(),
                    timeout: self.config.timeout,
                }
            }
            other => EmbedError::Request {
                url: url.clone(),
                reason: other.to_string(),
            },
        };
        let mut resp = req.send(body.as_str()).map_err(fail)?;
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE)
            .read_to_string()
            .map_err(fail)?;
        let bad = |reason: String| EmbedError::BadResponse {
            url: url.clone(),
            reason,
        };
        let vectors = match self.config.kind {
            EmbedKind::OpenAi => {
                let r: OpenAiResponse =
                    serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
                let mut items: Vec<(usize, Vec<f32>)> = r
                    .data
                    .into_iter()
                    .enumerate()
                    .map(|(i, it)| (it.index.unwrap_or(i), it.embedding))
                    .collect();
                items.sort_by_key(|(i, _)| *i);
                items.into_iter().map(|(_, v)| v).collect::<Vec<_>>()
            }
            EmbedKind::Ollama => {
                let r: OllamaResponse =
                    serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
                r.embeddings
            }
        };
        if vectors.len() != texts.len() {
            return Err(bad(format!(
                "{} vectors for {} inputs",
                vectors.len(),
                texts.len()
            )));
        }
        Ok(vectors)
    }

    /// One vector per doc, from the cache where the doc's text is unchanged,
    /// embedding only the others. New vectors are written back to the disk
    /// cache, which then holds exactly the vectors of `docs`.
    pub fn doc_vectors(&self, docs: &[Doc]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let model = &self.config.model;
        let texts: Vec<String> = docs.iter().map(embedding_text).collect();
        let keys: Vec<Key> = texts.iter().map(|t| cache::key(model, t)).collect();
        let path = self
            .config
            .cache_dir
            .as_ref()
            .map(|d| cache::path_for(d, model));

        let mut guard = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        let mem = guard.get_or_insert_with(|| path.as_deref().map(cache::load).unwrap_or_default());

        let wanted: HashSet<Key> = keys.iter().copied().collect();
        let stale = mem.keys().any(|k| !wanted.contains(k));
        let mut missing: Vec<usize> = Vec::new();
        let mut queued = HashSet::new();
        for (i, k) in keys.iter().enumerate() {
            if !mem.contains_key(k) && queued.insert(*k) {
                missing.push(i);
            }
        }
        if !missing.is_empty() {
            tracing::debug!(count = missing.len(), "embedding new or changed tools");
            let batch: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
            let vectors = self.embed(&batch)?;
            for (&i, v) in missing.iter().zip(vectors) {
                mem.insert(keys[i], v);
            }
        }
        if !missing.is_empty() || stale {
            mem.retain(|k, _| wanted.contains(k));
            if let Some(p) = &path
                && let Err(e) = cache::store(p, mem)
            {
                tracing::warn!(path = %p.display(), error = %e, "cannot write embedding cache");
            }
        }
        Ok(keys
            .iter()
            .map(|k| mem.get(k).cloned().unwrap_or_default())
            .collect())
    }

    /// Cosine similarity of `query` to every doc, in doc order.
    pub fn similarities(&self, docs: &[Doc], query: &str) -> Result<Vec<f32>, EmbedError> {
        let vectors = self.doc_vectors(docs)?;
        let q = self.embed(&[query.to_string()])?.pop().unwrap_or_default();
        Ok(vectors.iter().map(|v| cosine(&q, v)).collect())
    }
}

/// Cosine similarity; 0 for empty, zero or mismatched vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_kinds() {
        let e = |url: &str, kind| EmbedConfig::new(url, "m", kind).endpoint();
        assert_eq!(
            e("http://h:1", EmbedKind::OpenAi),
            "http://h:1/v1/embeddings"
        );
        assert_eq!(
            e("http://h:1/v1/", EmbedKind::OpenAi),
            "http://h:1/v1/embeddings"
        );
        assert_eq!(
            e("http://h:1/v1/embeddings", EmbedKind::OpenAi),
            "http://h:1/v1/embeddings"
        );
        assert_eq!(e("http://h:1/", EmbedKind::Ollama), "http://h:1/api/embed");
        assert_eq!(
            e("http://h:1/api/embed", EmbedKind::Ollama),
            "http://h:1/api/embed"
        );
        assert_eq!("Ollama".parse::<EmbedKind>().unwrap(), EmbedKind::Ollama);
        assert_eq!("".parse::<EmbedKind>().unwrap(), EmbedKind::OpenAi);
        assert!("bert".parse::<EmbedKind>().is_err());
    }

    #[test]
    fn api_key_is_not_in_debug_output() {
        let mut c = EmbedConfig::new("http://h", "m", EmbedKind::OpenAi);
        c.api_key = Some("sekrit".into());
        assert!(!format!("{c:?}").contains("sekrit"));
    }

    #[test]
    fn embedding_text_is_bounded() {
        let d = Doc {
            name: "n".into(),
            description: "d".into(),
            prompt: "é".repeat(5000),
            keywords: vec!["k1".into(), "k2".into()],
        };
        let t = embedding_text(&d);
        assert!(t.starts_with("n: d\nk1, k2\n"));
        assert_eq!(t.chars().count(), MAX_TEXT_CHARS);
        assert_eq!(cosine(&[1.0, 0.0], &[2.0, 0.0]), 1.0);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }
}
