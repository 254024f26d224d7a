-- privai-admin schema, version 6: resumable model uploads (api_uploads.c).

-- an upload under way: its bytes are in STATE/models/.part-ID; `received`
-- of them are synced, and hash_state is libsodium's SHA-256 state after
-- them, so a resume neither loses nor hashes again what was kept
CREATE TABLE uploads (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,       -- the model it becomes
    size_bytes  INTEGER NOT NULL CHECK (size_bytes > 0),
    sha256      TEXT,                       -- what the client said it will be, or NULL
    received    INTEGER NOT NULL DEFAULT 0 CHECK (received >= 0 AND received <= size_bytes),
    hash_state  BLOB,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

-- the name an upload will take is not given to a model meanwhile, by any
-- way a model arrives
CREATE TRIGGER models_name_reserved BEFORE INSERT ON models
WHEN EXISTS (SELECT 1 FROM uploads WHERE name = NEW.name)
BEGIN
    SELECT RAISE(ABORT, 'the name is reserved by an upload under way');
END;
