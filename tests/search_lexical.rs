//! Lexical ranking on hand-made cases: keywords, name matches, stemming,
//! identifier splitting, score normalisation, and speed on 10,000 tools.

use std::time::{Duration, Instant};

use toolsrv::search::{Doc, LexicalIndex, SearchOptions, search};

fn doc(name: &str, description: &str, prompt: &str, keywords: &[&str]) -> Doc {
    Doc {
        name: name.into(),
        description: description.into(),
        prompt: prompt.into(),
        keywords: keywords.iter().map(|k| k.to_string()).collect(),
    }
}

fn names(index: &LexicalIndex, q: &str) -> Vec<String> {
    index.rank(q, 10).into_iter().map(|h| h.name).collect()
}

#[test]
fn keywords_bring_in_user_vocabulary() {
    let docs = [
        doc(
            "pack",
            "Bundle files into one archive.",
            "## pack\n\nBundles files.",
            &["tarball", "backup"],
        ),
        doc(
            "copy",
            "Copy files to another place.",
            "## copy\n\nCopies files.",
            &[],
        ),
    ];
    let index = LexicalIndex::new(&docs);
    assert_eq!(names(&index, "make a tarball"), ["pack"]);
    // Without the keyword the same tool is not found by that word at all.
    let bare = [
        doc("pack", "Bundle files into one archive.", "## pack", &[]),
        docs[1].clone(),
    ];
    assert!(names(&LexicalIndex::new(&bare), "make a tarball").is_empty());
}

#[test]
fn name_match_outranks_a_passing_mention() {
    let docs = [
        doc(
            "process_list",
            "Show running programs.",
            "Lists what runs, sorted by CPU.",
            &[],
        ),
        doc(
            "notify",
            "Show a desktop notification.",
            "Handy to tell the user a process finished, e.g. after a long build.",
            &[],
        ),
    ];
    let index = LexicalIndex::new(&docs);
    assert_eq!(names(&index, "process")[0], "process_list");
}

#[test]
fn stemming_matches_word_forms() {
    let docs = [
        doc("zip", "Compress files into a .zip archive.", "## zip", &[]),
        doc("read_file", "Read a file.", "## read_file", &[]),
    ];
    let index = LexicalIndex::new(&docs);
    assert_eq!(names(&index, "compressing"), ["zip"]);
    assert_eq!(names(&index, "compressed reports"), ["zip"]);
    assert_eq!(names(&index, "reading files")[0], "read_file");
}

#[test]
fn identifiers_are_split() {
    let docs = [
        doc("imageResize", "Scale pictures.", "", &[]),
        doc("http_get", "Fetch a URL.", "", &[]),
        doc("sqlite", "Query a database.", "", &[]),
    ];
    let index = LexicalIndex::new(&docs);
    assert_eq!(names(&index, "resize the image"), ["imageResize"]);
    assert_eq!(names(&index, "http request"), ["http_get"]);
}

#[test]
fn scores_are_relative_to_the_top_hit() {
    let docs = [
        doc(
            "git_log",
            "Show commit history.",
            "Commits newest first.",
            &["history"],
        ),
        doc("git_commit", "Create a commit.", "", &[]),
        doc("weather", "Forecast.", "", &[]),
    ];
    let hits = LexicalIndex::new(&docs).rank("commit history", 10);
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert_eq!(hits[0].name, "git_log");
    assert_eq!(hits[0].score, 1.0);
    assert!(hits[1].score > 0.0 && hits[1].score < 1.0, "{hits:?}");
    assert_eq!(LexicalIndex::new(&docs).rank("commit history", 1).len(), 1);
    assert!(LexicalIndex::new(&docs).rank("the of and", 10).is_empty());
    assert!(LexicalIndex::new(&[]).rank("anything", 10).is_empty());
    let out = search(&docs, "forecast", &SearchOptions::default());
    assert_eq!(out.hits[0].name, "weather");
    assert_eq!(out.degraded, None);
}

/// 10,000 synthetic tools. The targets (build < 1 s, query < 5 ms) are for a
/// release build; the bounds here are generous so a debug build on a busy
/// machine passes too.
#[test]
fn ten_thousand_tools_are_fast_enough() {
    let words = [
        "file", "image", "network", "process", "archive", "commit", "branch", "memory", "disk",
        "weather", "calendar", "email", "database", "query", "convert", "resize", "compress",
        "extract", "download", "upload", "search", "list", "show", "create", "delete", "log",
    ];
    let docs: Vec<Doc> = (0..10_000)
        .map(|i| {
            let w = |k: usize| words[(i * 7 + k * 13) % words.len()];
            let prompt = (0..60).map(&w).collect::<Vec<_>>().join(" ");
            Doc {
                name: format!("{}_{}_{i}", w(1), w(2)),
                description: format!("{} the {} and {} it.", w(3), w(4), w(5)),
                prompt: format!("## tool {i}\n\n{prompt}"),
                keywords: vec![w(6).to_string(), format!("{} {}", w(7), w(8))],
            }
        })
        .collect();
    let t = Instant::now();
    let index = LexicalIndex::new(&docs);
    let build = t.elapsed();
    let t = Instant::now();
    let hits = index.rank("compress the disk image and show the log", 10);
    let query = t.elapsed();
    let t = Instant::now();
    for _ in 0..20 {
        index.rank("compress the disk image and show the log", 10);
    }
    println!(
        "build {build:?}, first query {query:?}, next {:?} each",
        t.elapsed() / 20
    );
    assert_eq!(index.len(), 10_000);
    assert_eq!(hits.len(), 10);
    assert!(build < Duration::from_secs(30), "build took {build:?}");
    assert!(query < Duration::from_secs(1), "query took {query:?}");
}
