//! The Postgres guard, for any database (not only baton's store): a schema
//! `baton_guard` holding a table of resource -> highest fence and the
//! functions the user's transaction calls before it writes:
//!
//! ```sql
//! BEGIN;
//! SELECT baton_guard.admit('invoice:42', 17);          -- a bare fence
//! SELECT baton_guard.admit_token('invoice:42', 'bf1...'); -- a signed one
//! UPDATE invoices SET ... WHERE id = 42;
//! COMMIT;
//! ```
//!
//! A lower fence than one admitted raises SQLSTATE `BG001` (`stale_fence`)
//! and the whole transaction rolls back; an equal one passes. The admit
//! takes the resource's row lock until the transaction ends, so two
//! attempts' transactions admit and write in fence order. With keys
//! installed (`install` with [`FenceKeys`]), `admit` with a bare fence
//! raises `BG002` and a token no key signed `BG003` (verified in the
//! database with pgcrypto's HMAC, so a caller cannot skip the check).
//!
//! The rule is core's [`baton_core::fencing::admit`], written here in SQL
//! because a transaction in any language must be able to call it; the
//! crate's tests run the same sequences through both.

use crate::{GuardError, Presented};
use baton_core::fencing::{self, FenceKeys, Refused};
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;

/// SQLSTATE of a stale fence.
pub const STALE: &str = "BG001";
/// SQLSTATE of a bare fence where keys are installed.
pub const UNSIGNED: &str = "BG002";
/// SQLSTATE of a token no installed key signed.
pub const FORGED: &str = "BG003";
/// SQLSTATE of a bad resource, fence or token.
pub const INVALID: &str = "BG004";

