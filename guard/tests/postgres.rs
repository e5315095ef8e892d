//! The Postgres guard in a real database: a stale fence rolls the writer's
//! whole transaction back, equal fences pass, signed fences are checked in
//! the database, racing writers land in fence order, and a missing guard
//! or a database that is down fails closed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_guard::postgres::{self, admit};
use baton_guard::{FenceKeys, GuardError, Presented, Refused};
use baton_store_postgres::testing::PgCluster;
use tokio_postgres::{Client, NoTls};

const KEY: &str = "guard-test-key-0123456789abcdef0123456789";
const OTHER: &str = "other-key-0123456789abcdef0123456789abcdef";

fn url(pg: &PgCluster, db: &str) -> String {
    format!("postgres://baton@127.0.0.1:{}/{db}", pg.port)
}

async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

async fn setup(c: &Client) {
    c.batch_execute(
        "DROP TABLE IF EXISTS account; CREATE TABLE account (id int PRIMARY KEY, balance int, writer text);
         INSERT INTO account VALUES (1, 0, 'none');",
    )
    .await
    .unwrap();
}

/// One guarded read-modify-write: admit, add 1, record the writer.
async fn guarded_add(
    c: &mut Client,
    presented: &Presented,
    writer: &str,
) -> Result<u64, GuardError> {
    let tx = c.transaction().await.unwrap();
    let mark = admit(&tx, "account:1", presented).await?;
    tx.execute(
        "UPDATE account SET balance = balance + 1, writer = $1 WHERE id = 1",
        &[&writer],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    Ok(mark)
}

async fn row(c: &Client) -> (i32, String) {
    let r = c
        .query_one("SELECT balance, writer FROM account WHERE id = 1", &[])
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

#[test]
fn a_stale_fence_rolls_the_whole_transaction_back() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = connect(&url(&pg, "postgres")).await;
        // Before install: the guard names what is missing.
        let tx = c.transaction().await.unwrap();
        let e = admit(&tx, "account:1", &Presented::Fence(1))
            .await
            .unwrap_err();
        assert!(matches!(e, GuardError::NotInstalled(_)), "{e}");
        drop(tx);
        postgres::install(&mut c, None).await.unwrap();
        // Installing twice is fine.
        postgres::install(&mut c, None).await.unwrap();
        setup(&c).await;

        assert_eq!(
            guarded_add(&mut c, &Presented::Fence(5), "a5")
                .await
                .unwrap(),
            5
        );
        // The same attempt writes again.
        assert_eq!(
            guarded_add(&mut c, &Presented::Fence(5), "a5")
                .await
                .unwrap(),
            5
        );
        assert_eq!(
            guarded_add(&mut c, &Presented::Fence(9), "b9")
                .await
                .unwrap(),
            9
        );
        // The zombie: its whole transaction goes, the row keeps the later write.
        let e = guarded_add(&mut c, &Presented::Fence(5), "zombie")
            .await
            .unwrap_err();
        match &e {
            GuardError::Refused(Refused::Stale { fence, highest, .. }) => {
                assert_eq!((*fence, *highest), (5, 9));
            }
            other => panic!("{other:?}"),
        }
        assert!(e.is_stale());
        assert_eq!(row(&c).await, (3, "b9".into()));

        // The same in plain SQL, as a user in any language writes it.
        let err = c
            .batch_execute(
                "BEGIN; SELECT baton_guard.admit('account:1', 4);
                 UPDATE account SET writer = 'sql-zombie' WHERE id = 1; COMMIT;",
            )
            .await
            .unwrap_err();
        assert_eq!(err.code().unwrap().code(), postgres::STALE);
        c.batch_execute("ROLLBACK").await.unwrap();
        assert_eq!(row(&c).await, (3, "b9".into()));

        // Bad input is named and admits nothing.
        for (r, f) in [("", 10i64), ("account:1", 0), ("a\u{1}b", 10)] {
            let err = c
                .query_one("SELECT baton_guard.admit($1, $2)", &[&r, &f])
                .await
                .unwrap_err();
            assert_eq!(err.code().unwrap().code(), postgres::INVALID, "{r:?} {f}");
        }
        let mark: i64 = c
            .query_one(
                "SELECT fence FROM baton_guard.fences WHERE resource = 'account:1'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(mark, 9);
    });
}

