//! Key layout under a store's prefix. Task ids are hex-encoded so that no
//! task's keys are a prefix of another's ('/' may appear in ids).
//!
//! A store's keys all begin with its normalised prefix and a NUL byte
//! (`PREFIX\0t/...`). A prefix holds no NUL, so no store's key space
//! contains another's, however the prefixes nest (`a` and `a/t`).

pub fn hex(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.as_bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Bytes as lowercase hex: two characters a byte, so the order of keys is
/// the order of the bytes.
pub fn hex_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len() * 2);
    for x in b {
        out.push_str(&format!("{x:02x}"));
    }
    out
}

pub fn unhex(s: &str) -> Option<String> {
    String::from_utf8(unhex_bytes(s)?).ok()
}

/// The bytes [`hex_bytes`] wrote.
pub fn unhex_bytes(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// The prefix a store is named by when none is given.
pub const DEFAULT_PREFIX: &str = "baton";

/// A prefix as it names a store: `/` separates segments, so leading,
/// trailing and repeated slashes are dropped (`a`, `/a`, `a/` and `//a//`
/// name one store); empty is [`DEFAULT_PREFIX`].
pub fn normalise_prefix(prefix: &str) -> String {
    let p = prefix
        .split('/')
        .filter(|seg| !seg.is_empty())
        .collect::<Vec<_>>()
        .join("/");
    if p.is_empty() {
        DEFAULT_PREFIX.to_owned()
    } else {
        p
    }
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: format!("{}\0", normalise_prefix(prefix)),
        }
    }

    /// Where an earlier layout kept this store's task records (`PREFIX/t/`).
    pub fn earlier_layout_tasks(prefix: &str) -> String {
        format!("{}/t/", normalise_prefix(prefix))
    }

    /// The task record (never lease-bound).
    pub fn task(&self, task: &str) -> String {
        format!("{}t/{}", self.prefix, hex(task))
    }

    pub fn tasks(&self) -> String {
        format!("{}t/", self.prefix)
    }

    /// The holder key: exists exactly while the current grant is live.
    pub fn holder(&self, task: &str) -> String {
        format!("{}h/{}", self.prefix, hex(task))
    }

    pub fn holders(&self) -> String {
        format!("{}h/", self.prefix)
    }

    /// The deadline key: exists exactly until the start deadline the task
    /// waits on (or, while held, will wait on once its lease ends) passes.
    pub fn deadline(&self, task: &str) -> String {
        format!("{}d/{}", self.prefix, hex(task))
    }

    pub fn deadlines(&self) -> String {
        format!("{}d/", self.prefix)
    }

    /// The lock-delay key: exists until the last grant's lock delay (counted
    /// from its lease's end) runs out, unless the grant ended cleanly.
    pub fn lock_delay(&self, task: &str) -> String {
        format!("{}l/{}", self.prefix, hex(task))
    }

    /// An event of `task`, by the record revision that wrote it and its index.
    pub fn event(&self, task: &str, revision: u64, idx: usize) -> String {
        format!("{}e/{}/{revision:016x}{idx:04x}", self.prefix, hex(task))
    }

    /// The one CONFLICT_REFUSED event counted for (task, conflict key).
    pub fn conflict(&self, task: &str, key: &str) -> String {
        format!("{}e/{}/c{}", self.prefix, hex(task), hex(key))
    }

    pub fn events_of(&self, task: &str) -> String {
        format!("{}e/{}/", self.prefix, hex(task))
    }

    pub fn events(&self) -> String {
        format!("{}e/", self.prefix)
    }

    pub fn outbox(&self, intent: &str) -> String {
        format!("{}o/{intent}", self.prefix)
    }

    /// A ready-index entry (`ReadyEntry::key`, in hex), its value the task id.
    pub fn ready(&self, key: &[u8]) -> String {
        format!("{}r/{}", self.prefix, hex_bytes(key))
    }

    /// Every ready-index entry of the store.
    pub fn readies(&self) -> String {
        format!("{}r/", self.prefix)
    }

    /// A state-index entry: every record by its stored state, so a list
    /// by state reads those records alone.
    pub fn in_state(&self, state: baton_core::State, task: &str) -> String {
        format!("{}s/{}/{}", self.prefix, state.as_str(), hex(task))
    }

    /// Every state-index entry of `state`.
    pub fn state_entries(&self, state: baton_core::State) -> String {
        format!("{}s/{}/", self.prefix, state.as_str())
    }

    /// A count entry: a counted record by the queue it is counted under
    /// and its stored state; a count is the number of keys under
    /// [`Keys::counted`], which etcd answers without reading them.
    pub fn count_entry(&self, queue: &str, state: baton_core::State, task: &str) -> String {
        format!(
            "{}c/{}/{}/{}",
            self.prefix,
            hex(queue),
            state.as_str(),
            hex(task)
        )
    }

    /// Every count entry of the store.
    pub fn count_entries(&self) -> String {
        format!("{}c/", self.prefix)
    }

    pub fn counted(&self, queue: &str, state: baton_core::State) -> String {
        format!("{}c/{}/{}/", self.prefix, hex(queue), state.as_str())
    }

    /// Written once every record has its state and count entries (a
    /// store from before them is indexed when first opened).
    pub fn indexed_marker(&self) -> String {
        format!("{}v/indexed", self.prefix)
    }

    /// A held-index entry (`TaskRecord::held_key`, in hex), its value the task id.
    pub fn held(&self, key: &[u8]) -> String {
        format!("{}k/{}", self.prefix, hex_bytes(key))
    }

    /// Every held-index entry of the store.
    pub fn helds(&self) -> String {
        format!("{}k/", self.prefix)
    }

    pub fn outboxes(&self) -> String {
        format!("{}o/", self.prefix)
    }
}

/// The end of a prefix range (etcd's "with_prefix").
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_separates_tasks() {
        assert_eq!(unhex(&hex("a/b ü")).as_deref(), Some("a/b ü"));
        let k = Keys::new("/p/");
        assert!(!k.events_of("a").starts_with(&k.events_of("a/b")));
        assert!(!k.events_of("a/b").starts_with(&k.events_of("a")));
        assert_eq!(prefix_end("ab"), b"ac".to_vec());
    }

    #[test]
    fn no_store_contains_another_however_prefixes_nest() {
        for p in ["a", "/a", "a/", "//a//"] {
            assert_eq!(normalise_prefix(p), "a");
        }
        assert_eq!(normalise_prefix(""), DEFAULT_PREFIX);
        assert_eq!(normalise_prefix("x//y/"), "x/y");
        let outer = Keys::new("z");
        for inner in [
            "z/o", "z/t", "z/h", "z/d", "z/l", "z/e", "z/t/x", "z/o/deep",
        ] {
            let inner = Keys::new(inner);
            for (o, i) in [
                (outer.tasks(), inner.task("victim")),
                (outer.holders(), inner.holder("victim")),
                (outer.deadlines(), inner.deadline("victim")),
                (
                    outer.tasks().replace("\0t/", "\0l/"),
                    inner.lock_delay("victim"),
                ),
                (outer.events(), inner.events_of("victim")),
                (
                    outer.outboxes(),
                    inner.outbox("3f2b8c1e-0000-5000-8000-000000000000"),
                ),
            ] {
                assert!(!i.starts_with(&o), "{i:?} inside {o:?}");
                assert!(!o.starts_with(&i), "{o:?} inside {i:?}");
            }
        }
    }
}
