//! Time: millisecond timestamps and injectable clocks.
//!
//! core never reads the system clock itself; an [`crate::Authority`] asks its
//! [`Clock`], and tests give it a [`ManualClock`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The shortest TTL, in milliseconds.
pub const MIN_TTL_MS: u64 = 1;
/// The longest TTL (and lock delay, run-time limit, backoff): 7 days, in
/// milliseconds.
pub const MAX_TTL_MS: u64 = 7 * 24 * 3600 * 1000;

/// `ms` for `field` if it lies in `lo..=hi` (the rule of a TTL, a lock
/// delay, a run-time limit), else the error naming the field and the rule.
pub fn check_span(field: &str, ms: u64, lo: u64, hi: u64) -> Result<u64, crate::error::Error> {
    if (lo..=hi).contains(&ms) {
        return Ok(ms);
    }
    let days = |ms: u64| {
        if ms == 0 {
            "0".to_owned()
        } else if ms.is_multiple_of(24 * 3600 * 1000) {
            format!("{} days", ms / (24 * 3600 * 1000))
        } else {
            format!("{ms} ms")
        }
    };
    Err(crate::error::Error::invalid(
        field,
        format!(
            "must be a duration from {} to {} (got {ms}ms)",
            days(lo),
            days(hi)
        ),
    ))
}

