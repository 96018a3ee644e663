//! The `search` file and `toolsrv search`: lexical ranking over every
//! discovered tool, keywords as discovery vocabulary only.

mod common;

use common::TestServer;
use serde_json::Value;
use toolsrv::client::Session;

fn seed(t: &std::path::Path) {
    let tools = [
        (
            "file_read",
            "Read a text file.",
            "## file_read\nPrints a file with line numbers.",
            r#"["open file","show contents","cat"]"#,
        ),
        (
            "disk_usage",
            "Report disk space used by directories.",
            "## disk_usage\nSummarises sizes like du.",
            r#"["what is eating my disk","storage","free space","big folders"]"#,
        ),
        (
            "git_blame",
            "Show who last changed each line of a file.",
            "## git_blame\nRuns git blame.",
            r#"["who changed this line","author","history of a line"]"#,
        ),
        (
            "http_get",
            "Fetch a URL over HTTP.",
            "## http_get\nGET request, prints the body.",
            r#"["download page","web request","curl"]"#,
        ),
    ];
    for (name, desc, prompt, kw) in tools {
        let meta = format!(
            r#"{{"description":{},"prompt":{},"keywords":{kw},"args":{{"type":"object"}}}}"#,
            serde_json::to_string(desc).unwrap(),
            serde_json::to_string(prompt).unwrap()
        );
        common::write_tool(t, name, &meta, Some("#!/bin/sh\necho ok\n"));
    }
}

#[test]
fn search_ranks_marks_loaded_and_hides_keywords() {
    let s = TestServer::start_with(&[], seed);
    let mut c = Session::connect_with_secret(&s.socket, Some(b"k")).unwrap();
    c.write("ctl", b"load a1 git_blame").unwrap();

    let hits: Vec<Value> = serde_json::from_slice(
        &c.rdwr(
            "search",
            b"query=who changed this line last\nagent=a1\nlimit=2\n",
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0]["name"], "git_blame");
    assert_eq!(hits[0]["loaded"], true);
    assert_eq!(hits[0]["score"], 1.0);
    assert!(hits[0].get("degraded").is_none());

    let hits: Vec<Value> =
        serde_json::from_slice(&c.rdwr("search", b"query=what's eating my disk\n").unwrap())
            .unwrap();
    assert_eq!(hits[0]["name"], "disk_usage");
    assert_eq!(hits[0]["loaded"], false);

    // min_score filters; bad requests are refused with what to write.
    let hits: Vec<Value> = serde_json::from_slice(
        &c.rdwr("search", b"query=download a web page\nmin_score=0.99\n")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0]["name"], "http_get");
    let e = c.rdwr("search", b"limit=3\n").unwrap_err().to_string();
    assert!(e.contains("query="), "{e}");
    let e = c
        .rdwr("search", b"query=x\nlimit=lots\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("limit"), "{e}");

    // Keywords are discovery vocabulary only: never in model-facing text.
    let all = String::from_utf8(c.read("all").unwrap()).unwrap();
    let tools = String::from_utf8(c.rdwr("tools", b"a1").unwrap()).unwrap();
    for text in [&all, &tools] {
        assert!(!text.contains("who changed this line"), "{text}");
        assert!(!text.contains("keywords"), "{text}");
    }

    // A new tool is searchable without a restart.
    common::write_tool(
        &s.tools,
        "zip_archive",
        r#"{"description":"Compress files into a zip archive.","keywords":["compress","zip up"]}"#,
        Some("#!/bin/sh\necho ok\n"),
    );
    let hits: Vec<Value> =
        serde_json::from_slice(&c.rdwr("search", b"query=compressing some files\n").unwrap())
            .unwrap();
    assert_eq!(hits[0]["name"], "zip_archive");

    // The command line verb.
    let out = s
        .client_cmd()
        .env("TOOLSRV_SECRET", "k")
        .args(["search", "fetch", "a", "url"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().contains("http_get"), "{text}");
}

#[test]
fn search_degrades_when_the_embedding_endpoint_is_down() {
    // An endpoint that refuses connections: the answer still comes, lexical,
    // and says it is degraded.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let s = TestServer::start_with(&["--embed-url", &url, "--embed-model", "m"], seed);
    let mut c = Session::connect_with_secret(&s.socket, Some(b"k")).unwrap();
    let hits: Vec<Value> =
        serde_json::from_slice(&c.rdwr("search", b"query=fetch a url\n").unwrap()).unwrap();
    assert_eq!(hits[0]["name"], "http_get");
    let why = hits[0]["degraded"].as_str().unwrap();
    assert!(why.contains("lexical"), "{why}");
}