/// The guard's schema, tables and functions (idempotent). `crypto` is the
/// schema pgcrypto lives in.
pub fn install_sql(crypto: &str) -> String {
    let crypto = quote_ident(crypto);
    format!(
        r#"
CREATE SCHEMA IF NOT EXISTS baton_guard;
CREATE TABLE IF NOT EXISTS baton_guard.fences (
    resource text PRIMARY KEY,
    fence bigint NOT NULL CHECK (fence >= 1),
    admitted_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS baton_guard.keys (
    position int PRIMARY KEY,
    secret bytea NOT NULL
);
-- Any role may call the admit functions (they are the guard); no role but
-- the installer's may read the keys or write the marks directly.
GRANT USAGE ON SCHEMA baton_guard TO PUBLIC;
REVOKE ALL ON baton_guard.keys FROM PUBLIC;
REVOKE ALL ON baton_guard.fences FROM PUBLIC;

-- Admits fence n for resource r (no key check): the mark rises to n, stays
-- for an equal n, and a lower n raises BG001 with the mark as DETAIL.
CREATE OR REPLACE FUNCTION baton_guard.mark(r text, n bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
    got bigint;
BEGIN
    IF r IS NULL OR r = '' OR octet_length(r) > 512 OR r ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION USING ERRCODE = 'BG004',
            MESSAGE = 'invalid resource: 1 to 512 bytes, no control characters';
    END IF;
    IF n IS NULL OR n < 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'BG004',
            MESSAGE = 'invalid fence: a whole number from 1';
    END IF;
    INSERT INTO baton_guard.fences AS f (resource, fence) VALUES (r, n)
    ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence, admitted_at = now()
        WHERE f.fence <= excluded.fence
    RETURNING f.fence INTO got;
    IF got IS NULL THEN
        SELECT f.fence INTO got FROM baton_guard.fences f WHERE f.resource = r;
        RAISE EXCEPTION USING ERRCODE = 'BG001', DETAIL = got::text,
            MESSAGE = format('stale_fence: resource %L has admitted fence %s; fence %s is an earlier attempt''s', r, got, n);
    END IF;
    RETURN got;
END
$f$;
REVOKE ALL ON FUNCTION baton_guard.mark(text, bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION baton_guard.admit(resource text, fence bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
    IF EXISTS (SELECT 1 FROM baton_guard.keys) THEN
        RAISE EXCEPTION USING ERRCODE = 'BG002',
            MESSAGE = 'unsigned_fence: this guard admits only fences signed by the authority: call baton_guard.admit_token with the grant''s token';
    END IF;
    RETURN baton_guard.mark(resource, fence);
END
$f$;

CREATE OR REPLACE FUNCTION baton_guard.unb64url(t text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $f$
    SELECT decode(rpad(translate(t, '-_', '+/'), ((length(t) + 3) / 4) * 4, '='), 'base64')
$f$;

-- Admits the fence a token carries: with keys installed, only if one of
-- them signed it (HMAC-SHA256 over 'baton-fence-v1\n<fence>\n<task>').
CREATE OR REPLACE FUNCTION baton_guard.admit_token(resource text, token text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
    parts text[];
    n bigint;
    task text;
    mac bytea;
BEGIN
    parts := string_to_array(token, '.');
    IF parts IS NULL OR array_length(parts, 1) <> 4 OR parts[1] <> 'bf1'
       OR parts[2] !~ '^[0-9]{{1,19}}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'BG004',
            MESSAGE = 'invalid token: bf1.FENCE.TASK.MAC, four parts separated by dots';
    END IF;
    BEGIN
        n := parts[2]::bigint;
        task := convert_from(baton_guard.unb64url(parts[3]), 'UTF8');
        mac := baton_guard.unb64url(parts[4]);
    EXCEPTION WHEN others THEN
        RAISE EXCEPTION USING ERRCODE = 'BG004',
            MESSAGE = 'invalid token: its fence, task or MAC does not decode';
    END;
    IF EXISTS (SELECT 1 FROM baton_guard.keys) AND NOT EXISTS (
        SELECT 1 FROM baton_guard.keys k
        WHERE sha256({crypto}.hmac(convert_to('baton-fence-v1' || E'\n' || n::text || E'\n' || task, 'UTF8'),
                              k.secret, 'sha256')) = sha256(mac)
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'BG003',
            MESSAGE = 'forged_fence: the token''s signature matches none of the guard''s keys';
    END IF;
    RETURN baton_guard.mark(resource, n);
END
$f$;
"#
    )
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn unavailable(e: tokio_postgres::Error) -> GuardError {
    match e.code() {
        Some(c) if *c == SqlState::UNDEFINED_FUNCTION || *c == SqlState::INVALID_SCHEMA_NAME => {
            GuardError::NotInstalled(
                "no schema baton_guard with its admit functions in this database (`baton guard install URL`)".into(),
            )
        }
        Some(c) if *c == SqlState::UNDEFINED_TABLE => GuardError::NotInstalled(
            "the table baton_guard.fences is missing (`baton guard install URL`)".into(),
        ),
        _ => GuardError::Unavailable(format!("postgres: {}", describe(&e))),
    }
}

/// The server's message when there is one (tokio-postgres's Display says
/// only "db error").
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// Connects to the database at `url` (no TLS: a loopback or private
/// network), its connection driven on the current tokio runtime.
pub async fn connect(url: &str) -> Result<tokio_postgres::Client, GuardError> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| {
            GuardError::Unavailable(format!("connecting to Postgres: {}", describe(&e)))
        })?;
    tokio::spawn(conn);
    Ok(client)
}

/// Runs `sql` (one or more statements) in one transaction after admitting
/// `presented` for `resource`: on a refusal nothing of it is applied.
pub async fn run_guarded(
    client: &mut tokio_postgres::Client,
    resource: &str,
    presented: &Presented,
    sql: &str,
) -> Result<u64, GuardError> {
    let tx = client.transaction().await.map_err(unavailable)?;
    let mark = admit(&tx, resource, presented).await?;
    tx.batch_execute(sql)
        .await
        .map_err(|e| GuardError::Unavailable(format!("your SQL failed: {}", describe(&e))))?;
    tx.commit().await.map_err(unavailable)?;
    Ok(mark)
}

/// The highest fence admitted for `resource`, if any.
pub async fn highest(
    client: &impl GenericClient,
    resource: &str,
) -> Result<Option<u64>, GuardError> {
    let row = client
        .query_opt(
            "SELECT fence FROM baton_guard.fences WHERE resource = $1",
            &[&resource],
        )
        .await
        .map_err(unavailable)?;
    Ok(row.map(|r| r.get::<_, i64>(0).max(0) as u64))
}

/// Installs (or upgrades) the guard in the database `client` is connected
/// to, in one transaction. With `keys`, they replace the installed ones (a
/// rotation: install the new file, old keys kept in it until every holder
/// signs with the new) and pgcrypto is created if missing; without, keys
/// already installed stay.
pub async fn install(
    client: &mut tokio_postgres::Client,
    keys: Option<&FenceKeys>,
) -> Result<(), GuardError> {
    let tx = client.transaction().await.map_err(unavailable)?;
    tx.batch_execute("CREATE EXTENSION IF NOT EXISTS pgcrypto")
        .await
        .map_err(|e| GuardError::Unavailable(format!("creating pgcrypto: {}", describe(&e))))?;
    let crypto: String = tx
        .query_one(
            "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pgcrypto'",
            &[],
        )
        .await
        .map_err(unavailable)?
        .get(0);
    tx.batch_execute(&install_sql(crypto.trim_matches('"')))
        .await
        .map_err(unavailable)?;
    if let Some(keys) = keys {
        tx.execute("DELETE FROM baton_guard.keys", &[])
            .await
            .map_err(unavailable)?;
        for (i, k) in keys.secrets().enumerate() {
            let pos = i32::try_from(i).unwrap_or(i32::MAX);
            tx.execute(
                "INSERT INTO baton_guard.keys (position, secret) VALUES ($1, $2)",
                &[&pos, &k],
            )
            .await
            .map_err(unavailable)?;
        }
    }
    tx.commit().await.map_err(unavailable)
}

/// What a failed admit means: a refusal (by its SQLSTATE), a missing
/// guard, or a database that could not answer.
pub fn classify(e: tokio_postgres::Error, resource: &str, presented: &Presented) -> GuardError {
    let Some(db) = e.as_db_error() else {
        return unavailable(e);
    };
    let fence = match presented {
        Presented::Fence(n) => *n,
        Presented::Token(t) => fencing::Token::read(t).map(|t| t.fence).unwrap_or(0),
    };
    match db.code().code() {
        STALE => Refused::Stale {
            resource: resource.to_string(),
            fence,
            highest: db.detail().and_then(|d| d.parse().ok()).unwrap_or(0),
        }
        .into(),
        UNSIGNED => Refused::Unsigned(fence).into(),
        FORGED => Refused::Forged.into(),
        INVALID => Refused::Invalid {
            field: "input",
            rule: db.message().to_string(),
        }
        .into(),
        _ => unavailable(e),
    }
}

/// Admits `presented` for `resource` inside the caller's transaction (a
/// `Transaction`, or a client in a transaction block), returning the mark.
/// A refusal aborts that transaction: roll it back.
pub async fn admit(
    client: &impl GenericClient,
    resource: &str,
    presented: &Presented,
) -> Result<u64, GuardError> {
    fencing::check_resource(resource)?;
    let row = match presented {
        Presented::Fence(n) => {
            fencing::check_fence(*n)?;
            // check_fence bounds it by i64::MAX.
            let n = *n as i64;
            client
                .query_one("SELECT baton_guard.admit($1, $2)", &[&resource, &n])
                .await
        }
        Presented::Token(t) => {
            client
                .query_one("SELECT baton_guard.admit_token($1, $2)", &[&resource, t])
                .await
        }
    };
    let row = row.map_err(|e| classify(e, resource, presented))?;
    let mark: i64 = row.get(0);
    Ok(mark.max(0) as u64)
}
