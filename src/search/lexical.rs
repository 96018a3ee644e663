//! The built-in ranker: BM25F over a tool's name, description, keywords and
//! prompt, with per-field weights and length normalisation. No model, no I/O.

use std::collections::HashMap;

use super::tokenize::Analyzer;
use super::{Doc, Hit};

/// One searchable field's BM25F weight and length-normalisation strength `b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldParams {
    pub weight: f32,
    pub b: f32,
}

/// BM25F parameters. Field order in `fields`: name, description, keywords, prompt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Saturation: how quickly repeated matches of a term stop adding score.
    pub k1: f32,
    pub fields: [FieldParams; 4],
}

impl Default for Bm25Params {
    /// The name is short and chosen by the author to say what the tool does,
    /// so a word there weighs most. The description is the author's one-line
    /// summary. Keywords are discovery-only vocabulary (synonyms, user
    /// phrasing): useful, but lists are long and loosely related. The prompt
    /// is long documentation whose words are often about arguments and
    /// caveats, so it weighs least and is most length-normalised. A sweep on
    /// the labelled set (`eval::tests::tune_bm25`) showed a broad plateau
    /// around these values; they were not fitted to single queries.
    fn default() -> Self {
        Self {
            k1: 1.2,
            fields: [
                FieldParams {
                    weight: 3.0,
                    b: 0.3,
                },
                FieldParams {
                    weight: 2.0,
                    b: 0.5,
                },
                FieldParams {
                    weight: 1.5,
                    b: 0.5,
                },
                FieldParams {
                    weight: 0.6,
                    b: 0.75,
                },
            ],
        }
    }
}

/// A term's occurrence in one doc, its field frequencies already weighted and
/// length-normalised (the BM25F pseudo term frequency).
#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    tf: f32,
}

/// An inverted index over a set of [`Doc`]s, built once and queried many
/// times. Build is linear in the text; a query touches only the postings of
/// its own terms.
pub struct LexicalIndex {
    k1: f32,
    names: Vec<String>,
    terms: HashMap<String, u32>,
    postings: Vec<Vec<Posting>>,
}

impl LexicalIndex {
    /// Indexes `docs` with the default parameters. Hits refer to docs by
    /// [`Doc::name`].
    pub fn new(docs: &[Doc]) -> Self {
        Self::with_params(docs, Bm25Params::default())
    }

    /// Indexes `docs` with explicit BM25F parameters.
    pub fn with_params(docs: &[Doc], params: Bm25Params) -> Self {
        let mut analyzer = Analyzer::new();
        let mut terms: HashMap<String, u32> = HashMap::new();
        // Per doc: (term, field) occurrences sorted, and each field's length.
        let mut occurrences: Vec<Vec<(u32, u8)>> = Vec::with_capacity(docs.len());
        let mut lens: Vec<[u32; 4]> = Vec::with_capacity(docs.len());
        let mut total = [0f64; 4];
        for doc in docs {
            let mut occ: Vec<(u32, u8)> = Vec::new();
            let mut len = [0u32; 4];
            let keywords = doc.keywords.join("\n");
            let texts = [&doc.name, &doc.description, &keywords, &doc.prompt];
            for (f, text) in texts.into_iter().enumerate() {
                analyzer.for_each_term(text, |term| {
                    let id = match terms.get(term) {
                        Some(&id) => id,
                        None => {
                            let id = u32::try_from(terms.len()).unwrap_or(u32::MAX);
                            terms.insert(term.to_string(), id);
                            id
                        }
                    };
                    occ.push((id, f as u8));
                    len[f] += 1;
                });
                total[f] += f64::from(len[f]);
            }
            occ.sort_unstable();
            occurrences.push(occ);
            lens.push(len);
        }
        let n = docs.len().max(1) as f64;
        let avg: [f32; 4] = std::array::from_fn(|f| ((total[f] / n) as f32).max(1.0));

        let mut postings: Vec<Vec<Posting>> = vec![Vec::new(); terms.len()];
        for (d, occ) in occurrences.into_iter().enumerate() {
            let norm: [f32; 4] = std::array::from_fn(|f| {
                let field = &params.fields[f];
                field.weight / (1.0 - field.b + field.b * lens[d][f] as f32 / avg[f])
            });
            let doc = u32::try_from(d).unwrap_or(u32::MAX);
            let mut k = 0;
            while k < occ.len() {
                let term = occ[k].0;
                let mut tf = 0f32;
                while k < occ.len() && occ[k].0 == term {
                    tf += norm[usize::from(occ[k].1)];
                    k += 1;
                }
                postings[term as usize].push(Posting { doc, tf });
            }
        }
        Self {
            k1: params.k1,
            names: docs.iter().map(|d| d.name.clone()).collect(),
            terms,
            postings,
        }
    }

    /// Number of indexed docs.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when no docs were indexed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Raw BM25F score of every doc for `query`, indexed like the input docs.
    /// Docs sharing no term with the query score 0.
    pub fn scores(&self, query: &str) -> Vec<f32> {
        let mut scores = vec![0f32; self.names.len()];
        let mut analyzer = Analyzer::new();
        let mut qterms: HashMap<String, u32> = HashMap::new();
        analyzer.for_each_term(query, |t| *qterms.entry(t.to_string()).or_insert(0) += 1);
        let n = self.names.len() as f32;
        for (term, qtf) in qterms {
            let Some(&id) = self.terms.get(&term) else {
                continue;
            };
            let list = &self.postings[id as usize];
            let df = list.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for p in list {
                scores[p.doc as usize] +=
                    qtf as f32 * idf * p.tf * (self.k1 + 1.0) / (self.k1 + p.tf);
            }
        }
        scores
    }

    /// The best `limit` docs for `query`, best first, scores divided by the
    /// top score (so the best hit scores 1.0 and the rest are relative to it).
    /// Docs that match no query term are left out.
    pub fn rank(&self, query: &str, limit: usize) -> Vec<Hit> {
        let scores = self.scores(query);
        top_hits(&self.names, &scores, limit)
    }
}

/// The `limit` highest positive `scores` as hits, normalised by the top score.
/// Ties are broken by name so results are deterministic.
pub(crate) fn top_hits(names: &[String], scores: &[f32], limit: usize) -> Vec<Hit> {
    let mut idx: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] > 0.0).collect();
    let by_score = |a: &usize, b: &usize| {
        scores[*b]
            .total_cmp(&scores[*a])
            .then_with(|| names[*a].cmp(&names[*b]))
    };
    if idx.len() > limit && limit > 0 {
        idx.select_nth_unstable_by(limit - 1, by_score);
    }
    idx.truncate(limit);
    idx.sort_unstable_by(by_score);
    let top = idx.first().map_or(1.0, |&i| scores[i]);
    idx.into_iter()
        .map(|i| Hit {
            name: names[i].clone(),
            score: scores[i] / top,
        })
        .collect()
}
