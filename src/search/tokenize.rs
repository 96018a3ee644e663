//! Text analysis for the lexical ranker: splitting identifiers and prose into
//! lowercase words, dropping stopwords, and stemming with Porter2 (English).

use std::collections::HashMap;

use rust_stemmers::{Algorithm, Stemmer};

/// Words too common to say anything about which tool is meant. Kept small on
/// purpose: words like "file", "list" or "show" do carry meaning for tools.
const STOPWORDS: &[&str] = &[
    "a", "about", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but",
    "by", "can", "could", "did", "do", "does", "doing", "for", "from", "got", "had", "has", "have",
    "he", "her", "here", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just",
    "let", "like", "me", "might", "my", "need", "of", "on", "or", "our", "please", "she", "should",
    "so", "some", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this",
    "those", "to", "too", "us", "use", "using", "very", "want", "was", "we", "were", "what",
    "whats", "when", "where", "which", "while", "who", "why", "will", "with", "would", "you",
    "your",
];

/// True for words the analyzer drops.
pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Splits `text` into lowercase words: runs of letters and digits, further cut
/// at snake_case, kebab-case and camelCase boundaries (`HTTPServer` gives
/// `http`, `server`). Apostrophes inside a word are dropped (`what's` → `whats`).
pub fn split_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut cur = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() {
            if !cur.is_empty() && is_camel_boundary(&chars, i) {
                out.push(std::mem::take(&mut cur));
            }
            cur.extend(c.to_lowercase());
        } else if (c == '\'' || c == '\u{2019}')
            && !cur.is_empty()
            && chars.get(i + 1).is_some_and(|n| n.is_alphabetic())
        {
            // Contraction: keep the word whole, without the apostrophe.
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        i += 1;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A new word starts at `i` when a lowercase letter or digit is followed by
/// an uppercase one (`camelCase`), or an uppercase run ends before a
/// capitalised word (`HTTPServer`: boundary before `S`).
fn is_camel_boundary(chars: &[char], i: usize) -> bool {
    let c = chars[i];
    let Some(&prev) = i.checked_sub(1).and_then(|p| chars.get(p)) else {
        return false;
    };
    if !c.is_uppercase() {
        return false;
    }
    if prev.is_lowercase() {
        return true;
    }
    prev.is_uppercase() && chars.get(i + 1).is_some_and(|n| n.is_lowercase())
}

/// Turns text into index terms: words, minus stopwords and one-letter words,
/// stemmed. Stems are memoised, which matters when indexing thousands of docs.
pub struct Analyzer {
    stemmer: Stemmer,
    cache: HashMap<String, String>,
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::new()
    }
}

impl Analyzer {
    pub fn new() -> Self {
        Self {
            stemmer: Stemmer::create(Algorithm::English),
            cache: HashMap::new(),
        }
    }

    /// The terms of `text`, in order, duplicates kept (term frequency counts).
    pub fn terms(&mut self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for word in split_words(text) {
            if word.chars().count() < 2 || is_stopword(&word) {
                continue;
            }
            out.push(self.stem(word));
        }
        out
    }

    /// Stems one lowercase word, through the memo.
    pub fn stem(&mut self, word: String) -> String {
        if let Some(s) = self.cache.get(&word) {
            return s.clone();
        }
        let stemmed = self.stemmer.stem(&word).into_owned();
        self.cache.insert(word, stemmed.clone());
        stemmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        let mut sorted = STOPWORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOPWORDS);
    }

    #[test]
    fn splits_identifiers() {
        assert_eq!(split_words("http_get"), ["http", "get"]);
        assert_eq!(split_words("imageResize"), ["image", "resize"]);
        assert_eq!(split_words("HTTPServer-v2"), ["http", "server", "v2"]);
        assert_eq!(
            split_words("what's eating my disk?"),
            ["whats", "eating", "my", "disk"]
        );
        assert_eq!(split_words("mp3 to wav"), ["mp3", "to", "wav"]);
    }

    #[test]
    fn stems_and_drops_stopwords() {
        let mut a = Analyzer::new();
        assert_eq!(a.terms("Compressing the files"), ["compress", "file"]);
        assert_eq!(a.terms("compress"), ["compress"]);
        assert_eq!(a.terms("a b c"), Vec::<String>::new());
    }
}
