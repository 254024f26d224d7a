/*
 * Nodes in the store.  Each node reports itself as one JSON object, this
 * node from /proc, /sys and NVML, another in its join and heartbeats:
 * node_info_json()'s fields plus "gpus" (gpu/gpu_store.h) when NVML answered
 * and "host" (cluster/host_health.h).
 */
#ifndef PRIVAI_ADMIN_NODES_H
#define PRIVAI_ADMIN_NODES_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

struct admin;

/* This node's report (NULL when out of memory): its inventory and, in
 * "host", its preflight and fabric status (cluster/host_health.h). */
cJSON *node_report_json(const struct admin *a);

/* Check a report and store it on node_id: the CPU, memory and NUMA
 * columns, the inventory, and the GPUs when it has them.  The caller
 * holds the store's mutex inside a transaction.  APP_EINVAL names the
 * bad field in err. */
int node_store_report(sqlite3 *db, int64_t node_id, const cJSON *report, int64_t now, char *err);

/* This node's own report, read since a->gpu_epoch was epoch, into its
 * store.  Its GPUs are read again first when a MIG change came since.
 * The caller holds the store's mutex inside a transaction. */
int node_store_own_report(struct admin *a, cJSON *report, uint64_t epoch, char *err);

/* Register or refresh this node (the row with is_self = 1) and set
 * a->self_node_id.  Takes the store's mutex. */
int node_self_register(struct admin *a, char *err);
/* Drain (1) or resume (0) this node's deployments: a drain stops the
 * running ones and marks them, a resume starts the marked ones again
 * (deployments run on the node whose privai-admin holds them).  The
 * caller holds the store's mutex; 0, or APP_EIO. */
int node_self_drain(sqlite3 *db, int draining);

/* Nodes that joined this console and still count on its key (not
 * removed); APP_EIO when the store cannot say. */
int64_t nodes_joined_count(sqlite3 *db);

/* A one-time join token ("join_..." into token, AUTH_SECRET_LEN bytes)
 * that expires ttl_s seconds from now; the store keeps its hash only.
 * APP_OK with *id, or APP_EIO with err. */
int join_token_issue(sqlite3 *db, int64_t now, int64_t ttl_s, char *token, int64_t *id, char *err);

#endif
