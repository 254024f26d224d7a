-- privai-admin schema, version 12: deployments split over nodes.
--
-- A CPU deployment whose placement lists "ranks" is one model split over
-- that many nodes (tensor parallel): rank 0 is the deployment's own
-- engine on this node, and each other rank a follower that the node it
-- names runs for this one, as it runs a remote deployment.  Their states
-- come with those nodes' heartbeats.
CREATE TABLE deployment_ranks (
    deployment_id INTEGER NOT NULL REFERENCES deployments(id) ON DELETE CASCADE,
    rank          INTEGER NOT NULL CHECK (rank >= 1),
    node_id       INTEGER NOT NULL REFERENCES nodes(id),
    state         TEXT NOT NULL DEFAULT 'pending',
    reason        TEXT,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (deployment_id, rank)
);
CREATE INDEX deployment_ranks_node ON deployment_ranks(node_id);
