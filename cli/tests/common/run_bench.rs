//! `baton bench` run through the binary, for the test files that drive the
//! contention harness (the harness's own tests and the server's).

use std::process::Command;

/// `baton --store STORE bench ARGS...`: its standard output, after
/// checking that it succeeded.
pub fn run_bench(bin: &str, store: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(["--store", store, "bench"])
        .args(args)
        .env_remove("BATON_STORE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{store} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
