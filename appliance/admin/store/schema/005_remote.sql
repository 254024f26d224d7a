-- privai-admin schema, version 5: deployments placed on another node.

-- on the leader: the node that runs the deployment (NULL: this node); the
-- member reports its state in heartbeats
ALTER TABLE deployments ADD COLUMN node_id INTEGER REFERENCES nodes(id);
-- on a member: the leader's id of a deployment this node runs for it
ALTER TABLE deployments ADD COLUMN leader_id INTEGER;
CREATE UNIQUE INDEX deployments_leader_id ON deployments(leader_id) WHERE leader_id IS NOT NULL;

-- the node's console key pin (sha256//BASE64) as its heartbeats say: the
-- leader checks the node by it when it relays requests to its engines
ALTER TABLE nodes ADD COLUMN tls_pin TEXT;

-- on a member: SHA-256 (hex) of the key the leader relays requests with
ALTER TABLE membership ADD COLUMN leader_key_sha256 TEXT;
