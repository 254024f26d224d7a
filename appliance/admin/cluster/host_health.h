/*
 * A node's host health, as the console shows it: the last preflight
 * report (privai-tune check --output writes it at boot and every hour)
 * and privai-fabric's status (GET /status on its unix socket).  Both are
 * read on each heartbeat and travel with the node's report, so the
 * console that leads the cluster shows every node's.
 *
 * Everything that comes in (the file, the socket's answer, a heartbeat
 * from another node) goes through the same checks and comes out in one
 * shape, smaller than what came in: the preflight's counts and only its
 * warn and fail checks; Fabric Manager's verdict and the NCCL topology
 * file's problems.  A part that cannot be read or checked says so
 * ("state": "missing" or "error", with "error" naming the problem); it
 * never fails the rest of the report.
 */
#ifndef PRIVAI_ADMIN_HOST_HEALTH_H
#define PRIVAI_ADMIN_HOST_HEALTH_H

#include <cjson/cJSON.h>

/* The preflight report in the file at path ({"state":...}; NULL only
 * when out of memory). */
cJSON *host_preflight_read(const char *path);

/* privai-fabric's status from the unix socket at path, waiting at most
 * timeout_ms for each step ({"state":...}; NULL only when out of memory). */
cJSON *host_fabric_read(const char *path, int timeout_ms);

/* {"preflight":..., "fabric":...} for this node. */
cJSON *host_health_read(const char *preflight_file, const char *fabric_socket);

/* A host object from a node's report, checked again and rebuilt (it
 * came over the network): the same shape, each part that fails its
 * checks replaced by {"state":"error","error":...}.  NULL when out of
 * memory. */
cJSON *host_health_clean(const cJSON *host);

#endif
