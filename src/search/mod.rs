//! Tool discovery ranking: which tools fit a user's request. A lexical BM25F
//! ranker always answers; an optional embedding endpoint refines the order.
//!
//! Scoring: every score is relative to the best hit of its ranker (best = 1).
//! With embeddings, a doc's final score is `0.5 * lexical + 0.5 * cosine`,
//! where `cosine` is the query–doc cosine similarity (negative counted as 0)
//! divided by the best one; the combined scores are again divided by the
//! best, so the top hit always scores 1.0. If the endpoint fails or times
//! out, the lexical order is returned and [`SearchOutcome::degraded`] says why;
//! a [`Searcher`] then leaves the endpoint alone for [`RETRY_AFTER`].

mod cache;
pub mod embed;
pub mod eval;
pub mod lexical;
pub mod tokenize;

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use embed::{EmbedConfig, EmbedError, EmbedKind, EmbeddingRanker};
pub use eval::{EvalReport, Miss, Ranker, evaluate, run_eval};
pub use lexical::LexicalIndex;

/// What the rankers see of a tool. `keywords` are discovery-only vocabulary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Doc {
    pub name: String,
    pub description: String,
    pub prompt: String,
    pub keywords: Vec<String>,
}

/// One ranked tool; `score` is in 0..=1, the best hit scoring 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub name: String,
    pub score: f32,
}

/// How to search.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Most hits returned.
    pub limit: usize,
    /// Embedding endpoint; `None` ranks lexically only.
    pub embed: Option<EmbedConfig>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            limit: 10,
            embed: None,
        }
    }
}

/// Ranked hits, and why the embedding ranker was not used when it was asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOutcome {
    pub hits: Vec<Hit>,
    pub degraded: Option<String>,
}

/// Weight of the lexical score in the combined score (the rest is cosine).
pub const LEXICAL_WEIGHT: f32 = 0.5;

/// A reusable search over a fixed set of docs: the lexical index is built
/// once and embedding vectors stay in memory between queries.
pub struct Searcher {
    docs: Vec<Doc>,
    index: LexicalIndex,
    embed: Option<EmbeddingRanker>,
    /// When the endpoint last failed, and why: it is not asked again until
    /// [`RETRY_AFTER`] has passed, so a dead or slow endpoint costs one
    /// timeout, not one per query.
    failed: Mutex<Option<(Instant, String)>>,
}

/// How long a [`Searcher`] ranks lexically only after the endpoint failed.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

impl Searcher {
    pub fn new(docs: Vec<Doc>, embed: Option<EmbedConfig>) -> Self {
        Self {
            index: LexicalIndex::new(&docs),
            embed: embed.map(EmbeddingRanker::new),
            docs,
            failed: Mutex::new(None),
        }
    }

    pub fn docs(&self) -> &[Doc] {
        &self.docs
    }

    /// The best `limit` docs for `query`. Never fails: without a working
    /// embedding endpoint the lexical ranking is returned, marked degraded.
    pub fn search(&self, query: &str, limit: usize) -> SearchOutcome {
        let Some(ranker) = &self.embed else {
            return SearchOutcome {
                hits: self.index.rank(query, limit),
                degraded: None,
            };
        };
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((when, why)) = failed.as_ref()
            && when.elapsed() < RETRY_AFTER
        {
            let wait = RETRY_AFTER.saturating_sub(when.elapsed()).as_secs() + 1;
            return SearchOutcome {
                hits: self.index.rank(query, limit),
                degraded: Some(format!(
                    "{why}; results are from the lexical ranker only (endpoint retried in {wait}s)"
                )),
            };
        }
        match ranker.similarities(&self.docs, query) {
            Ok(cos) => {
                *failed = None;
                SearchOutcome {
                    hits: combine(&self.docs, &self.index.scores(query), &cos, limit),
                    degraded: None,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "embedding ranker unavailable; lexical ranking only");
                *failed = Some((Instant::now(), e.to_string()));
                SearchOutcome {
                    hits: self.index.rank(query, limit),
                    degraded: Some(format!("{e}; results are from the lexical ranker only")),
                }
            }
        }
    }
}

/// Ranks `docs` for `query` (see the module docs for scoring and fallback).
pub fn search(docs: &[Doc], query: &str, opts: &SearchOptions) -> SearchOutcome {
    Searcher::new(docs.to_vec(), opts.embed.clone()).search(query, opts.limit)
}

/// Combines raw lexical scores and cosine similarities, as documented above.
pub(crate) fn combine(docs: &[Doc], lexical: &[f32], cosine: &[f32], limit: usize) -> Vec<Hit> {
    let top_lex = lexical.iter().copied().fold(0f32, f32::max);
    let top_cos = cosine.iter().copied().fold(0f32, f32::max);
    let rel = |x: f32, top: f32| if top > 0.0 { x.max(0.0) / top } else { 0.0 };
    let scores: Vec<f32> = lexical
        .iter()
        .zip(cosine)
        .map(|(&l, &c)| LEXICAL_WEIGHT * rel(l, top_lex) + (1.0 - LEXICAL_WEIGHT) * rel(c, top_cos))
        .collect();
    let names: Vec<String> = docs.iter().map(|d| d.name.clone()).collect();
    lexical::top_hits(&names, &scores, limit)
}
