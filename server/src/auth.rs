//! The token file and bearer-token checks. Tokens are kept only as their
//! SHA-256 digests and compared in constant time; no token is ever logged
//! or echoed.

use baton_core::access::{Caller, OwnerPattern, Role, Scope};
use baton_core::{Error, Id};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The shortest token accepted: guessing one must be hopeless.
pub const MIN_TOKEN_BYTES: usize = 16;
/// The largest token file read.
const MAX_FILE_BYTES: usize = 1024 * 1024;

struct Entry {
    digest: [u8; 32],
    caller: Caller,
}

/// The tokens a server accepts.
pub struct Tokens {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names and roles only: never a token or its digest.
        let names: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("{} {}", e.caller.name, e.caller.role))
            .collect();
        f.debug_struct("Tokens").field("callers", &names).finish()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    /// Parses a token file: one `NAME ROLE TOKEN` per line, ROLE `worker`
    /// or `operator`, `#` to the end of a line a comment, blank lines
    /// ignored. Errors name the field `tokens` and the line, never a token.
    pub fn parse(text: &str) -> Result<Tokens, Error> {
        if text.len() > MAX_FILE_BYTES {
            return Err(Error::invalid(
                "tokens",
                format!("the token file must be at most {MAX_FILE_BYTES} bytes"),
            ));
        }
        let mut entries: Vec<Entry> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let bad = |rule: &str| Error::invalid("tokens", format!("line {}: {rule}", n + 1));
            let parts: Vec<&str> = line.split_whitespace().collect();
            let (name, role, token, rest) = match parts[..] {
                [name, role, token, ref rest @ ..] if rest.len() <= 2 => (name, role, token, rest),
                _ => {
                    return Err(bad(
                        "a line is NAME ROLE TOKEN [owners=ID,PREFIX*,...] [scope=queue:Q,prefix:P*,...]",
                    ));
                }
            };
            let name = Id::parse("tokens", name).map_err(|e| bad(&e.message))?;
            let role = Role::parse(role).ok_or_else(|| bad("ROLE is worker or operator"))?;
            let mut owners = None;
            let mut scope = None;
            for field in rest {
                if let Some(list) = field.strip_prefix("owners=") {
                    if owners.is_some() {
                        return Err(bad("owners= is given twice"));
                    }
                    owners = Some(
                        list.split(',')
                            .map(|p| OwnerPattern::parse(p).map_err(|e| bad(&e.message)))
                            .collect::<Result<Vec<_>, _>>()?,
                    );
                } else if let Some(rules) = field.strip_prefix("scope=") {
                    if scope.is_some() {
                        return Err(bad("scope= is given twice"));
                    }
                    scope = Some(Scope::parse(rules).map_err(|e| bad(&e.message))?);
                } else {
                    return Err(bad(
                        "a field after the token is owners=ID,PREFIX*,... or scope=queue:Q,prefix:P*,...",
                    ));
                }
            }
            let owners = owners.unwrap_or_default();
            if token.len() < MIN_TOKEN_BYTES {
                return Err(bad(&format!(
                    "a token must be at least {MIN_TOKEN_BYTES} bytes"
                )));
            }
            let d = digest(token.as_bytes());
            if entries.iter().any(|e| bool::from(e.digest.ct_eq(&d))) {
                return Err(bad("this token is given on an earlier line too"));
            }
            entries.push(Entry {
                digest: d,
                caller: Caller {
                    name,
                    role,
                    owners,
                    scope,
                },
            });
        }
        if entries.is_empty() {
            return Err(Error::invalid("tokens", "the token file gives no token"));
        }
        Ok(Tokens { entries })
    }

    /// Reads and parses a token file.
    pub fn load(path: &std::path::Path) -> Result<Tokens, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid("tokens", format!("cannot read {}: {e}", path.display()))
        })?;
        Tokens::parse(&text)
    }

    /// The caller a presented token proves, if any. Every entry is
    /// compared, in constant time, whichever matches.
    pub fn check(&self, token: &str) -> Option<Caller> {
        let d = digest(token.as_bytes());
        let mut found = None;
        for e in &self.entries {
            if bool::from(e.digest.ct_eq(&d)) {
                found = Some(e.caller.clone());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_token_file_maps_tokens_to_callers() {
        let t = Tokens::parse(
            "# who may ask\nci worker aaaaaaaaaaaaaaaaaaaa\n\nops operator bbbbbbbbbbbbbbbbbbbb # on call\n",
        )
        .unwrap();
        let ci = t.check("aaaaaaaaaaaaaaaaaaaa").unwrap();
        assert_eq!((ci.name.as_str(), ci.role), ("ci", Role::Worker));
        assert_eq!(
            t.check("bbbbbbbbbbbbbbbbbbbb").unwrap().role,
            Role::Operator
        );
        assert!(t.check("cccccccccccccccccccc").is_none());
        assert!(t.check("").is_none());
        assert!(!format!("{t:?}").contains("aaaa"), "Debug shows no token");
    }

    #[test]
    fn a_scope_limits_a_token_to_queues_and_prefixes() {
        let t = Tokens::parse(
            "ci worker aaaaaaaaaaaaaaaaaaaa scope=queue:ci,prefix:agent-* owners=w-*\nops operator bbbbbbbbbbbbbbbbbbbb\n",
        )
        .unwrap();
        let ci = t.check("aaaaaaaaaaaaaaaaaaaa").unwrap();
        let scope = ci.scope.unwrap();
        assert!(scope.admits("anything", Some("ci")));
        assert!(scope.admits("agent-7", None));
        assert!(!scope.admits("deploy", Some("prod")));
        assert!(!scope.admits("agent", None), "the prefix is agent-");
        assert_eq!(ci.owners.len(), 1);
        assert!(t.check("bbbbbbbbbbbbbbbbbbbb").unwrap().scope.is_none());
    }

    #[test]
    fn bad_lines_are_refused_naming_the_line_never_the_token() {
        for (text, rule) in [
            ("ci worker", "NAME ROLE TOKEN"),
            ("ci admin aaaaaaaaaaaaaaaaaaaa", "worker or operator"),
            ("ci worker short", "at least"),
            (
                "a worker aaaaaaaaaaaaaaaaaaaa\nb worker aaaaaaaaaaaaaaaaaaaa",
                "earlier line",
            ),
            ("# nothing\n", "no token"),
            (
                "ci worker aaaaaaaaaaaaaaaaaaaa scope=bogus",
                "queue:QUEUE or prefix:PREFIX*",
            ),
            (
                "ci worker aaaaaaaaaaaaaaaaaaaa scope=prefix:ci",
                "ends with `*`",
            ),
            (
                "ci worker aaaaaaaaaaaaaaaaaaaa scope=queue:a scope=queue:b",
                "given twice",
            ),
            ("ci worker aaaaaaaaaaaaaaaaaaaa colour=red", "owners="),
        ] {
            let e = Tokens::parse(text).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("tokens"));
            assert!(e.message.contains(rule), "{text}: {e}");
            assert!(!e.message.contains("aaaa"), "{e}");
        }
    }
}
