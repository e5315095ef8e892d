//! README.md's shell blocks run as written, each on a fresh machine's
//! footing: a new empty folder as the working directory and as `HOME`,
//! `baton` on the PATH, no `BATON_STORE`, under `bash -euo pipefail` (so
//! a line that fails fails the test). A block the README marks
//! `<!-- not run by cli/tests/readme.rs: WHY -->` on the line before it
//! is skipped, with its reason printed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

/// Each ```sh block of `text`: its first line's number, the marker line
/// before it (if any), and its body.
fn shell_blocks(text: &str) -> Vec<(usize, Option<String>, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() == "```sh" {
            let marker = i
                .checked_sub(1)
                .map(|p| lines[p])
                .filter(|l| l.starts_with("<!-- not run by cli/tests/readme.rs"))
                .map(str::to_owned);
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && lines[end].trim_end() != "```" {
                end += 1;
            }
            out.push((start + 1, marker, lines[start..end].join("\n")));
            i = end;
        }
        i += 1;
    }
    out
}

#[test]
fn the_readmes_shell_blocks_run_as_written() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let blocks = shell_blocks(&text);
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for (line, marker, body) in &blocks {
        if let Some(m) = marker {
            println!("README.md:{line}: skipped: {m}");
            continue;
        }
        let home = tempfile::tempdir().unwrap();
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", body])
            .current_dir(home.path())
            .env("HOME", home.path())
            .env("PATH", &path)
            .env("NO_COLOR", "1")
            .env_remove("BATON_STORE")
            .env_remove("BATON_TOKEN")
            .output()
            .unwrap();
        println!(
            "README.md:{line}: exit {:?}\n{}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "README.md:{line}: the block failed ({:?}):\n{body}\n--- stderr:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 2, "the tour and the queues ran ({ran} blocks)");
}

#[test]
fn a_block_marked_not_run_is_recognised_and_others_are_not() {
    let text = "intro\n<!-- not run by cli/tests/readme.rs: a server -->\n```sh\nbaton serve\n```\n\n```sh\nbaton demo\n```\n";
    let b = shell_blocks(text);
    assert_eq!(b.len(), 2);
    assert!(b[0].1.is_some() && b[0].2 == "baton serve");
    assert!(b[1].1.is_none() && b[1].2 == "baton demo");
}
