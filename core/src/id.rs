//! Identifiers: task ids, owner ids, run ids, operator ids.

use crate::error::Error;
use std::fmt;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// The longest id, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// A validated identifier: UTF-8, 1..=256 bytes, no control characters.
///
/// Every id in baton (task, owner, executor, run, operator) follows the same
/// rule; the field name is given when parsing so an error can name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Id(String);

impl Id {
    /// Parses `value` as the id in `field`.
    pub fn parse(field: &str, value: &str) -> Result<Id, Error> {
        if value.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        if value.len() > MAX_ID_BYTES {
            return Err(Error::invalid(
                field,
                format!("must be at most {MAX_ID_BYTES} bytes (got {})", value.len()),
            ));
        }
        if let Some(c) = value.chars().find(|c| c.is_control()) {
            return Err(Error::invalid(
                field,
                format!(
                    "must not contain control characters (found U+{:04X})",
                    c as u32
                ),
            ));
        }
        // Format characters (a right-to-left override, a zero-width joiner)
        // and line or paragraph separators make an id print as something
        // else, or across lines.
        // No ASCII character is a format or separator character: only the
        // others need the (costly) category lookup.
        if let Some(c) = value.chars().filter(|c| !c.is_ascii()).find(|c| {
            matches!(
                c.general_category(),
                GeneralCategory::Format
                    | GeneralCategory::LineSeparator
                    | GeneralCategory::ParagraphSeparator
            )
        }) {
            return Err(Error::invalid(
                field,
                format!(
                    "must not contain format or line/paragraph separator characters (found U+{:04X})",
                    c as u32
                ),
            ));
        }
        if value.trim().is_empty() {
            return Err(Error::invalid(field, "must not be only white space"));
        }
        Ok(Id(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Id::parse("id", &s).map_err(|e| serde::de::Error::custom(e.message))
    }
}

/// A task's id.
pub type TaskId = Id;
/// A worker, session or executor id.
pub type OwnerId = Id;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_rules() {
        assert!(Id::parse("task", "a").is_ok());
        assert!(Id::parse("task", &"x".repeat(256)).is_ok());
        assert!(Id::parse("task", "ünïcödé/ok with spaces").is_ok());
        let e = Id::parse("task", "").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("task"));
        let e = Id::parse("owner", &"x".repeat(257)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("owner"));
        assert!(e.message.contains("256"));
        let e = Id::parse("task", "a\nb").unwrap_err();
        assert!(e.message.contains("control"));
        assert!(Id::parse("task", "a\u{7f}").is_err());
        for spoof in [
            "a\u{202e}b",
            "a\u{2028}b",
            "a\u{2029}b",
            "a\u{200b}b",
            "\u{feff}a",
        ] {
            let e = Id::parse("task", spoof).unwrap_err();
            assert!(e.message.contains("format"), "{spoof:?}: {e}");
        }
        for blank in [" ", "   ", "\u{3000}", " \u{a0} "] {
            let e = Id::parse("task", blank).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("task"), "{blank:?}");
        }
        assert!(
            Id::parse("task", " padded ").is_ok(),
            "inner text is kept as given"
        );
    }
}
