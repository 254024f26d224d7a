-- The CPUs a deployment's engine was given at its last start (a cpuset(7)
-- list, "0-3,8"): its own for a placement with threads, else those no
-- other engine holds (deploy/cpuset.h).  The API shows it while it runs.
ALTER TABLE deployments ADD COLUMN cpus TEXT;
