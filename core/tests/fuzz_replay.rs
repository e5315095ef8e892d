//! Every input of the manifest fuzz target's corpus, and every finding it
//! ever saved, replayed as an ordinary test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[test]
fn manifest_corpus_and_findings_replay_clean() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in ["corpus/manifest", "artifacts/manifest"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() && path.file_name().is_some_and(|f| f != ".gitkeep") {
                baton_core::manifest::fuzz_manifest(&std::fs::read(&path).unwrap());
                n += 1;
            }
        }
    }
    assert!(n > 0, "the corpus is committed");
}
