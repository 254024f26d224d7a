/*
 * The metrics history across a cluster: each member sends the leader,
 * with its heartbeats, the samples it took since the last ones the leader
 * took (its node as "node:self", its GPUs and MIG instances, and its
 * deployments under the leader's ids), so the leader's console charts
 * every node.  The caller holds the store's mutex.
 */
#ifndef PRIVAI_ADMIN_METRICS_REMOTE_H
#define PRIVAI_ADMIN_METRICS_REMOTE_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdint.h>

#define METRICS_REMOTE_MAX 4000 /* rows a heartbeat carries at most */

/* node:ID, deployment:ID, gpu:UUID, mig:UUID (ID and UUID: 1-100 of
 * [A-Za-z0-9-]). */
int metrics_subject_ok(const char *s);

/* On a member: [[subject, name, ts, value], ...] taken after `after`,
 * oldest first; *last gets the newest ts sent (or after). */
cJSON *metrics_since(sqlite3 *db, int64_t self_node_id, int64_t after, int64_t *last);

/* On the leader: a member's rows into its history, "node:self" as
 * node:node_id; deployments not placed on that node are left out.
 * APP_OK, or APP_EINVAL with err naming what is wrong. */
int metrics_store_remote(sqlite3 *db, int64_t node_id, const cJSON *rows, int64_t now, int keep_hours, char *err);

#endif
