//! The file guard on real files: a fenced replace, a stale fence leaving
//! the file as it was, eight threads racing on one resource, and a mark it
//! did not write refused rather than guessed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_guard::file::{self, write};
use baton_guard::{Admitted, FenceKeys, GuardError, Presented, Refused};
use std::path::Path;

fn put(path: &Path, fence: u64, text: &str) -> Result<Admitted, GuardError> {
    write(
        path,
        "out",
        &Presented::Fence(fence),
        None,
        None,
        &mut text.as_bytes(),
    )
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".baton-") && n != ".baton-guard")
        .collect()
}

#[test]
fn a_stale_fence_leaves_the_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.txt");
    assert_eq!(put(&path, 3, "three").unwrap(), Admitted::First);
    assert_eq!(put(&path, 3, "three again").unwrap(), Admitted::Equal);
    assert_eq!(put(&path, 4, "four").unwrap(), Admitted::Raised { from: 3 });
    let e = put(&path, 3, "zombie").unwrap_err();
    assert!(e.is_stale(), "{e}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "four");
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
    assert_eq!(
        file::highest(&file::default_marks(&path), "out").unwrap(),
        Some(4)
    );

    // Signed.
    let keys = FenceKeys::parse("file-key-0123456789abcdef0123456789abcdef").unwrap();
    let e = write(
        &path,
        "out",
        &Presented::Fence(9),
        Some(&keys),
        None,
        &mut "bare".as_bytes(),
    )
    .unwrap_err();
    assert!(
        matches!(e, GuardError::Refused(Refused::Unsigned(9))),
        "{e}"
    );
    let t = Presented::Token(keys.sign("job", 9));
    write(
        &path,
        "out",
        &t,
        Some(&keys),
        None,
        &mut "signed".as_bytes(),
    )
    .unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "signed");

    // A mark not written by the guard (another resource's, or garbage) is refused.
    let marks = file::default_marks(&path);
    for e in std::fs::read_dir(&marks).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "fence") {
            std::fs::write(&p, "12\nsomething else\n").unwrap();
        }
    }
    let e = put(&path, 100, "after tampering").unwrap_err();
    assert!(matches!(e, GuardError::Unavailable(_)), "{e}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "signed");
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn eight_racing_threads_leave_the_highest_admitted_fences_content() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot.txt");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..8u64)
        .map(|w| {
            let path = path.clone();
            let log = log.clone();
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(w);
                let mut fences: Vec<u64> = (0..20).map(|i| 1 + i * 8 + w).collect();
                rng.shuffle(&mut fences);
                for f in fences {
                    match put(&path, f, &format!("{f}")) {
                        Ok(_) => log.lock().unwrap().push(f),
                        Err(e) if e.is_stale() => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let admitted = log.lock().unwrap().clone();
    let max = *admitted.iter().max().unwrap();
    // Whatever landed last is the highest fence admitted: no lower fence's
    // rename came after a higher one's.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), max.to_string());
    assert_eq!(
        file::highest(&file::default_marks(&path), "out").unwrap(),
        Some(max)
    );
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn bad_paths_and_resources_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let e = write(
        Path::new("/"),
        "r",
        &Presented::Fence(1),
        None,
        None,
        &mut "x".as_bytes(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("path"), "{e}");
    let e = write(
        &dir.path().join("f"),
        "",
        &Presented::Fence(1),
        None,
        None,
        &mut "x".as_bytes(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("resource"), "{e}");
    // A marks directory that cannot be made.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, "").unwrap();
    let e = write(
        &dir.path().join("g"),
        "r",
        &Presented::Fence(1),
        None,
        Some(&blocker.join("m")),
        &mut "x".as_bytes(),
    )
    .unwrap_err();
    assert!(matches!(e, GuardError::Unavailable(_)), "{e}");
    assert!(!dir.path().join("g").exists());
}
