//! The store's own unit tests (the conformance suite and the crash tests
//! are in `tests/`).

#![allow(clippy::unwrap_used)] // tests fail by panicking
use super::*;

fn entries(keys: &[&str]) -> Vec<(Vec<u8>, Vec<u8>)> {
    keys.iter()
        .map(|k| (k.as_bytes().to_vec(), format!("t{k}").into_bytes()))
        .collect()
}

fn ids(v: Vec<Vec<u8>>) -> Vec<String> {
    v.into_iter()
        .map(|b| String::from_utf8(b).unwrap())
        .collect()
}

/// A read cut short before the transaction answers only what it can be
/// sure of: what lies within the entries read, never past them.
#[test]
fn a_cut_index_read_refuses_to_answer_past_what_was_read() {
    use std::ops::Bound::{Excluded, Unbounded};
    let read = entries(&["b", "d"]);
    let mut delta = BTreeMap::new();
    let within = merged_ids(&read, &delta, true, Unbounded, b"k", 2).unwrap();
    assert_eq!(ids(within), ["tb", "td"]);
    // A third would be past "d", where unread entries may sort first.
    assert_eq!(merged_ids(&read, &delta, true, Unbounded, b"k", 3), None);
    assert_eq!(
        merged_ids(&read, &delta, true, Excluded(b"d".to_vec()), b"k", 1),
        None
    );
    // The transaction granted "b": the next one is "d", then unknown.
    delta.insert(b"b".to_vec(), None);
    let left = merged_ids(&read, &delta, true, Unbounded, b"k", 1).unwrap();
    assert_eq!(ids(left), ["td"]);
    assert_eq!(merged_ids(&read, &delta, true, Unbounded, b"k", 2), None);
    // An entry this transaction added past the cut is not known to be next.
    delta.insert(b"e".to_vec(), Some(b"te".to_vec()));
    assert_eq!(merged_ids(&read, &delta, true, Unbounded, b"k", 2), None);
    // The cut lies past the range's end: the range was read whole.
    let whole = merged_ids(&read, &BTreeMap::new(), true, Unbounded, b"c", 5).unwrap();
    assert_eq!(ids(whole), ["tb"]);
    // Not cut, the entries read are all there are.
    let all = merged_ids(&read, &delta, false, Unbounded, b"k", 5).unwrap();
    assert_eq!(ids(all), ["td", "te"]);
}

/// The merge of what was read before a transaction with its own index
/// changes: a removed entry is gone, a replaced one appears once with
/// the new task, an added one takes its place in key order, both bounds
/// hold and the walk stops at the limit.
#[test]
fn the_index_read_merges_the_transactions_own_changes_in_key_order() {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let read = entries(&["b", "d", "f", "h", "j"]);
    let mut delta = BTreeMap::new();
    delta.insert(b"d".to_vec(), None); // granted in this transaction
    delta.insert(b"f".to_vec(), Some(b"new-f".to_vec())); // rewritten
    delta.insert(b"a".to_vec(), Some(b"ta".to_vec())); // made ready, first
    delta.insert(b"g".to_vec(), Some(b"tg".to_vec()));
    delta.insert(b"z".to_vec(), Some(b"tz".to_vec())); // past the end
    let all = merged_ids(&read, &delta, false, Unbounded, b"k", 100).unwrap();
    assert_eq!(ids(all), ["ta", "tb", "new-f", "tg", "th", "tj"]);
    let some = merged_ids(&read, &delta, false, Unbounded, b"k", 3).unwrap();
    assert_eq!(ids(some), ["ta", "tb", "new-f"]);
    let after_b = merged_ids(&read, &delta, false, Excluded(b"b".to_vec()), b"h", 100).unwrap();
    assert_eq!(ids(after_b), ["new-f", "tg"]);
    let from_f = merged_ids(&read, &delta, false, Included(b"f".to_vec()), b"i", 100).unwrap();
    assert_eq!(ids(from_f), ["new-f", "tg", "th"]);
    // Removing every entry read leaves only what the transaction added.
    let gone: BTreeMap<_, _> = read.iter().map(|(k, _)| (k.clone(), None)).collect();
    assert!(
        merged_ids(&read, &gone, false, Unbounded, b"k", 100)
            .unwrap()
            .is_empty()
    );
    assert!(
        merged_ids(&[], &BTreeMap::new(), false, Unbounded, b"k", 100)
            .unwrap()
            .is_empty()
    );
    assert!(
        merged_ids(&read, &delta, false, Unbounded, b"k", 0)
            .unwrap()
            .is_empty()
    );
}

/// sled can keep its directory lock for a moment after its handle is
/// dropped (its own background threads hold the file). Here another
/// open file holds that same lock, released 300 ms later: dropping the
/// store's guard returns only once it is free.
#[test]
fn dropping_waits_until_the_directory_lock_is_free() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("db"), b"").unwrap();
    let held = try_lock_dir(dir.path())
        .unwrap()
        .expect("the lock is free to take");
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(held);
    });
    let started = Instant::now();
    drop(ReleaseOnDrop {
        path: dir.path().to_path_buf(),
        wait: Duration::from_secs(5),
    });
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "returned after {:?}, while the lock was still held",
        started.elapsed()
    );
    assert!(
        try_lock_dir(dir.path()).unwrap().is_some(),
        "the lock is free when the drop returns"
    );
    releaser.join().unwrap();
}
