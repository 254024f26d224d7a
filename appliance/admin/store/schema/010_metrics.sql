-- privai-admin schema, version 10: the metrics history.
--
-- One row per sampled value: the sampler (metrics/sampler.c) writes a
-- sample of each series every interval (a minute by default) and drops
-- rows older than it keeps (48 h by default).  subject says what was
-- measured ('node:1', 'deployment:3', 'gpu:GPU-...', 'mig:MIG-...'), name
-- which value ('tokens_per_s', 'cpu_pct', ...).
CREATE TABLE metric_samples (
    subject TEXT NOT NULL,
    name    TEXT NOT NULL,
    ts      INTEGER NOT NULL,  -- Unix seconds, the start of its interval
    value   REAL NOT NULL,
    PRIMARY KEY (subject, name, ts)
) WITHOUT ROWID;
CREATE INDEX metric_samples_ts ON metric_samples(ts);