/// A duration written as people write one (`750ms`, `30s`, `5m`, `2h`,
/// `0`) in ms, for `field`; its bounds are the caller's to check.
pub fn parse_ms(field: &str, text: &str) -> Result<u64, crate::error::Error> {
    let text = text.trim();
    if text == "0" {
        return Ok(0);
    }
    let d = humantime::parse_duration(text).map_err(|_| {
        crate::error::Error::invalid(
            field,
            format!("must be a duration, {DURATION_FORMS} (got {text:?})"),
        )
    })?;
    Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How a duration is written, in every error that says one is wrong.
pub const DURATION_FORMS: &str = "written as a number and a unit: ms, s, m, h or d, combined if need be (750ms, 30s, 1m30s, 2h, 7d)";

/// Milliseconds since the Unix epoch, UTC. Serialised as RFC 3339 with
/// milliseconds (`2026-12-02T10:36:43.000Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

/// The latest time baton stores or prints: 9999-12-31T23:59:59.999Z, the
/// last instant RFC 3339 can write with a four-digit year.
pub const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

impl Timestamp {
    /// The latest representable time ([`MAX_TIMESTAMP_MS`]).
    pub const MAX: Timestamp = Timestamp(MAX_TIMESTAMP_MS);

    pub fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + ms`, saturating at [`Timestamp::MAX`] instead of overflowing.
    /// For a time that is stored (an expiry), use [`Timestamp::checked_plus_ms`].
    pub fn plus_ms(self, ms: u64) -> Timestamp {
        self.checked_plus_ms(ms).unwrap_or(Timestamp::MAX)
    }

    /// How many ms `self` is after `earlier` (0 if it is not).
    pub fn millis_since(self, earlier: Timestamp) -> u64 {
        u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0)
    }

    /// `self + ms`, or `None` past [`Timestamp::MAX`].
    pub fn checked_plus_ms(self, ms: u64) -> Option<Timestamp> {
        let ms = i64::try_from(ms).ok()?;
        let t = self.0.checked_add(ms)?;
        (t <= MAX_TIMESTAMP_MS).then_some(Timestamp(t))
    }

    /// RFC 3339, UTC, milliseconds. Times before the epoch print as the
    /// epoch, and times past [`Timestamp::MAX`] as it: printing never fails.
    pub fn to_rfc3339(self) -> String {
        let ms = u64::try_from(self.0.min(MAX_TIMESTAMP_MS)).unwrap_or(0);
        let t = UNIX_EPOCH + Duration::from_millis(ms);
        humantime::format_rfc3339_millis(t).to_string()
    }

    /// Any RFC 3339 time, with `Z` or an offset (`+01:00`); also the
    /// forms without a zone (read as UTC) that earlier releases took.
    pub fn parse_rfc3339(s: &str) -> Result<Timestamp, String> {
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
            return Some(t.timestamp_millis())
                .filter(|ms| (0..=MAX_TIMESTAMP_MS).contains(ms))
                .map(Timestamp)
                .ok_or_else(|| "is outside 1970-01-01 to 9999-12-31T23:59:59.999Z".to_owned());
        }
        let t = humantime::parse_rfc3339_weak(s).map_err(|e| e.to_string())?;
        let d = t.duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?;
        i64::try_from(d.as_millis())
            .ok()
            .filter(|ms| *ms <= MAX_TIMESTAMP_MS)
            .map(Timestamp)
            .ok_or_else(|| "is past 9999-12-31T23:59:59.999Z".to_owned())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

/// Stored times as milliseconds since the epoch: a compact stored
/// tombstone writes its times so ([`crate::TaskRecord::serialize_stored`]),
/// and a record's times read either form back (`deserialize_with`). Only
/// stored records take the number; what callers send is RFC 3339.
pub mod stored {
    use super::{MAX_TIMESTAMP_MS, Timestamp};

    pub fn as_ms<S: serde::Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(t.0)
    }

    pub fn opt_as_ms<S: serde::Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&t.0),
            None => s.serialize_none(),
        }
    }

    struct Either;

    impl serde::de::Visitor<'_> for Either {
        type Value = Timestamp;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an RFC 3339 time or milliseconds since the epoch")
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Timestamp, E> {
            Timestamp::parse_rfc3339(v).map_err(E::custom)
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Timestamp, E> {
            i64::try_from(v)
                .ok()
                .filter(|ms| *ms <= MAX_TIMESTAMP_MS)
                .map(Timestamp)
                .ok_or_else(|| E::custom("is past 9999-12-31T23:59:59.999Z"))
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Timestamp, E> {
            u64::try_from(v)
                .map_err(|_| E::custom("is before 1970-01-01"))
                .and_then(|v| self.visit_u64(v))
        }
    }

    pub fn either<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        d.deserialize_any(Either)
    }

    pub fn opt_either<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Timestamp>, D::Error> {
        struct Maybe;
        impl<'de> serde::de::Visitor<'de> for Maybe {
            type Value = Option<Timestamp>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a time, or null")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_some<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Self::Value, D::Error> {
                either(d).map(Some)
            }
        }
        d.deserialize_option(Maybe)
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> Timestamp;
}

/// The clock a request is timed by where its decision is serialized.
///
/// A request carries the time its caller read (`now`) and, beside it, the
/// caller's clock: a store that decides under a lock (memory, SQLite,
/// sled) or after taking a row's lock reads it again once the lock is
/// held ([`Timed::timed_at_commit`]), so a grant waited for behind
/// another writer starts when it is decided, never before, and event
/// times follow the order the lock gives. Not part of what is asked: it
/// is never serialized (a server re-times what it receives by its own
/// clock) and two requests compare equal whatever their clocks.
#[derive(Clone, Default)]
pub struct CommitClock(Option<Arc<dyn Clock>>);

impl CommitClock {
    pub fn new(clock: Arc<dyn Clock>) -> CommitClock {
        CommitClock(Some(clock))
    }

    /// No clock: the request is decided at the time it carries (a store
    /// that set it from its own clock after its locks, a test).
    pub fn none() -> CommitClock {
        CommitClock(None)
    }

    /// `at`, or the clock's time if that is later: time never goes back
    /// between a caller's reading and the decision.
    pub fn read(&self, at: Timestamp) -> Timestamp {
        match &self.0 {
            Some(c) => c.now().max(at),
            None => at,
        }
    }
}

impl fmt::Debug for CommitClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(c) => write!(f, "CommitClock({c:?})"),
            None => f.write_str("CommitClock(none)"),
        }
    }
}

impl PartialEq for CommitClock {
    fn eq(&self, _: &CommitClock) -> bool {
        true
    }
}

impl Eq for CommitClock {}

/// What carries a time and a [`CommitClock`]: an operation, a `next`.
pub trait Timed {
    /// Re-reads the time once the store holds the locks the decision is
    /// serialized by (never earlier than the time carried).
    fn timed_at_commit(&mut self);
    /// Sets the time (a store or server that times requests by its own
    /// clock) and drops the carried clock, which must not move it again.
    fn timed_by_store(&mut self, now: Timestamp);
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock(Arc::new(AtomicI64::new(start.0)))
    }

    /// Moves time forward (or back, for drift tests) by `ms`.
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn set(&self, t: Timestamp) {
        self.0.store(t.0, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    /// Starts at 2026-01-01T00:00:00Z.
    fn default() -> Self {
        ManualClock::new(Timestamp(1_767_225_600_000))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip_with_millis() {
        let t = Timestamp(1_767_225_600_123);
        assert_eq!(t.to_rfc3339(), "2026-01-01T00:00:00.123Z");
        assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Ok(t));
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
    }

    #[test]
    fn arithmetic_past_year_9999_is_checked_and_printing_never_panics() {
        let now = Timestamp(1_767_225_600_000);
        assert_eq!(now.checked_plus_ms(300_000_000_000_000), None);
        assert_eq!(now.checked_plus_ms(u64::MAX), None);
        assert_eq!(Timestamp::MAX.checked_plus_ms(1), None);
        assert_eq!(Timestamp::MAX.checked_plus_ms(0), Some(Timestamp::MAX));
        assert_eq!(now.plus_ms(u64::MAX), Timestamp::MAX);
        assert_eq!(Timestamp::MAX.to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(i64::MAX).to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(i64::MIN).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp::parse_rfc3339("9999-12-31T23:59:59.999Z"),
            Ok(Timestamp::MAX)
        );
    }

    #[test]
    fn any_rfc3339_offset_is_read() {
        let z = Timestamp::parse_rfc3339("2026-12-06T11:00:00Z").unwrap();
        for same in [
            "2026-12-06T12:00:00+01:00",
            "2026-12-06T06:30:00-04:30",
            "2026-12-06T11:00:00.000+00:00",
            "2026-12-06t11:00:00z",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(same), Ok(z), "{same}");
        }
        assert!(Timestamp::parse_rfc3339("1969-12-31T23:59:59Z").is_err());
        assert!(Timestamp::parse_rfc3339("2026-12-06T12:00:00+25:00").is_err());
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::default();
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        c.clone().advance_ms(1500);
        assert_eq!(c.now(), t0.plus_ms(1500));
    }
}
