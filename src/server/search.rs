//! The `search` file: rank every discovered tool for a request written as
//! `query=`/`limit=`/`agent=`/`min_score=` lines.

use std::sync::Arc;

use serde::Serialize;

use super::Server;
use crate::meta::Catalog;
use crate::ninep::fs::FsError;
use crate::search::{Doc, Searcher};

/// What the `search` file answers for each hit.
#[derive(Serialize)]
struct SearchHit<'a> {
    name: &'a str,
    score: f32,
    description: &'a str,
    loaded: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    degraded: Option<&'a str>,
}

struct Query {
    text: String,
    limit: usize,
    agent: String,
    min_score: f32,
}

/// The request uses the payload encoding (`key=value` lines, `\\`/`\n` escaped).
fn parse(written: &[u8]) -> Result<Query, FsError> {
    let text = std::str::from_utf8(written).map_err(|_| FsError::new("search: not UTF-8"))?;
    let p = crate::protocol::parse_payload(text).map_err(|e| FsError(format!("search: {e}")))?;
    let mut q = Query {
        text: String::new(),
        limit: 10,
        agent: p.agent.unwrap_or_default(),
        min_score: 0.0,
    };
    for (k, v) in p.fields {
        match k.as_str() {
            "query" => q.text = v.trim().to_string(),
            "limit" => {
                q.limit = v.trim().parse().map_err(|_| {
                    FsError::new(format!("search: limit {v:?} is not a whole number"))
                })?
            }
            "min_score" => {
                q.min_score = v
                    .trim()
                    .parse()
                    .map_err(|_| FsError::new(format!("search: min_score {v:?} is not a number")))?
            }
            other => {
                return Err(FsError::new(format!(
                    "search: unknown key {other:?}; use query, limit, agent, min_score"
                )));
            }
        }
    }
    if q.text.is_empty() {
        return Err(FsError::new(
            "search: write query=<what the user asked> first",
        ));
    }
    Ok(q)
}

impl Server {
    /// The current catalog and its index (rebuilt only when discovery changed).
    fn searcher(&self) -> (Arc<Catalog>, Arc<Searcher>) {
        let catalog = self.discoverer.discover();
        let mut cached = self.searcher.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((c, s)) = cached.as_ref()
            && Arc::ptr_eq(c, &catalog)
        {
            return (catalog, s.clone());
        }
        let docs = catalog
            .tools
            .values()
            .map(|t| Doc {
                name: t.name.clone(),
                description: t.description.clone(),
                prompt: t.prompt.clone(),
                keywords: t.keywords.clone(),
            })
            .collect();
        let s = Arc::new(Searcher::new(docs, self.config.embed.clone()));
        *cached = Some((catalog.clone(), s.clone()));
        (catalog, s)
    }

    /// Answer a search request as a JSON list of hits.
    pub(super) async fn search(&self, written: &[u8]) -> Result<Arc<[u8]>, FsError> {
        let q = parse(written)?;
        let (catalog, searcher) = self.searcher();
        // The embedding ranker makes blocking HTTP requests: keep them off the runtime.
        let (text, limit) = (q.text.clone(), q.limit);
        let outcome = tokio::task::spawn_blocking(move || searcher.search(&text, limit))
            .await
            .map_err(|e| FsError(format!("search failed: {e}")))?;
        let loaded: Vec<String> = self
            .registry
            .loaded(&q.agent)
            .iter()
            .map(|t| t.name.clone())
            .collect();
        let hits: Vec<SearchHit> = outcome
            .hits
            .iter()
            .filter(|h| h.score >= q.min_score)
            .map(|h| SearchHit {
                name: &h.name,
                score: h.score,
                description: catalog
                    .tools
                    .get(&h.name)
                    .map_or("", |t| t.description.as_str()),
                loaded: loaded.contains(&h.name),
                degraded: outcome.degraded.as_deref(),
            })
            .collect();
        let mut out = serde_json::to_vec(&hits).map_err(|e| FsError(e.to_string()))?;
        out.push(b'\n');
        Ok(out.into())
    }
}
