-- baton SQLite schema, version 2.
-- The (device, inode) of the file this database was last opened as. A
-- process that opens the store under another identity while a write-ahead
-- log with frames sits beside it refuses to run: that log was written for
-- the file that stood at this path before (a backup copied over a live
-- store), and replaying it onto another file corrupts it.

CREATE TABLE file_identity (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    dev INTEGER NOT NULL,
    ino INTEGER NOT NULL
);
