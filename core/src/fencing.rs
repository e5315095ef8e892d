//! Fences carried into the user's own storage: the rule a guard applies
//! before a write lands, and the signed token that proves a fence came
//! from the authority.
//!
//! A guard keeps, per resource, the highest fence it has admitted. A write
//! presenting a lower fence is a late attempt's (a holder paused past its
//! lease while another took the work) and is refused; an equal fence is the
//! same attempt writing again and passes; a higher one raises the mark.
//! Fences are store-wide monotonic, so one mark per resource holds even
//! when different tasks write the same resource.
//!
//! With highest-seen checks a forged huge fence would lock a resource for
//! every honest writer for good, so a guard configured with [`FenceKeys`]
//! admits only tokens the authority signed ([`FenceKeys::sign`]):
//! `bf1.<fence>.<task, base64url>.<HMAC-SHA256, base64url>` over
//! `baton-fence-v1\n<fence>\n<task>`. The key file's first key signs and
//! every key verifies, so a key is rotated by adding the new one to the
//! guards, then putting it first for the authority, then removing the old.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

type HmacSha256 = Hmac<Sha256>;

/// A token's leading word: the format's version.
pub const TOKEN_PREFIX: &str = "bf1";

/// What the MAC covers, before the fence and the task.
const SIGNED_CONTEXT: &str = "baton-fence-v1";

/// The shortest key a key file may hold, in bytes.
pub const MIN_KEY_BYTES: usize = 32;

/// The longest resource name a guard accepts, in bytes.
pub const MAX_RESOURCE_BYTES: usize = 512;

/// Why a guard refused a write. Each names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A later attempt already wrote this resource.
    #[error(
        "stale_fence: resource {resource:?} has admitted fence {highest}; fence {fence} is an earlier attempt's"
    )]
    Stale {
        resource: String,
        fence: u64,
        highest: u64,
    },
    /// The guard requires signed fences and was given a bare number.
    #[error(
        "unsigned_fence: this guard admits only fences signed by the authority (a token, BATON_FENCE_TOKEN); fence {0} came without one"
    )]
    Unsigned(u64),
    /// The token's signature matches none of the guard's keys.
    #[error("forged_fence: the token's signature matches none of the guard's keys")]
    Forged,
    /// An input broke its rule; nothing was admitted.
    #[error("invalid {field}: {rule}")]
    Invalid { field: &'static str, rule: String },
}

impl Refused {
    /// The refusal's code, as the guards report it.
    pub fn code(&self) -> &'static str {
        match self {
            Refused::Stale { .. } => "stale_fence",
            Refused::Unsigned(_) => "unsigned_fence",
            Refused::Forged => "forged_fence",
            Refused::Invalid { .. } => "invalid_input",
        }
    }
}

/// How a fence was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// The resource had no mark; this fence is its first.
    First,
    /// The same attempt writing again.
    Equal,
    /// A later attempt: the mark rises from `from`.
    Raised { from: u64 },
}

/// The guard's rule: admit `fence` for `resource` whose highest admitted
/// fence is `highest`, or refuse it as an earlier attempt's. The caller
/// stores `fence` as the new mark when this admits.
pub fn admit(resource: &str, highest: Option<u64>, fence: u64) -> Result<Admitted, Refused> {
    check_resource(resource)?;
    check_fence(fence)?;
    match highest {
        None => Ok(Admitted::First),
        Some(h) if fence == h => Ok(Admitted::Equal),
        Some(h) if fence > h => Ok(Admitted::Raised { from: h }),
        Some(h) => Err(Refused::Stale {
            resource: resource.to_string(),
            fence,
            highest: h,
        }),
    }
}

