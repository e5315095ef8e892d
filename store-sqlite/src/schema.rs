//! The versioned schema: `.sql` files applied in order, tracked in
//! `PRAGMA user_version`, migrated forward on open.

/// Every migration, in order; `user_version` counts how many were applied.
pub const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_file_identity.sql"),
    include_str!("../migrations/0003_work_graph.sql"),
    include_str!("../migrations/0004_partial_indexes.sql"),
    include_str!("../migrations/0005_fewer_pages.sql"),
    include_str!("../migrations/0006_file_path.sql"),
    include_str!("../migrations/0007_retention.sql"),
    include_str!("../migrations/0008_counts.sql"),
];

/// The schema version this build writes.
pub const CURRENT_VERSION: i64 = MIGRATIONS.len() as i64;

/// Marks a database as baton's (`PRAGMA application_id`): ASCII "batn".
pub const APPLICATION_ID: i64 = 0x6261_746E;
