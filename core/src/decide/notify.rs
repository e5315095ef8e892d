//! Notifications: which changes the manifest subscribes to, with stable
//! intent ids.

use super::*;

/// Attaches the notifications the manifest asks for to a change.
pub(super) fn finish(record: TaskRecord, events: Vec<EventDraft>, mints_fence: bool) -> Change {
    let notifications = match &record.manifest {
        None => Vec::new(),
        Some(m) => events
            .iter()
            .filter(|e| {
                // By event type, or by entering a state whose event is subscribed
                // (a finalize enters FAILED); staying in a state notifies nothing.
                m.notification_events.contains(&e.kind)
                    || (e.from != e.to
                        && e.to
                            .and_then(state_event)
                            .is_some_and(|k| m.notification_events.contains(&k)))
            })
            .map(|e| NotificationDraft {
                intent_id: intent_id(&record, e.kind),
                task: record.task.clone(),
                kind: e.kind,
                payload: json!({
                    "task": record.task,
                    "event": e.kind,
                    "from": e.from,
                    "to": e.to,
                    "revision": record.revision,
                    "attempt": record.attempt,
                    "iteration": record.iteration,
                    "fence": e.fence,
                    "owner_notification_ref": m.owner_notification_ref,
                }),
                at: e.at,
            })
            .collect(),
    };
    Change {
        record,
        events,
        notifications,
        mints_fence,
        drops_history: false,
        forgets: false,
    }
}

/// The event that announces entering a terminal or running state, for
/// matching a manifest's `notification_events` by state.
pub(super) fn state_event(s: State) -> Option<EventKind> {
    match s {
        State::Running => Some(EventKind::Started),
        State::Succeeded => Some(EventKind::Succeeded),
        State::Failed => Some(EventKind::Failed),
        State::Cancelled => Some(EventKind::Cancelled),
        State::NotStarted => Some(EventKind::NotStarted),
        State::Stalled => Some(EventKind::Stalled),
        _ => None,
    }
}

/// A stable intent id: the same task, revision and event always give the
/// same id, so a redelivered notification is recognised as a repeat.
pub(super) fn intent_id(record: &TaskRecord, kind: EventKind) -> String {
    let name = format!("{}\u{0}{}\u{0}{}", record.task, record.revision, kind);
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes()).to_string()
}
