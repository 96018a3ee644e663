//! Retrieval quality figure: runs labelled queries against a directory of
//! `.meta` files and reports recall@1 and recall@5 per ranker.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

use super::embed::{EmbedConfig, EmbedError, EmbeddingRanker};
use super::{Doc, Hit, LexicalIndex, combine, lexical};

/// Hits looked at for recall@5.
const K: usize = 5;

/// A prepared ranker: query in, top hits out.
type RankFn<'a> = Box<dyn Fn(&str) -> Result<Vec<Hit>, EvalError> + 'a>;

/// Which ranking to evaluate.
#[derive(Debug, Clone)]
pub enum Ranker {
    /// BM25F only.
    Lexical,
    /// Cosine similarity from the endpoint only.
    Embedding(EmbedConfig),
    /// The combined score [`super::search`] uses.
    Hybrid(EmbedConfig),
}

impl Ranker {
    pub fn label(&self) -> &'static str {
        match self {
            Ranker::Lexical => "lexical",
            Ranker::Embedding(_) => "embedding",
            Ranker::Hybrid(_) => "hybrid",
        }
    }
}

/// A query the ranker did not answer with an acceptable tool first.
#[derive(Debug, Clone, PartialEq)]
pub struct Miss {
    pub query: String,
    pub expected: Vec<String>,
    /// The top hits actually returned, best first.
    pub got: Vec<String>,
    /// 1-based rank of the first acceptable tool within the top 5, if any.
    pub rank: Option<usize>,
}

/// Quality of one ranker on the labelled set.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalReport {
    pub ranker: String,
    pub tools: usize,
    pub queries: usize,
    pub recall_at_1: f64,
    pub recall_at_5: f64,
    /// Every query whose best hit was not acceptable.
    pub misses: Vec<Miss>,
}

/// Why an evaluation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("query {0:?} names no acceptable tool")]
    Unlabelled(String),
    #[error("query {query:?} expects unknown tool {tool:?}")]
    UnknownTool { query: String, tool: String },
    #[error(transparent)]
    Embed(#[from] EmbedError),
}

/// The four ranking fields of a `.meta` file; everything else is ignored.
#[derive(Deserialize)]
struct MetaFields {
    #[serde(default)]
    description: String,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    keywords: Vec<String>,
}

/// One labelled request and the tool names that would satisfy it.
#[derive(Debug, Clone, Deserialize)]
pub struct Query {
    pub query: String,
    pub expect: Vec<String>,
}

/// Reads every `*.meta` in `dir` (not recursive) as a [`Doc`] named after the
/// file stem, sorted by name.
pub fn load_tools(dir: &Path) -> Result<Vec<Doc>, EvalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| EvalError::Io { path, source }
    };
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.extension().is_none_or(|e| e != "meta") {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let m: MetaFields = serde_json::from_str(&text).map_err(|source| EvalError::Json {
            path: path.clone(),
            source,
        })?;
        docs.push(Doc {
            name: name.to_string(),
            description: m.description,
            prompt: m.prompt,
            keywords: m.keywords,
        });
    }
    docs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(docs)
}

/// Reads a queries file: a JSON array of `{"query": …, "expect": [names]}`.
pub fn load_queries(path: &Path) -> Result<Vec<Query>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| EvalError::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Runs every query of `queries_file` against the tools in `tools_dir` with
/// `ranker`. recall@k is the share of queries with an acceptable tool among
/// the first k hits.
pub fn evaluate(
    tools_dir: &Path,
    queries_file: &Path,
    ranker: &Ranker,
) -> Result<EvalReport, EvalError> {
    let docs = load_tools(tools_dir)?;
    let queries = load_queries(queries_file)?;
    for q in &queries {
        if q.expect.is_empty() {
            return Err(EvalError::Unlabelled(q.query.clone()));
        }
        if let Some(t) = q
            .expect
            .iter()
            .find(|t| !docs.iter().any(|d| &d.name == *t))
        {
            return Err(EvalError::UnknownTool {
                query: q.query.clone(),
                tool: t.clone(),
            });
        }
    }
    let rank: RankFn<'_> = match ranker {
        Ranker::Lexical => {
            let index = LexicalIndex::new(&docs);
            Box::new(move |q| Ok(index.rank(q, K)))
        }
        Ranker::Embedding(cfg) => {
            let er = EmbeddingRanker::new(cfg.clone());
            let names: Vec<String> = docs.iter().map(|d| d.name.clone()).collect();
            let docs = docs.clone();
            Box::new(move |q| Ok(lexical::top_hits(&names, &er.similarities(&docs, q)?, K)))
        }
        Ranker::Hybrid(cfg) => {
            let index = LexicalIndex::new(&docs);
            let er = EmbeddingRanker::new(cfg.clone());
            let docs = docs.clone();
            Box::new(move |q| {
                let cos = er.similarities(&docs, q)?;
                Ok(combine(&docs, &index.scores(q), &cos, K))
            })
        }
    };
    score_queries(ranker.label(), docs.len(), &queries, rank)
}

