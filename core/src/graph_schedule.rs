//! Recurring schedules: a template and a period (every N ms, or a cron
//! expression in UTC), each period's task `NAME@START`.

use super::*;

/// Why a schedule's tick made no task for its period, as kept on the
/// schedule's record until a tick makes one again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScheduleFailure {
    /// The period's task that could not be made.
    pub task: TaskId,
    pub error: String,
    /// The first tick that failed this way.
    pub since: Timestamp,
}

/// The id prefix of a schedule's record: `schedule:NAME`.
pub const SCHEDULE_PREFIX: &str = "schedule:";

/// A recurring schedule: one task from `template` per period, named
/// `NAME@START` (the period's start), so that however many schedulers
/// tick, the store's add of that one id decides which of them enqueues it.
/// A period is either `every_ms` long, counted from when the schedule's
/// record was created, or runs from one time `cron` names (UTC) to the
/// next; `every_ms` is 0 for a cron schedule.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    pub every_ms: u64,
    /// A cron expression (5 fields, or 6 with seconds first), read in UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    pub template: NodeSpec,
}

impl Schedule {
    /// The shortest period: a second.
    pub const MIN_EVERY_MS: u64 = 1000;
    /// The longest cron expression taken.
    pub const MAX_CRON_CHARS: usize = 128;

    /// A schedule of one task every `every_ms`.
    pub fn every(every_ms: u64, template: NodeSpec) -> Schedule {
        Schedule {
            every_ms,
            cron: None,
            template,
        }
    }

    /// A schedule of one task at each time `cron` names.
    pub fn cron(cron: &str, template: NodeSpec) -> Schedule {
        Schedule {
            every_ms: 0,
            cron: Some(cron.trim().to_owned()),
            template,
        }
    }

    /// The schedule, if it has one period (a span from a second to a
    /// year, or a cron expression that parses and names a time) and its
    /// template has no start of its own (the period is its start).
    pub fn checked(self) -> Result<Schedule, Error> {
        match &self.cron {
            Some(_) if self.every_ms != 0 => {
                return Err(Error::invalid(
                    "cron",
                    "is instead of every: give a schedule one of them",
                ));
            }
            Some(expr) => {
                let cron = parse_cron(expr)?;
                // A pattern that never matches (the 31st of February) is
                // refused here, not found out by every tick.
                let probe =
                    chrono::DateTime::<chrono::Utc>::UNIX_EPOCH + chrono::Duration::days(365 * 56);
                if cron.find_next_occurrence(&probe, false).is_err() {
                    return Err(Error::invalid("cron", "names no time that ever comes"));
                }
            }
            None => {
                crate::time::check_span(
                    "every",
                    self.every_ms,
                    Self::MIN_EVERY_MS,
                    MAX_START_AFTER_MS,
                )?;
            }
        }
        if self.template.start.is_some() {
            return Err(Error::invalid(
                "not_before",
                "is not for a schedule's tasks: each starts with its period",
            ));
        }
        Ok(self)
    }

    /// The task of the period that holds `now`, for the schedule whose
    /// record is `record` (created at `anchor`): its id and spec. `None`
    /// before the first period, or if the name cannot make an id.
    pub fn due(
        &self,
        record: &TaskId,
        anchor: Timestamp,
        now: Timestamp,
    ) -> Option<(TaskId, NodeSpec)> {
        let start = match &self.cron {
            Some(expr) => {
                let cron = parse_cron(expr).ok()?;
                // Whole seconds: a cron time is one, and the period's start
                // must be the same for every moment of the period.
                let at = chrono::DateTime::<chrono::Utc>::from_timestamp(
                    now.as_millis().div_euclid(1000),
                    0,
                )?;
                let last = cron.find_previous_occurrence(&at, true).ok()?;
                let start = Timestamp(last.timestamp_millis());
                // The first period is the first time named after the
                // schedule was set.
                if start < anchor {
                    return None;
                }
                start
            }
            None => {
                let since = u64::try_from(now.as_millis().checked_sub(anchor.as_millis())?).ok()?;
                let k = since / self.every_ms.max(1);
                anchor.checked_plus_ms(k.checked_mul(self.every_ms)?)?
            }
        };
        let name = record.as_str().strip_prefix(SCHEDULE_PREFIX)?;
        let task = Id::parse("task", &format!("{name}@{start}")).ok()?;
        Some((task, self.template.clone()))
    }

    /// When the next period after `now` starts (its task is made then),
    /// for the schedule set at `anchor`; `None` when no time is named.
    pub fn next_run(&self, anchor: Timestamp, now: Timestamp) -> Option<Timestamp> {
        match &self.cron {
            Some(expr) => {
                let cron = parse_cron(expr).ok()?;
                let from = now.max(anchor);
                let at = chrono::DateTime::<chrono::Utc>::from_timestamp(
                    from.as_millis().div_euclid(1000),
                    0,
                )?;
                let next = cron.find_next_occurrence(&at, false).ok()?;
                Some(Timestamp(next.timestamp_millis()))
            }
            None if now < anchor => Some(anchor),
            None => {
                let since = u64::try_from(now.as_millis().checked_sub(anchor.as_millis())?).ok()?;
                let k = since / self.every_ms.max(1) + 1;
                anchor.checked_plus_ms(k.checked_mul(self.every_ms)?)
            }
        }
    }
}

/// A cron expression as baton reads it: 5 fields (minute to weekday), or 6
/// with seconds first; names of months and weekdays, ranges, steps and
/// lists as Vixie cron has them. Errors name the field `cron`.
pub(super) fn parse_cron(expr: &str) -> Result<croner::Cron, Error> {
    if expr.len() > Schedule::MAX_CRON_CHARS {
        return Err(Error::invalid(
            "cron",
            format!("is longer than {} characters", Schedule::MAX_CRON_CHARS),
        ));
    }
    let fields = expr.split_whitespace().count();
    if !(5..=6).contains(&fields) {
        return Err(Error::invalid(
            "cron",
            "must have 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first), such as \"0 2 * * *\"",
        ));
    }
    croner::parser::CronParser::builder()
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(expr)
        .map_err(|e| Error::invalid("cron", format!("is not a cron expression: {e}")))
}
