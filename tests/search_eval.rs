//! Retrieval quality on the labelled set in `eval/`: the lexical ranker must
//! find an acceptable tool in its top 5 for at least 90% of the queries.

use std::path::Path;

use toolsrv::search::{Ranker, evaluate, run_eval};

fn eval_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/eval"))
}

#[test]
fn labelled_set_is_big_enough() {
    let tools = toolsrv::search::eval::load_tools(&eval_dir().join("tools")).unwrap();
    let queries = toolsrv::search::eval::load_queries(&eval_dir().join("queries.json")).unwrap();
    assert!(tools.len() >= 40, "{} tools", tools.len());
    assert!(queries.len() >= 60, "{} queries", queries.len());
    assert!(
        tools
            .iter()
            .all(|t| !t.description.is_empty() && !t.prompt.is_empty())
    );
}

#[test]
fn lexical_recall_at_5_is_at_least_0_9() {
    let report = evaluate(
        &eval_dir().join("tools"),
        &eval_dir().join("queries.json"),
        &Ranker::Lexical,
    )
    .unwrap();
    let text = run_eval(
        &eval_dir().join("tools"),
        &eval_dir().join("queries.json"),
        None,
    )
    .unwrap();
    println!("{text}");
    assert!(report.recall_at_5 >= 0.9, "{text}");
    assert!(report.recall_at_1 <= report.recall_at_5);
    assert!(text.contains("lexical") && text.contains("recall@5"));
}