/// Runs `queries` through `rank` and measures recall.
fn score_queries(
    label: &str,
    tools: usize,
    queries: &[Query],
    rank: RankFn<'_>,
) -> Result<EvalReport, EvalError> {
    let (mut at1, mut at5) = (0usize, 0usize);
    let mut misses = Vec::new();
    for q in queries {
        let hits = rank(&q.query)?;
        let got: Vec<String> = hits.into_iter().map(|h| h.name).collect();
        let pos = got.iter().position(|n| q.expect.contains(n));
        match pos {
            Some(0) => at1 += 1,
            _ => misses.push(Miss {
                query: q.query.clone(),
                expected: q.expect.clone(),
                got: got.clone(),
                rank: pos.map(|p| p + 1),
            }),
        }
        if pos.is_some() {
            at5 += 1;
        }
    }
    let n = queries.len().max(1) as f64;
    Ok(EvalReport {
        ranker: label.to_string(),
        tools,
        queries: queries.len(),
        recall_at_1: at1 as f64 / n,
        recall_at_5: at5 as f64 / n,
        misses,
    })
}

/// Evaluates the lexical ranker and, with `embed`, the embedding and hybrid
/// rankers, and returns a printable report. An unreachable endpoint is
/// reported in the text, not as an error.
pub fn run_eval(
    tools_dir: &Path,
    queries: &Path,
    embed: Option<EmbedConfig>,
) -> anyhow::Result<String> {
    let mut rankers = vec![Ranker::Lexical];
    if let Some(cfg) = embed {
        rankers.push(Ranker::Embedding(cfg.clone()));
        rankers.push(Ranker::Hybrid(cfg));
    }
    let mut out = String::new();
    for r in &rankers {
        match evaluate(tools_dir, queries, r) {
            Ok(rep) => {
                let _ = writeln!(
                    out,
                    "{:<10} recall@1 {:.3}  recall@5 {:.3}  ({} queries, {} tools)",
                    rep.ranker, rep.recall_at_1, rep.recall_at_5, rep.queries, rep.tools
                );
                for m in &rep.misses {
                    let rank = m.rank.map_or("miss".to_string(), |r| format!("#{r}"));
                    let _ = writeln!(
                        out,
                        "  {rank:<5} {:?} expected {} got {}",
                        m.query,
                        m.expected.join("|"),
                        m.got.join(", ")
                    );
                }
            }
            Err(EvalError::Embed(e)) => {
                let _ = writeln!(out, "{:<10} unavailable: {e}", r.label());
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "evaluating {} on {} with {}",
                        r.label(),
                        tools_dir.display(),
                        queries.display()
                    )
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::lexical::Bm25Params;

    /// Parameter sweep used to choose [`Bm25Params::default`]; run by hand with
    /// `cargo test --release --lib tune_bm25 -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn tune_bm25() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("eval");
        let docs = load_tools(&root.join("tools")).unwrap();
        let queries = load_queries(&root.join("queries.json")).unwrap();
        let mut results = Vec::new();
        for k1 in [0.9f32, 1.2, 1.6] {
            for name in [2.0f32, 3.0, 4.0] {
                for desc in [1.0f32, 2.0, 3.0] {
                    for kw in [1.0f32, 1.5, 2.0, 3.0] {
                        for prompt in [0.3f32, 0.6, 1.0] {
                            let mut p = Bm25Params {
                                k1,
                                ..Bm25Params::default()
                            };
                            for (f, w) in [name, desc, kw, prompt].into_iter().enumerate() {
                                p.fields[f].weight = w;
                            }
                            let index = LexicalIndex::with_params(&docs, p);
                            let rank: RankFn<'_> = Box::new(|q| Ok(index.rank(q, K)));
                            let r = score_queries("t", docs.len(), &queries, rank).unwrap();
                            results.push((r.recall_at_1, r.recall_at_5, p));
                        }
                    }
                }
            }
        }
        results.sort_by(|a, b| (b.1 + b.0 / 2.0).total_cmp(&(a.1 + a.0 / 2.0)));
        for (at1, at5, p) in results.iter().take(20) {
            println!("@1 {at1:.3} @5 {at5:.3} {p:?}");
        }
    }
}
