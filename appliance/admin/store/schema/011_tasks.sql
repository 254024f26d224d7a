-- privai-admin schema, version 11: tasks.
--
-- Long operations, as the console's task view shows them (store/tasks.h):
-- uploads, hashing, deployment starts and moves, MIG layouts, backups,
-- restores, node joins.  Kept after they end; the oldest are dropped past
-- a thousand.
CREATE TABLE tasks (
    id         INTEGER PRIMARY KEY,
    kind       TEXT NOT NULL,
    target     TEXT NOT NULL,
    ref        TEXT NOT NULL,  -- what it works on, for finding it while it runs ('upload:3')
    actor      TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    progress   REAL CHECK (progress IS NULL OR (progress >= 0 AND progress <= 1)),
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    result     TEXT,
    log        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX tasks_running ON tasks(ref) WHERE state = 'running';
