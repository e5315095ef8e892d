//! The SQLite guard on a real database file: a stale fence refused inside
//! the writer's transaction (which rolls back), signed fences, a missing
//! table and a write outside a transaction named, and eight threads racing
//! on one resource landing in fence order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_guard::sqlite::{self, admit};
use baton_guard::{Admitted, FenceKeys, GuardError, Presented, Refused};
use rusqlite::{Connection, TransactionBehavior};
use std::path::Path;

const KEY: &str = "guard-test-key-0123456789abcdef0123456789";

fn open(path: &Path) -> Connection {
    let c = Connection::open(path).unwrap();
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    c
}

fn add(
    c: &mut Connection,
    p: &Presented,
    keys: Option<&FenceKeys>,
    who: &str,
) -> Result<Admitted, GuardError> {
    let tx = c
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let a = admit(&tx, "row:1", p, keys)?;
    tx.execute("UPDATE t SET n = n + 1, who = ?1 WHERE id = 1", [who])
        .unwrap();
    tx.commit().unwrap();
    Ok(a)
}

fn row(c: &Connection) -> (i64, String) {
    c.query_row("SELECT n, who FROM t WHERE id = 1", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap()
}

#[test]
fn a_stale_fence_is_refused_and_its_transaction_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = open(&dir.path().join("app.db"));
    c.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER, who TEXT); INSERT INTO t VALUES (1, 0, '')")
        .unwrap();
    // Not installed: named.
    let e = add(&mut c, &Presented::Fence(1), None, "x").unwrap_err();
    assert!(matches!(e, GuardError::NotInstalled(_)), "{e}");
    sqlite::install(&c).unwrap();
    sqlite::install(&c).unwrap();
    // Outside a transaction: refused by name, nothing admitted.
    let e = admit(&c, "row:1", &Presented::Fence(1), None).unwrap_err();
    assert!(e.to_string().contains("transaction"), "{e}");
    assert_eq!(sqlite::highest(&c, "row:1").unwrap(), None);

    assert_eq!(
        add(&mut c, &Presented::Fence(2), None, "a").unwrap(),
        Admitted::First
    );
    assert_eq!(
        add(&mut c, &Presented::Fence(2), None, "a").unwrap(),
        Admitted::Equal
    );
    assert_eq!(
        add(&mut c, &Presented::Fence(7), None, "b").unwrap(),
        Admitted::Raised { from: 2 }
    );
    let e = add(&mut c, &Presented::Fence(2), None, "zombie").unwrap_err();
    assert!(e.is_stale(), "{e}");
    assert_eq!(row(&c), (3, "b".into()));
    assert_eq!(sqlite::highest(&c, "row:1").unwrap(), Some(7));

    // With keys: only the authority's tokens.
    let keys = FenceKeys::parse(KEY).unwrap();
    let e = add(&mut c, &Presented::Fence(8), Some(&keys), "bare").unwrap_err();
    assert!(
        matches!(e, GuardError::Refused(Refused::Unsigned(8))),
        "{e}"
    );
    let other = FenceKeys::parse("another-key-0123456789abcdef0123456789").unwrap();
    let e = add(
        &mut c,
        &Presented::Token(other.sign("t", 1 << 40)),
        Some(&keys),
        "forged",
    )
    .unwrap_err();
    assert!(matches!(e, GuardError::Refused(Refused::Forged)), "{e}");
    add(
        &mut c,
        &Presented::Token(keys.sign("t", 8)),
        Some(&keys),
        "signed",
    )
    .unwrap();
    assert_eq!(row(&c), (4, "signed".into()));
    assert_eq!(sqlite::highest(&c, "row:1").unwrap(), Some(8));
}

#[test]
fn eight_racing_threads_land_in_fence_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    {
        let c = open(&path);
        c.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE landed (seq INTEGER PRIMARY KEY AUTOINCREMENT, fence INTEGER)")
            .unwrap();
        sqlite::install(&c).unwrap();
    }
    let threads: Vec<_> = (0..8u64)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut c = open(&path);
                let mut rng = fastrand::Rng::with_seed(w);
                let mut fences: Vec<u64> = (0..25).map(|i| 1 + i * 8 + w).collect();
                rng.shuffle(&mut fences);
                let mut refused = 0;
                for f in fences {
                    let tx = c
                        .transaction_with_behavior(TransactionBehavior::Immediate)
                        .unwrap();
                    match admit(&tx, "hot", &Presented::Fence(f), None) {
                        Ok(_) => {
                            tx.execute("INSERT INTO landed (fence) VALUES (?1)", [f as i64])
                                .unwrap();
                            tx.commit().unwrap();
                        }
                        Err(e) if e.is_stale() => refused += 1,
                        Err(e) => panic!("{e}"),
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let c = open(&path);
    let mut st = c.prepare("SELECT fence FROM landed ORDER BY seq").unwrap();
    let landed: Vec<i64> = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(landed.windows(2).all(|w| w[0] <= w[1]), "{landed:?}");
    assert_eq!(landed.len() + refused, 200);
    assert!(refused > 0);
}

#[test]
fn a_database_another_writer_holds_admits_nothing_and_says_so() {
    // Another connection (another process) holds the write lock past the
    // guarded writer's busy timeout: Unavailable, nothing admitted, the
    // user's SQL never run.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let setup = open(&path);
    setup
        .execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (0)")
        .unwrap();
    sqlite::install(&setup).unwrap();
    let holder = open(&path);
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut writer = Connection::open(&path).unwrap();
    writer
        .busy_timeout(std::time::Duration::from_millis(200))
        .unwrap();
    let e = sqlite::run_guarded(
        &mut writer,
        "t",
        &Presented::Fence(3),
        None,
        "UPDATE t SET n = n + 1",
    )
    .unwrap_err();
    assert!(matches!(e, GuardError::Unavailable(_)), "{e}");
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(sqlite::highest(&setup, "t").unwrap(), None);
    let n: i64 = setup
        .query_row("SELECT n FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}
