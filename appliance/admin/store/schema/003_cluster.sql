-- privai-admin schema, version 3: nodes that join, what they report, MIG
-- layouts, and this node's own membership when it joined another.

ALTER TABLE nodes ADD COLUMN url TEXT;                          -- the node's console, as it advertised it
ALTER TABLE nodes ADD COLUMN secret_sha256 TEXT;                -- hex; the node's heartbeat secret is shown to it once
ALTER TABLE nodes ADD COLUMN inventory TEXT NOT NULL DEFAULT '{}';  -- JSON: CPUs, NUMA, memory, NICs, as reported
ALTER TABLE nodes ADD COLUMN state_reason TEXT;

ALTER TABLE gpus ADD COLUMN mig_supported INTEGER NOT NULL DEFAULT 0;
ALTER TABLE gpus ADD COLUMN mig_table TEXT;                     -- our MIG table (mig.c), NULL without MIG
ALTER TABLE gpus ADD COLUMN instances TEXT NOT NULL DEFAULT '[]';  -- JSON: GPU instances as NVML last reported
ALTER TABLE gpus ADD COLUMN seen_at INTEGER;

ALTER TABLE gpu_partitions ADD COLUMN error TEXT;

-- deployments a drain stopped, restarted when the node resumes
ALTER TABLE deployments ADD COLUMN drained INTEGER NOT NULL DEFAULT 0;

-- set when this privai-admin joined another; one row at most
CREATE TABLE membership (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	leader_url  TEXT NOT NULL,
	leader_pin  TEXT,                           -- sha256//BASE64 of the leader's public key
	node_id     INTEGER NOT NULL,               -- our row on the leader
	secret      TEXT NOT NULL,                  -- heartbeat secret (the leader keeps its SHA-256)
	joined_at   INTEGER NOT NULL,
	last_ok     INTEGER,
	last_error  TEXT,
	state       TEXT                            -- our state as the leader last said
);
