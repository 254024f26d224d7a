-- privai-admin schema, version 1.  Applied in one transaction; the
-- database's user_version records it.  Times are Unix seconds (UTC).

CREATE TABLE users (
	id            INTEGER PRIMARY KEY,
	name          TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
	password_hash TEXT NOT NULL,                  -- Argon2id, libsodium's encoded form
	role          TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
	failed_logins INTEGER NOT NULL DEFAULT 0,
	locked_until  INTEGER NOT NULL DEFAULT 0,
	must_change_password INTEGER NOT NULL DEFAULT 0,
	created_at    INTEGER NOT NULL
);

CREATE TABLE sessions (
	id          INTEGER PRIMARY KEY,
	token_hash  BLOB NOT NULL UNIQUE,             -- SHA-256 of the cookie value
	csrf_token  TEXT NOT NULL,
	user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	remote_addr TEXT
);

CREATE TABLE api_tokens (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
	token_hash  BLOB NOT NULL UNIQUE,             -- SHA-256; the token is shown once
	user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
	scopes      TEXT NOT NULL,                    -- space separated
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER,                          -- NULL: no expiry
	revoked_at  INTEGER,
	last_used_at INTEGER
);

CREATE TABLE audit_log (
	id          INTEGER PRIMARY KEY,
	at          INTEGER NOT NULL,
	actor       TEXT NOT NULL,                    -- user name, token name, or 'system'
	action      TEXT NOT NULL,                    -- e.g. 'model.create'
	target      TEXT,
	remote_addr TEXT,
	detail      TEXT                              -- JSON
);
CREATE INDEX audit_log_at ON audit_log(at);

CREATE TABLE nodes (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL UNIQUE,
	address     TEXT NOT NULL,
	state       TEXT NOT NULL CHECK (state IN ('ready', 'unreachable', 'draining', 'removed')),
	is_self     INTEGER NOT NULL DEFAULT 0,
	cpu_model   TEXT,
	cpu_cores   INTEGER,
	cpu_flags   TEXT,
	numa_nodes  INTEGER,
	memory_bytes INTEGER,
	joined_at   INTEGER NOT NULL,
	last_heartbeat INTEGER
);

CREATE TABLE join_tokens (
	id          INTEGER PRIMARY KEY,
	token_hash  BLOB NOT NULL UNIQUE,
	created_at  INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL,
	used_at     INTEGER
);

CREATE TABLE gpus (
	id          INTEGER PRIMARY KEY,
	node_id     INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	idx         INTEGER NOT NULL,
	uuid        TEXT NOT NULL UNIQUE,
	name        TEXT NOT NULL,
	memory_bytes INTEGER NOT NULL,
	pci_bus_id  TEXT,
	mig_enabled INTEGER NOT NULL DEFAULT 0,
	UNIQUE (node_id, idx)
);

CREATE TABLE gpu_partitions (
	id          INTEGER PRIMARY KEY,
	gpu_id      INTEGER NOT NULL REFERENCES gpus(id) ON DELETE CASCADE,
	profile     TEXT NOT NULL,                    -- e.g. '3g.40gb'
	start_slice INTEGER NOT NULL,
	uuid        TEXT,                             -- once applied
	state       TEXT NOT NULL CHECK (state IN ('planned', 'applied', 'failed')),
	UNIQUE (gpu_id, start_slice)
);

CREATE TABLE models (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 128),
	path        TEXT NOT NULL,
	size_bytes  INTEGER NOT NULL,
	sha256      TEXT,
	architecture TEXT NOT NULL,
	parameters  INTEGER,
	quantization TEXT,
	context_length INTEGER,
	n_layer     INTEGER,
	n_head      INTEGER,
	n_head_kv   INTEGER,
	head_dim    INTEGER,
	tokenizer   TEXT,
	chat_template TEXT,
	source      TEXT NOT NULL CHECK (source IN ('path', 'upload', 'url')),
	created_at  INTEGER NOT NULL
);

CREATE TABLE deployments (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
	model_id    INTEGER NOT NULL REFERENCES models(id) ON DELETE RESTRICT,
	placement   TEXT NOT NULL,                    -- JSON: cpu threads, or node/GPU/partition list + tp
	options     TEXT NOT NULL DEFAULT '{}',       -- JSON: serve options
	port        INTEGER,
	state       TEXT NOT NULL CHECK (state IN ('pending', 'loading', 'ready', 'failed', 'stopping', 'stopped')),
	reason      TEXT,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL
);

CREATE TABLE settings (
	key         TEXT PRIMARY KEY,
	value       TEXT NOT NULL
);