#[test]
fn the_sql_rule_is_cores_rule() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = connect(&url(&pg, "postgres")).await;
        postgres::install(&mut c, None).await.unwrap();
        let mut rng = fastrand::Rng::with_seed(50);
        for round in 0..20 {
            let resource = format!("seq:{round}");
            let mut core_mark: Option<u64> = None;
            for _ in 0..15 {
                let fence = rng.u64(1..12);
                let expected = baton_guard::admit(&resource, core_mark, fence);
                let got = c
                    .query_one(
                        "SELECT baton_guard.admit($1, $2)",
                        &[&resource, &(fence as i64)],
                    )
                    .await;
                match (expected, got) {
                    (Ok(_), Ok(r)) => {
                        assert_eq!(r.get::<_, i64>(0) as u64, fence);
                        core_mark = Some(fence);
                    }
                    (Err(Refused::Stale { .. }), Err(e)) => {
                        assert_eq!(e.code().unwrap().code(), postgres::STALE)
                    }
                    (want, got) => {
                        panic!("core {want:?} but SQL {got:?} for {fence} on {core_mark:?}")
                    }
                }
            }
        }
    });
}

#[test]
fn with_keys_only_signed_fences_pass_and_rotation_keeps_old_tokens() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = connect(&url(&pg, "postgres")).await;
        let keys = FenceKeys::parse(KEY).unwrap();
        postgres::install(&mut c, Some(&keys)).await.unwrap();
        setup(&c).await;
        let signed = Presented::Token(keys.sign("task-1", 3));
        assert_eq!(guarded_add(&mut c, &signed, "signed").await.unwrap(), 3);
        // A bare fence, a forged token and a real token with its fence raised.
        let e = guarded_add(&mut c, &Presented::Fence(4), "bare")
            .await
            .unwrap_err();
        assert!(
            matches!(e, GuardError::Refused(Refused::Unsigned(4))),
            "{e}"
        );
        let forged = FenceKeys::parse(OTHER)
            .unwrap()
            .sign("task-1", i64::MAX as u64);
        let e = guarded_add(&mut c, &Presented::Token(forged), "forged")
            .await
            .unwrap_err();
        assert!(matches!(e, GuardError::Refused(Refused::Forged)), "{e}");
        let raised = keys.sign("task-1", 3).replacen("bf1.3.", "bf1.999999.", 1);
        let e = guarded_add(&mut c, &Presented::Token(raised), "raised")
            .await
            .unwrap_err();
        assert!(matches!(e, GuardError::Refused(Refused::Forged)), "{e}");
        let e = guarded_add(&mut c, &Presented::Token("bf1.1.x".into()), "junk")
            .await
            .unwrap_err();
        assert!(
            matches!(e, GuardError::Refused(Refused::Invalid { .. })),
            "{e}"
        );
        // Nothing but the signed write landed, and the mark is its fence.
        assert_eq!(row(&c).await, (1, "signed".into()));

        // Rotation: the new key first, the old kept; both verify.
        let both = FenceKeys::parse(&format!("{OTHER}\n{KEY}")).unwrap();
        postgres::install(&mut c, Some(&both)).await.unwrap();
        let old_token = Presented::Token(keys.sign("task-2", 6));
        assert_eq!(guarded_add(&mut c, &old_token, "old").await.unwrap(), 6);
        let new_token = Presented::Token(both.sign("task-3", 7));
        assert_eq!(guarded_add(&mut c, &new_token, "new").await.unwrap(), 7);
        // The old key retired: its tokens are forged now.
        postgres::install(&mut c, Some(&FenceKeys::parse(OTHER).unwrap()))
            .await
            .unwrap();
        let e = guarded_add(&mut c, &Presented::Token(keys.sign("task-4", 8)), "retired")
            .await
            .unwrap_err();
        assert!(matches!(e, GuardError::Refused(Refused::Forged)), "{e}");
        assert_eq!(row(&c).await, (3, "new".into()));
    });
}

