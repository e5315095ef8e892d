-- baton SQLite schema, version 6.
-- The path the database was last opened at, beside its (device, inode). A
-- file moved to another name while its write-ahead log, holding commits not
-- yet in the file, stayed at the old name (a live store renamed, a crashed
-- one moved without its -wal) is refused at the new name instead of read
-- without those commits, which would hand out their fences again.
ALTER TABLE file_identity ADD COLUMN path TEXT;
