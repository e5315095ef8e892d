//! The versioned schema: `.sql` files applied in order inside the store's
//! schema, the count applied kept in `schema_version`, migrated forward on
//! open under an advisory lock.

/// Every migration, in order; `schema_version.version` counts how many were applied.
pub const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_no_store_lock.sql"),
    include_str!("../migrations/0003_retention.sql"),
    include_str!("../migrations/0004_counts.sql"),
    include_str!("../migrations/0005_statement_counts.sql"),
];

/// The schema version this build writes.
pub const CURRENT_VERSION: i32 = MIGRATIONS.len() as i32;

/// The advisory lock a migration of `schema` holds: two processes opening
/// a fresh database at once take turns. A stable hash (FNV-1a) of the
/// schema's name, so every build agrees on it.
pub fn lock_key(schema: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"baton:".iter().chain(schema.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}
