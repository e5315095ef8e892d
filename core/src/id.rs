//! Identifiers: task ids, owner ids, run ids, operator ids.

use crate::error::Error;
use icu_properties::props::{BinaryProperty, DefaultIgnorableCodePoint};
use std::fmt;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// The longest id, in bytes.
pub const MAX_ID_BYTES: usize = 256;

thread_local! {
    /// Set while this thread reads what a store holds
    /// ([`crate::json::decode_stored`]): an id stored before a rule that
    /// came later (white space at an end) still reads.
    static STORED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` reading stored data: ids are held to the rules that make
/// them unambiguous to read, not to those added for new input since.
pub(crate) fn reading_stored<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            STORED.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(STORED.with(|s| s.replace(true)));
    f()
}

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
        // What renders as nothing (U+034F, the Hangul fillers, zero-width
        // spaces, variation selectors: Unicode's Default_Ignorable_Code_Point)
        // makes two ids print alike.
        if let Some(c) = value
            .chars()
            .filter(|c| !c.is_ascii())
            .find(|c| DefaultIgnorableCodePoint::for_char(*c))
        {
            return Err(Error::invalid(
                field,
                format!(
                    "must not contain characters that render as nothing (found U+{:04X}, a default-ignorable code point)",
                    c as u32
                ),
            ));
        }
        // A combining mark first attaches to whatever is printed before the id.
        if let Some(c) = value.chars().next().filter(|c| {
            !c.is_ascii()
                && matches!(
                    c.general_category(),
                    GeneralCategory::NonspacingMark
                        | GeneralCategory::SpacingMark
                        | GeneralCategory::EnclosingMark
                )
        }) {
            return Err(Error::invalid(
                field,
                format!(
                    "must not start with a combining mark (found U+{:04X})",
                    c as u32
                ),
            ));
        }
        if value.trim().is_empty() {
            return Err(Error::invalid(field, "must not be only white space"));
        }
        // `job` and `job ` (or `job` and U+3000 + `job`) print alike: no
        // white space (ASCII or Unicode's, the space separators included)
        // at either end.
        // (A record stored before this rule keeps its id: it must still read.)
        let first = value.chars().next().filter(|c| c.is_whitespace());
        let last = value.chars().next_back().filter(|c| c.is_whitespace());
        if let Some(c) = first.or(last)
            && !STORED.with(std::cell::Cell::get)
        {
            return Err(Error::invalid(
                field,
                format!(
                    "must not begin or end with white space (found U+{:04X})",
                    c as u32
                ),
            ));
        }
        // U+2800 (the Braille blank) is a symbol, in no invisible class, yet
        // prints as a space that is not one: `ab` and `ab` + U+2800 look alike.
        if value.contains('\u{2800}') {
            return Err(Error::invalid(
                field,
                "must not contain U+2800 (a blank that is not white space)",
            ));
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
            Id::parse("task", "in ner").is_ok(),
            "inner space is kept as given"
        );
        for padded in [
            " job",
            "job ",
            "\u{3000}job",
            "job\u{a0}",
            "\u{2003}job\u{2003}",
        ] {
            let e = Id::parse("task", padded).unwrap_err();
            assert!(e.message.contains("white space"), "{padded:?}: {e}");
        }
        // One stored before the rule still reads.
        let stored: Id =
            crate::json::decode_stored(br#""job ""#).expect("a stored padded id reads");
        assert_eq!(stored.as_str(), "job ");
        assert!(
            serde_json::from_str::<Id>(r#""job ""#).is_err(),
            "new input is refused"
        );
        // What renders as nothing, or attaches to what comes before.
        for invisible in [
            "ab\u{34f}",
            "a\u{3164}b",
            "\u{115f}ab",
            "ab\u{ffa0}",
            "ab\u{2800}",
            "\u{301}ab",
            "\u{20dd}ab",
            "ab\u{fe0f}",
            "ab\u{e0100}",
        ] {
            let e = Id::parse("task", invisible).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("task"), "{invisible:?}");
        }
        // A combining mark after a letter is just a letter with an accent.
        assert!(Id::parse("task", "e\u{301}").is_ok());
        assert!(Id::parse("task", "한국어-작업").is_ok());
    }
}
