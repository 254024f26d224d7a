-- privai-admin schema, version 4: the systemd unit a deployment's engine
-- runs in (privai-engine-TAG-ID.service), NULL for a child process.

ALTER TABLE deployments ADD COLUMN unit TEXT;
