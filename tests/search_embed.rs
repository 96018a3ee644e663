//! The embedding ranker against a real (fake) embeddings server on
//! 127.0.0.1: cache reuse and invalidation, both wire formats, and fallback
//! to the lexical ranker when the endpoint is down, slow or failing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use toolsrv::search::embed::embedding_text;
use toolsrv::search::{
    Doc, EmbedConfig, EmbedKind, LexicalIndex, SearchOptions, Searcher, run_eval, search,
};

/// What the server saw: one entry per request, (path, input texts).
type Log = Arc<Mutex<Vec<(String, Vec<String>)>>>;

struct FakeServer {
    url: String,
    log: Log,
}

impl FakeServer {
    /// Serves embeddings in `kind`'s format after `delay`, or answers `status`
    /// with an error body when it is not 200.
    fn start(kind: EmbedKind, delay: Duration, status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log: Log = Arc::default();
        let server_log = log.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let log = server_log.clone();
                std::thread::spawn(move || handle(stream, kind, delay, status, &log));
            }
        });
        FakeServer { url, log }
    }

    fn config(&self, kind: EmbedKind, cache: &Path) -> EmbedConfig {
        let mut cfg = EmbedConfig::new(&self.url, "fake-model", kind);
        cfg.cache_dir = Some(cache.to_path_buf());
        cfg
    }

    /// Texts embedded so far, except the given queries.
    fn doc_texts(&self, queries: &[&str]) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .flat_map(|(_, inputs)| inputs.iter())
            .filter(|t| !queries.contains(&t.as_str()))
            .cloned()
            .collect()
    }

    fn requests(&self) -> usize {
        self.log.lock().unwrap().len()
    }
}

