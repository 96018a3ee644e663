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
    for_each_word(text, |w| out.push(w.to_string()));
    out
}

/// [`split_words`] without allocating per word: `f` sees each word in a
/// reused buffer.
pub fn for_each_word(text: &str, mut f: impl FnMut(&str)) {
    let mut cur = String::new();
    let mut prev: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        if c.is_alphanumeric() {
            if !cur.is_empty() && is_camel_boundary(prev, c, next) {
                f(&cur);
                cur.clear();
            }
            if c.is_ascii() {
                cur.push(c.to_ascii_lowercase());
            } else {
                cur.extend(c.to_lowercase());
            }
        } else if (c == '\'' || c == '\u{2019}')
            && !cur.is_empty()
            && next.is_some_and(|n| n.is_alphabetic())
        {
            // Contraction: keep the word whole, without the apostrophe.
        } else if !cur.is_empty() {
            f(&cur);
            cur.clear();
        }
        prev = Some(c);
    }
    if !cur.is_empty() {
        f(&cur);
    }
}

/// A new word starts at `c` when a lowercase letter or digit is followed by
/// an uppercase one (`camelCase`), or an uppercase run ends before a
/// capitalised word (`HTTPServer`: boundary before `S`).
fn is_camel_boundary(prev: Option<char>, c: char, next: Option<char>) -> bool {
    let Some(prev) = prev else {
        return false;
    };
    if !c.is_uppercase() {
        return false;
    }
    if prev.is_lowercase() || prev.is_ascii_digit() {
        return true;
    }
    prev.is_uppercase() && next.is_some_and(|n| n.is_lowercase())
}

/// True for words that are not index terms: stopwords and one-letter words.
pub fn is_ignored(word: &str) -> bool {
    word.chars().nth(1).is_none() || is_stopword(word)
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
        self.for_each_term(text, |t| out.push(t.to_string()));
        out
    }

    /// [`Self::terms`] as a callback, allocating only for words not seen before.
    pub fn for_each_term(&mut self, text: &str, mut f: impl FnMut(&str)) {
        for_each_word(text, |word| {
            if is_ignored(word) {
                return;
            }
            if !self.cache.contains_key(word) {
                let stemmed = self.stemmer.stem(word).into_owned();
                self.cache.insert(word.to_string(), stemmed);
            }
            if let Some(stem) = self.cache.get(word) {
                f(stem);
            }
        });
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
        assert_eq!(split_words("ÜberCafé déjà"), ["über", "café", "déjà"]);
    }

    #[test]
    fn stems_and_drops_stopwords() {
        let mut a = Analyzer::new();
        assert_eq!(a.terms("Compressing the files"), ["compress", "file"]);
        assert_eq!(a.terms("compress"), ["compress"]);
        assert_eq!(a.terms("a b c"), Vec::<String>::new());
    }
}