#[test]
fn eight_racing_writers_land_in_fence_order() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let u = url(&pg, "postgres");
    rt.block_on(async {
        let mut c = connect(&u).await;
        postgres::install(&mut c, None).await.unwrap();
        c.batch_execute("CREATE TABLE landed (seq bigserial PRIMARY KEY, fence bigint NOT NULL)")
            .await
            .unwrap();
    });
    // Eight threads, each its own connection, each writing fences from its
    // own stride, in a shuffled order: the writes that land are in
    // increasing fence order, and every refusal is of a fence below one
    // already admitted.
    let threads: Vec<_> = (0..8u64)
        .map(|w| {
            let u = u.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(async {
                    let mut c = connect(&u).await;
                    let mut refused = 0;
                    let mut rng = fastrand::Rng::with_seed(w);
                    let mut fences: Vec<u64> = (0..25).map(|i| 1 + i * 8 + w).collect();
                    rng.shuffle(&mut fences);
                    for f in fences {
                        let tx = c.transaction().await.unwrap();
                        match admit(&tx, "hot", &Presented::Fence(f)).await {
                            Ok(_) => {
                                tx.execute(
                                    "INSERT INTO landed (fence) VALUES ($1)",
                                    &[&(f as i64)],
                                )
                                .await
                                .unwrap();
                                tx.commit().await.unwrap();
                            }
                            Err(e) if e.is_stale() => refused += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    refused
                })
            })
        })
        .collect();
    let refused: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let landed: Vec<i64> = pg
        .sql("SELECT fence FROM landed ORDER BY seq")
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(landed.windows(2).all(|w| w[0] <= w[1]), "{landed:?}");
    assert_eq!(landed.len() + refused, 200);
    assert!(refused > 0, "shuffled writers never raced");
    assert_eq!(
        pg.sql("SELECT fence FROM baton_guard.fences WHERE resource = 'hot'"),
        landed.last().unwrap().to_string()
    );
}

#[test]
fn a_database_that_is_down_admits_nothing() {
    let Some(mut pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let u = url(&pg, "postgres");
    rt.block_on(async {
        let mut c = connect(&u).await;
        postgres::install(&mut c, None).await.unwrap();
        setup(&c).await;
        // A transaction is open when the server dies under it.
        let tx = c.transaction().await.unwrap();
        pg.crash();
        let e = admit(&tx, "account:1", &Presented::Fence(2))
            .await
            .unwrap_err();
        assert!(matches!(e, GuardError::Unavailable(_)), "{e}");
        assert_eq!(e.code(), "unavailable");
    });
    pg.restart();
    rt.block_on(async {
        let c = connect(&u).await;
        let n: i64 = c
            .query_one("SELECT count(*) FROM baton_guard.fences", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "nothing was admitted");
    });
}

#[test]
fn another_role_may_admit_but_not_read_the_keys_or_move_a_mark() {
    // The application's role is not the installer's: it calls the guard,
    // and cannot read the keys to forge, nor write a mark past the rule.
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    pg.sql("CREATE ROLE app LOGIN");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut owner = connect(&url(&pg, "postgres")).await;
        let keys = FenceKeys::parse(KEY).unwrap();
        postgres::install(&mut owner, Some(&keys)).await.unwrap();
        let app_url = format!("postgres://app@127.0.0.1:{}/postgres", pg.port);
        let app = connect(&app_url).await;
        let mark = admit(&app, "r", &Presented::Token(keys.sign("t", 4)))
            .await
            .unwrap();
        assert_eq!(mark, 4);
        for sql in [
            "SELECT secret FROM baton_guard.keys",
            "UPDATE baton_guard.fences SET fence = 9223372036854775807",
            "DELETE FROM baton_guard.fences",
            "INSERT INTO baton_guard.keys VALUES (9, 'mine')",
            "SELECT baton_guard.mark('r', 999999)",
        ] {
            let e = app.batch_execute(sql).await.unwrap_err();
            assert_eq!(
                e.code().unwrap().code(),
                "42501",
                "{sql}: {:?}",
                e.as_db_error().map(|d| d.message())
            );
        }
        let e = admit(&app, "r", &Presented::Fence(100)).await.unwrap_err();
        assert!(
            matches!(e, GuardError::Refused(Refused::Unsigned(100))),
            "{e}"
        );
        assert_eq!(
            pg.sql("SELECT fence FROM baton_guard.fences WHERE resource = 'r'"),
            "4"
        );
    });
}
