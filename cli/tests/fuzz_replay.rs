//! Every input of the CLI fuzz target's corpus, and every finding it ever
//! saved, replayed as an ordinary test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[test]
fn cli_args_corpus_and_findings_replay_clean() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["corpus/cli_args", "artifacts/cli_args"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() && path.file_name().is_some_and(|f| f != ".gitkeep") {
                baton_cli::fuzz_args(&std::fs::read(&path).unwrap());
                n += 1;
            }
        }
    }
    assert!(n > 0, "the corpus is committed");
}

#[test]
fn check_accepts_good_lines_and_names_the_field_of_bad_ones() {
    assert!(baton_cli::check(["baton", "claim", "t", "--owner", "w", "--ttl", "30s"]).is_ok());
    assert!(baton_cli::check(["baton", "--help"]).is_ok());
    let e = baton_cli::check(["baton", "claim", "t", "--owner", "w", "--ttl", "8d"]).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("ttl"));
    let e = baton_cli::check(["baton", "renew", "t", "--owner", "w", "--fence", "x"]).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("fence"));
}