/// A resource name: 1 to [`MAX_RESOURCE_BYTES`] bytes, no control characters.
pub fn check_resource(resource: &str) -> Result<(), Refused> {
    let rule = if resource.is_empty() {
        "must not be empty".to_string()
    } else if resource.len() > MAX_RESOURCE_BYTES {
        format!("at most {MAX_RESOURCE_BYTES} bytes")
    } else if resource.chars().any(char::is_control) {
        "no control characters".to_string()
    } else {
        return Ok(());
    };
    Err(Refused::Invalid {
        field: "resource",
        rule,
    })
}

/// A fence is at least 1 (the authority's first) and fits a signed 64-bit
/// integer (the SQL guards store it as one).
pub fn check_fence(fence: u64) -> Result<(), Refused> {
    if fence == 0 || fence > i64::MAX as u64 {
        return Err(Refused::Invalid {
            field: "fence",
            rule: format!("a whole number from 1 to {}", i64::MAX),
        });
    }
    Ok(())
}

/// What a writer presents to a guard.
#[derive(Clone, PartialEq, Eq)]
pub enum Presented {
    /// A bare fence: admitted only by a guard without keys.
    Fence(u64),
    /// A signed token ([`FenceKeys::sign`]).
    Token(String),
}

impl fmt::Debug for Presented {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Presented::Fence(n) => write!(f, "Fence({n})"),
            Presented::Token(t) => write!(f, "Token({t:?})"),
        }
    }
}

impl Presented {
    /// Reads what a writer sent: a token (`bf1.…`) or a bare fence number.
    pub fn parse(text: &str) -> Result<Presented, Refused> {
        let text = text.trim();
        if text.starts_with(TOKEN_PREFIX) {
            return Ok(Presented::Token(text.to_string()));
        }
        let fence = text.parse::<u64>().map_err(|_| Refused::Invalid {
            field: "fence",
            rule: format!("a whole number or a token starting {TOKEN_PREFIX}., not {text:?}"),
        })?;
        check_fence(fence)?;
        Ok(Presented::Fence(fence))
    }

    /// The fence a guard may admit: with keys, only a token one of them
    /// signed; without, a bare fence or a token's fence (unverified: what
    /// holds without a key is that honest writers are fenced, not that a
    /// hostile one cannot raise the mark).
    pub fn fence(&self, keys: Option<&FenceKeys>) -> Result<u64, Refused> {
        match (self, keys) {
            (Presented::Fence(n), None) => {
                check_fence(*n)?;
                Ok(*n)
            }
            (Presented::Fence(n), Some(_)) => Err(Refused::Unsigned(*n)),
            (Presented::Token(t), Some(k)) => Ok(k.verify(t)?.fence),
            (Presented::Token(t), None) => Ok(Token::read(t)?.fence),
        }
    }
}

/// A token's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub fence: u64,
    pub task: String,
    mac: Vec<u8>,
}

impl Token {
    /// Splits a token into its parts, without checking the signature.
    pub fn read(token: &str) -> Result<Token, Refused> {
        let bad = |rule: &str| Refused::Invalid {
            field: "token",
            rule: rule.to_string(),
        };
        let mut parts = token.trim().split('.');
        let (Some(prefix), Some(fence), Some(task), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad("bf1.FENCE.TASK.MAC, four parts separated by dots"));
        };
        if prefix != TOKEN_PREFIX {
            return Err(bad("starts with bf1."));
        }
        let fence = fence
            .parse::<u64>()
            .map_err(|_| bad("its second part is the fence, a whole number"))?;
        check_fence(fence)?;
        let task = URL_SAFE_NO_PAD
            .decode(task)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| bad("its third part is the task id in base64url"))?;
        let mac = URL_SAFE_NO_PAD
            .decode(mac)
            .ok()
            .filter(|m| m.len() == 32)
            .ok_or_else(|| bad("its fourth part is a 32-byte MAC in base64url"))?;
        Ok(Token { fence, task, mac })
    }
}

/// The keys that sign and verify fence tokens: the first signs, every one
/// verifies.
#[derive(Clone)]
pub struct FenceKeys {
    keys: Vec<Vec<u8>>,
}

