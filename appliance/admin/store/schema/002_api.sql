-- privai-admin schema, version 2: what the REST API needs beyond version 1.

-- refused changes are logged too
ALTER TABLE audit_log ADD COLUMN result TEXT NOT NULL DEFAULT 'ok' CHECK (result IN ('ok', 'refused'));

-- imports by upload or URL take time; the row exists while they run
ALTER TABLE models ADD COLUMN state TEXT NOT NULL DEFAULT 'ready'
	CHECK (state IN ('importing', 'ready', 'failed'));
ALTER TABLE models ADD COLUMN error TEXT;
ALTER TABLE models ADD COLUMN bytes_done INTEGER NOT NULL DEFAULT 0;
ALTER TABLE models ADD COLUMN url TEXT;
ALTER TABLE models ADD COLUMN n_embd INTEGER;
ALTER TABLE models ADD COLUMN n_vocab INTEGER;
ALTER TABLE models ADD COLUMN kv_latent INTEGER NOT NULL DEFAULT 0;  -- MLA: cached values per token and layer
ALTER TABLE models ADD COLUMN weight_bytes INTEGER;
ALTER TABLE models ADD COLUMN file_name TEXT;

-- what the supervisor aims for, and what it last saw
ALTER TABLE deployments ADD COLUMN desired TEXT NOT NULL DEFAULT 'running'
	CHECK (desired IN ('running', 'stopped'));
ALTER TABLE deployments ADD COLUMN pid INTEGER;
ALTER TABLE deployments ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deployments ADD COLUMN started_at INTEGER;

-- keys for a deployment's OpenAI endpoint; only SHA-256 is kept
CREATE TABLE deployment_keys (
	id            INTEGER PRIMARY KEY,
	deployment_id INTEGER NOT NULL REFERENCES deployments(id) ON DELETE CASCADE,
	name          TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
	key_sha256    TEXT NOT NULL UNIQUE,         -- hex
	created_at    INTEGER NOT NULL,
	revoked_at    INTEGER
);