fn handle(stream: TcpStream, kind: EmbedKind, delay: Duration, status: u16, log: &Log) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        if header.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(req["model"], "fake-model");
    let inputs: Vec<String> = req["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    log.lock().unwrap().push((path, inputs.clone()));
    std::thread::sleep(delay);
    let vectors: Vec<Vec<f32>> = inputs.iter().map(|t| vector(t)).collect();
    let json = match kind {
        EmbedKind::OpenAi => serde_json::json!({
            "object": "list",
            "data": vectors.iter().enumerate().map(|(i, v)| serde_json::json!({
                "object": "embedding", "index": i, "embedding": v
            })).collect::<Vec<_>>(),
            "model": "fake-model"
        }),
        EmbedKind::Ollama => serde_json::json!({ "model": "fake-model", "embeddings": vectors }),
    };
    let text = if status == 200 {
        json.to_string()
    } else {
        r#"{"error":"boom"}"#.to_string()
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

/// A deterministic "semantic" embedding: a few concept dimensions shared by
/// synonyms, plus hashed dimensions for every other word.
fn vector(text: &str) -> Vec<f32> {
    const CONCEPTS: &[&[&str]] = &[
        &["photo", "picture", "image", "pic", "pictures"],
        &["shrink", "smaller", "scale", "resize", "downscale"],
        &["weather", "forecast", "hot", "cold", "rain", "umbrella"],
        &["git", "commit", "history", "log"],
    ];
    let mut v = vec![0f32; 32];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let w = word.to_lowercase();
        match CONCEPTS.iter().position(|c| c.contains(&w.as_str())) {
            Some(i) => v[i] += 3.0,
            None => {
                let h = w.bytes().fold(2166136261u32, |h, b| {
                    (h ^ u32::from(b)).wrapping_mul(16777619)
                });
                v[4 + (h % 28) as usize] += 0.2;
            }
        }
    }
    v
}

fn doc(name: &str, description: &str) -> Doc {
    Doc {
        name: name.into(),
        description: description.into(),
        prompt: format!("## {name}\n\n{description}"),
        keywords: vec![],
    }
}

fn docs() -> Vec<Doc> {
    vec![
        doc("image_resize", "Scale a picture to new dimensions."),
        doc("weather", "Current conditions and forecast for a city."),
        doc("git_log", "Show commit history."),
    ]
}

fn opts(cfg: EmbedConfig) -> SearchOptions {
    SearchOptions {
        limit: 5,
        embed: Some(cfg),
    }
}

#[test]
fn cached_vectors_are_reused_and_only_changed_docs_are_embedded() {
    let server = FakeServer::start(EmbedKind::OpenAi, Duration::ZERO, 200);
    let cache = tempfile::tempdir().unwrap();
    let cfg = server.config(EmbedKind::OpenAi, cache.path());
    let mut docs = docs();
    let q = "show commit history";

    let out = search(&docs, q, &opts(cfg.clone()));
    assert_eq!(out.degraded, None);
    assert_eq!(out.hits[0].name, "git_log");
    assert_eq!(server.doc_texts(&[q]).len(), 3);
    assert_eq!(server.log.lock().unwrap()[0].0, "/v1/embeddings");
    assert!(
        std::fs::read_dir(cache.path()).unwrap().count() == 1,
        "one cache file"
    );

    // A new search (fresh ranker, so vectors come from disk): only the query is sent.
    let out = search(&docs, q, &opts(cfg.clone()));
    assert_eq!(out.degraded, None);
    assert_eq!(server.doc_texts(&[q]).len(), 3, "no doc re-embedded");

    // One changed doc: exactly its new text is embedded.
    docs[1].description = "Weather forecast: rain, wind and temperature.".into();
    let before = server.requests();
    let out = search(&docs, q, &opts(cfg.clone()));
    assert_eq!(out.degraded, None);
    let texts = server.doc_texts(&[q]);
    assert_eq!(texts.len(), 4);
    assert_eq!(texts[3], embedding_text(&docs[1]));
    assert_eq!(
        server.requests(),
        before + 2,
        "one batch for the doc, one for the query"
    );

    // A long-lived searcher keeps vectors in memory: queries cost one request each.
    let searcher = Searcher::new(docs.clone(), Some(cfg));
    let before = server.requests();
    for query in ["rain tomorrow", "resize a photo"] {
        assert_eq!(searcher.search(query, 3).degraded, None);
    }
    assert_eq!(server.requests(), before + 2);
    assert_eq!(
        server
            .doc_texts(&[q, "rain tomorrow", "resize a photo"])
            .len(),
        4
    );
}

#[test]
fn ollama_endpoint_adds_semantic_matches() {
    let server = FakeServer::start(EmbedKind::Ollama, Duration::ZERO, 200);
    let cache = tempfile::tempdir().unwrap();
    let cfg = server.config(EmbedKind::Ollama, cache.path());
    let docs = docs();
    let q = "shrink my photo";
    // No word of the request is in any tool's text...
    assert!(LexicalIndex::new(&docs).rank(q, 5).is_empty());
    // ...but the embedding ranker knows a photo is a picture.
    let out = search(&docs, q, &opts(cfg));
    assert_eq!(out.degraded, None);
    assert_eq!(out.hits[0].name, "image_resize", "{:?}", out.hits);
    assert_eq!(out.hits[0].score, 1.0);
    assert!(out.hits.iter().all(|h| (0.0..=1.0).contains(&h.score)));
    assert!(
        server
            .log
            .lock()
            .unwrap()
            .iter()
            .all(|(p, _)| p == "/api/embed")
    );
}

fn assert_lexical_fallback(cfg: EmbedConfig, expect_in_reason: &str) {
    let docs = docs();
    let q = "commit history";
    let out = search(&docs, q, &opts(cfg));
    let reason = out.degraded.expect("degraded");
    println!("degraded: {reason}");
    assert!(reason.contains(expect_in_reason), "{reason}");
    assert!(reason.contains("lexical"), "{reason}");
    assert_eq!(out.hits, LexicalIndex::new(&docs).rank(q, 5));
    assert_eq!(out.hits[0].name, "git_log");
}

/// A local URL nothing listens on (a port just bound and released).
fn dead_url() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

#[test]
fn endpoint_down_falls_back_to_lexical() {
    let cache = tempfile::tempdir().unwrap();
    let url = dead_url();
    let mut cfg = EmbedConfig::new(&url, "fake-model", EmbedKind::OpenAi);
    cfg.cache_dir = Some(cache.path().to_path_buf());
    assert_lexical_fallback(cfg, &url);
}

#[test]
fn slow_endpoint_times_out_and_falls_back() {
    let server = FakeServer::start(EmbedKind::OpenAi, Duration::from_secs(3), 200);
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = server.config(EmbedKind::OpenAi, cache.path());
    cfg.timeout = Duration::from_millis(300);
    let t = Instant::now();
    assert_lexical_fallback(cfg.clone(), "did not answer in time");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    // A long-lived searcher pays the timeout once, then backs off.
    let searcher = Searcher::new(docs(), Some(cfg));
    let first = searcher.search("rain", 3);
    let before = server.requests();
    let t = Instant::now();
    let second = searcher.search("rain", 3);
    assert!(
        t.elapsed() < Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(server.requests(), before, "endpoint not asked again");
    assert_eq!(second.hits, first.hits);
    assert!(second.degraded.unwrap().contains("retried in"));
}

#[test]
fn failing_endpoint_falls_back() {
    let server = FakeServer::start(EmbedKind::OpenAi, Duration::ZERO, 500);
    let cache = tempfile::tempdir().unwrap();
    assert_lexical_fallback(server.config(EmbedKind::OpenAi, cache.path()), "500");
}

#[test]
fn run_eval_reports_every_ranker() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
    let (tools, queries) = (root.join("tools"), root.join("queries.json"));
    let server = FakeServer::start(EmbedKind::OpenAi, Duration::ZERO, 200);
    let cache = tempfile::tempdir().unwrap();
    let text = run_eval(
        &tools,
        &queries,
        Some(server.config(EmbedKind::OpenAi, cache.path())),
    )
    .unwrap();
    for label in ["lexical ", "embedding ", "hybrid "] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(label) && l.contains("recall@5")),
            "{text}"
        );
    }
    let down = EmbedConfig::new(dead_url(), "m", EmbedKind::Ollama);
    let text = run_eval(&tools, &queries, Some(down)).unwrap();
    assert!(text.contains("lexical    recall@1"), "{text}");
    assert!(text.contains("embedding  unavailable"), "{text}");
    assert!(text.contains("hybrid     unavailable"), "{text}");
}
