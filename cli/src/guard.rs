//! `baton guard`: the guards of `baton-guard` from a shell. Each command
//! is transport: the rule is core's, the storage the user's.

use crate::args::{Fenced, GuardCommand};
use crate::output::Out;
use baton_core::call::{Output, Status};
use baton_core::{Error, ErrorKind};
use baton_guard::{Admitted, FenceKeys, GuardError, Presented, Refused};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Where a guard lives.
enum Target {
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres(String),
    Sqlite(PathBuf),
}

fn target(text: &str) -> Target {
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        Target::Postgres(text.to_string())
    } else {
        Target::Sqlite(PathBuf::from(text.strip_prefix("sqlite:").unwrap_or(text)))
    }
}

/// A refusal is an answer (exit 1, its code and message as JSON); a
/// missing guard or storage that cannot answer is an error that names it.
fn answer(r: Result<Value, GuardError>) -> Result<Out, Error> {
    match r {
        Ok(v) => Ok(Out::from(Output::one(v))),
        Err(GuardError::Refused(Refused::Invalid { field, rule })) => {
            Err(Error::invalid(field, rule))
        }
        Err(GuardError::Refused(r)) => {
            let mut v = json!({"code": r.code(), "message": r.to_string()});
            if let Refused::Stale {
                resource,
                fence,
                highest,
            } = &r
            {
                v["resource"] = json!(resource);
                v["fence"] = json!(fence);
                v["highest"] = json!(highest);
            }
            let mut out = Output::one(v);
            out.status = Status::Refused;
            Ok(Out::from(out))
        }
        Err(e @ (GuardError::NotInstalled(_) | GuardError::Unavailable(_))) => {
            Err(Error::new(ErrorKind::Unavailable, e.to_string()))
        }
    }
}

fn presented(f: &Fenced) -> Result<Presented, GuardError> {
    match &f.fence {
        Some(text) => Ok(Presented::parse(text)?),
        None => baton_guard::from_env(),
    }
}

fn keys(path: Option<&Path>) -> Result<Option<FenceKeys>, GuardError> {
    path.map(baton_guard::read_keys).transpose()
}

fn admitted(resource: &str, fence: u64, how: Admitted) -> Value {
    json!({
        "resource": resource,
        "fence": fence,
        "admitted": match how {
            Admitted::First => "first",
            Admitted::Equal => "equal",
            Admitted::Raised { .. } => "raised",
        },
    })
}

fn read_stdin() -> Result<String, GuardError> {
    std::io::read_to_string(std::io::stdin()).map_err(|e| {
        Refused::Invalid {
            field: "stdin",
            rule: format!("the SQL to run, as UTF-8 text: {e}"),
        }
        .into()
    })
}

pub async fn run(cmd: &GuardCommand) -> Result<Out, Error> {
    let r = match cmd {
        GuardCommand::Keygen => baton_guard::keygen()
            .map(|k| {
                baton_supervisor::term::write_stdout(&format!("{k}\n"));
                Value::Null
            })
            .map_err(|e| GuardError::Unavailable(format!("reading /dev/urandom: {e}"))),
        GuardCommand::Install { target: t, key } => install(&target(t), key.as_deref()).await,
        GuardCommand::Write {
            path,
            fenced,
            marks,
        } => (|| {
            let p = presented(fenced)?;
            let k = keys(fenced.key.as_deref())?;
            let fence = p.fence(k.as_ref())?;
            let how = baton_guard::file::write(
                path,
                &fenced.resource,
                &p,
                k.as_ref(),
                marks.as_deref(),
                &mut std::io::stdin().lock(),
            )?;
            let mut v = admitted(&fenced.resource, fence, how);
            v["path"] = json!(path.display().to_string());
            Ok(v)
        })(),
        GuardCommand::Sql { target: t, fenced } => sql(&target(t), fenced).await,
        GuardCommand::Show {
            target: t,
            resource,
        } => show(t, resource).await,
    };
    if matches!(cmd, GuardCommand::Keygen) && r.is_ok() {
        return Ok(Out::printed());
    }
    answer(r)
}

async fn install(t: &Target, key: Option<&Path>) -> Result<Value, GuardError> {
    let k = keys(key)?;
    match t {
        #[cfg(feature = "postgres")]
        Target::Postgres(url) => {
            let mut c = baton_guard::postgres::connect(url).await?;
            baton_guard::postgres::install(&mut c, k.as_ref()).await?;
            Ok(
                json!({"installed": "postgres", "schema": "baton_guard", "keys": k.map(|k| k.len())}),
            )
        }
        #[cfg(not(feature = "postgres"))]
        Target::Postgres(_) => Err(no_postgres()),
        Target::Sqlite(path) => {
            if k.is_some() {
                return Err(Refused::Invalid {
                    field: "key",
                    rule: "a SQLite guard checks keys where it admits: give --key to `guard sql` or to the helper, not to install".into(),
                }
                .into());
            }
            let c = baton_guard::sqlite::open(path)?;
            baton_guard::sqlite::install(&c)?;
            Ok(
                json!({"installed": "sqlite", "path": path.display().to_string(), "table": baton_guard::sqlite::TABLE}),
            )
        }
    }
}

#[cfg(not(feature = "postgres"))]
fn no_postgres() -> GuardError {
    GuardError::Unavailable(
        "this baton was built without Postgres (cargo build -p baton-cli --features postgres)"
            .into(),
    )
}

async fn sql(t: &Target, fenced: &Fenced) -> Result<Value, GuardError> {
    let p = presented(fenced)?;
    let k = keys(fenced.key.as_deref())?;
    let text = read_stdin()?;
    match t {
        #[cfg(feature = "postgres")]
        Target::Postgres(url) => {
            if k.is_some() {
                return Err(Refused::Invalid {
                    field: "key",
                    rule: "a Postgres guard verifies with the keys installed in the database (`guard install --key`)".into(),
                }
                .into());
            }
            let mut c = baton_guard::postgres::connect(url).await?;
            let mark =
                baton_guard::postgres::run_guarded(&mut c, &fenced.resource, &p, &text).await?;
            Ok(json!({"resource": fenced.resource, "fence": mark}))
        }
        #[cfg(not(feature = "postgres"))]
        Target::Postgres(_) => Err(no_postgres()),
        Target::Sqlite(path) => {
            let fence = p.fence(k.as_ref())?;
            let mut c = baton_guard::sqlite::open(path)?;
            let how =
                baton_guard::sqlite::run_guarded(&mut c, &fenced.resource, &p, k.as_ref(), &text)?;
            Ok(admitted(&fenced.resource, fence, how))
        }
    }
}

async fn show(t: &str, resource: &str) -> Result<Value, GuardError> {
    baton_core::fencing::check_resource(resource)?;
    let fence = match target(t) {
        #[cfg(feature = "postgres")]
        Target::Postgres(url) => {
            let c = baton_guard::postgres::connect(&url).await?;
            baton_guard::postgres::highest(&c, resource).await?
        }
        #[cfg(not(feature = "postgres"))]
        Target::Postgres(_) => return Err(no_postgres()),
        Target::Sqlite(path) if path.is_dir() => baton_guard::file::highest(&path, resource)?,
        Target::Sqlite(path) => {
            if !path.exists() {
                return Err(GuardError::NotInstalled(format!(
                    "no database at {}",
                    path.display()
                )));
            }
            let c = baton_guard::sqlite::open(&path)?;
            baton_guard::sqlite::highest(&c, resource)?
        }
    };
    Ok(json!({"resource": resource, "fence": fence}))
}