impl fmt::Debug for FenceKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print a key.
        write!(f, "FenceKeys({} keys)", self.keys.len())
    }
}

impl FenceKeys {
    /// Reads a key file: one key per line (blank lines and lines starting
    /// `#` skipped), each at least [`MIN_KEY_BYTES`] bytes as written.
    pub fn parse(text: &str) -> Result<FenceKeys, Refused> {
        let keys: Vec<Vec<u8>> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.as_bytes().to_vec())
            .collect();
        if keys.is_empty() {
            return Err(Refused::Invalid {
                field: "fence key",
                rule: "the key file holds no key (one per line)".into(),
            });
        }
        if let Some(i) = keys.iter().position(|k| k.len() < MIN_KEY_BYTES) {
            return Err(Refused::Invalid {
                field: "fence key",
                rule: format!(
                    "key {} is shorter than {MIN_KEY_BYTES} bytes (`baton guard keygen` makes one)",
                    i + 1
                ),
            });
        }
        Ok(FenceKeys { keys })
    }

    /// The keys' bytes, the signing one first (for a guard that verifies
    /// elsewhere, as the Postgres guard does in the database).
    pub fn secrets(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().map(Vec::as_slice)
    }

    /// How many keys verify.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn mac(key: &[u8], task: &str, fence: u64) -> HmacSha256 {
        // HMAC takes a key of any length.
        #[allow(clippy::expect_used)]
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts any key length");
        mac.update(format!("{SIGNED_CONTEXT}\n{fence}\n{task}").as_bytes());
        mac
    }

    /// The token for `task`'s attempt under `fence`, signed with the first key.
    pub fn sign(&self, task: &str, fence: u64) -> String {
        let tag = self
            .keys
            .first()
            .map(|k| Self::mac(k, task, fence).finalize().into_bytes().to_vec())
            .unwrap_or_default();
        format!(
            "{TOKEN_PREFIX}.{fence}.{}.{}",
            URL_SAFE_NO_PAD.encode(task.as_bytes()),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// The token's parts, if one of the keys signed it.
    pub fn verify(&self, token: &str) -> Result<Token, Refused> {
        let t = Token::read(token)?;
        let signed = self
            .keys
            .iter()
            .any(|k| Self::mac(k, &t.task, t.fence).verify_slice(&t.mac).is_ok());
        if signed { Ok(t) } else { Err(Refused::Forged) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> FenceKeys {
        FenceKeys::parse(text).unwrap()
    }

    const K1: &str = "0123456789abcdef0123456789abcdef-one";
    const K2: &str = "0123456789abcdef0123456789abcdef-two";

    #[test]
    fn a_lower_fence_is_refused_an_equal_or_higher_admitted() {
        assert_eq!(admit("r", None, 5), Ok(Admitted::First));
        assert_eq!(admit("r", Some(5), 5), Ok(Admitted::Equal));
        assert_eq!(admit("r", Some(5), 9), Ok(Admitted::Raised { from: 5 }));
        let e = admit("r", Some(9), 5).unwrap_err();
        assert_eq!(e.code(), "stale_fence");
        assert!(e.to_string().contains("9"), "{e}");
    }

    #[test]
    fn bad_resources_and_fences_are_named() {
        for (r, f) in [("", 1), ("a\nb", 1), ("r", 0), ("r", u64::MAX)] {
            let e = admit(r, None, f).unwrap_err();
            assert!(matches!(e, Refused::Invalid { .. }), "{r:?} {f}: {e}");
        }
        assert!(admit(&"x".repeat(513), None, 1).is_err());
        assert!(Presented::parse("12x").is_err());
        assert_eq!(Presented::parse(" 12\n").unwrap(), Presented::Fence(12));
    }

    #[test]
    fn a_signed_token_verifies_and_carries_its_fence() {
        let k = keys(K1);
        let t = k.sign("task a.b", 42);
        assert!(t.starts_with("bf1.42."));
        let v = k.verify(&t).unwrap();
        assert_eq!((v.fence, v.task.as_str()), (42, "task a.b"));
        assert_eq!(Presented::parse(&t).unwrap().fence(Some(&k)), Ok(42));
    }

    #[test]
    fn forged_altered_and_unsigned_fences_are_refused_with_keys() {
        let k = keys(K1);
        let other = keys(K2);
        // Signed with another key.
        assert_eq!(k.verify(&other.sign("t", 7)), Err(Refused::Forged));
        // A real token with its fence raised.
        let t = k.sign("t", 7);
        let raised = t.replacen("bf1.7.", "bf1.9999999.", 1);
        assert_eq!(k.verify(&raised), Err(Refused::Forged));
        // Its task changed.
        let parts: Vec<&str> = t.split('.').collect();
        let moved = format!(
            "bf1.7.{}.{}",
            URL_SAFE_NO_PAD.encode("u".as_bytes()),
            parts[3]
        );
        assert_eq!(k.verify(&moved), Err(Refused::Forged));
        // A bare number.
        assert_eq!(
            Presented::Fence(7).fence(Some(&k)),
            Err(Refused::Unsigned(7))
        );
        // Garbage.
        for bad in [
            "bf1",
            "bf1.1.2",
            "bf1.x.dA.AA",
            "bf1.1.dA.AA",
            "bf1.1.dA.AA.extra",
        ] {
            assert!(
                matches!(k.verify(bad), Err(Refused::Invalid { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn rotation_every_key_verifies_the_first_signs() {
        let old = keys(K1);
        let both = keys(&format!("# new first\n{K2}\n\n{K1}\n"));
        assert_eq!(both.len(), 2);
        // A guard holding both admits tokens from the old authority and the new.
        assert!(both.verify(&old.sign("t", 1)).is_ok());
        assert!(both.verify(&both.sign("t", 2)).is_ok());
        // A guard with only the old key refuses the new authority's.
        assert_eq!(old.verify(&both.sign("t", 2)), Err(Refused::Forged));
    }

    #[test]
    fn key_files_must_hold_long_keys() {
        assert!(FenceKeys::parse("").is_err());
        assert!(FenceKeys::parse("# only a comment\n").is_err());
        let e = FenceKeys::parse("short").unwrap_err();
        assert!(e.to_string().contains("32"), "{e}");
        assert_eq!(format!("{:?}", keys(K1)), "FenceKeys(1 keys)");
    }

    proptest::proptest! {
        /// Whatever a hostile writer sends, reading it never panics, and
        /// only the key's own signature verifies.
        #[test]
        fn hostile_values_are_refused_never_a_panic(text in ".{0,200}", bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..120)) {
            let k = keys(K1);
            let _ = Presented::parse(&text);
            let _ = k.verify(&text);
            let dotted = format!("bf1.{}", String::from_utf8_lossy(&bytes));
            proptest::prop_assert!(k.verify(&dotted).is_err());
            let _ = admit(&text, None, 1);
        }

        /// Over any sequence of fences, the mark never falls, a lower fence
        /// is always refused, and an admitted one is never below the mark.
        #[test]
        fn the_mark_only_rises(fences in proptest::collection::vec(1u64..50, 1..60)) {
            let mut mark: Option<u64> = None;
            for f in fences {
                match admit("r", mark, f) {
                    Ok(_) => {
                        proptest::prop_assert!(mark.is_none_or(|m| f >= m));
                        mark = Some(f);
                    }
                    Err(Refused::Stale { highest, .. }) => {
                        proptest::prop_assert_eq!(Some(highest), mark);
                        proptest::prop_assert!(f < highest);
                    }
                    Err(e) => proptest::prop_assert!(false, "{e}"),
                }
            }
        }
    }
}
