/*
 * Deployments placed on another node of the cluster.
 *
 * The leader (the console the others joined) holds the deployment's row
 * with the node that runs it (deployments.node_id).  Every heartbeat
 * answer carries that node's deployments (remote_specs) and the SHA-256
 * of the leader's relay key; every heartbeat carries the node's reports
 * of their state (remote_record).
 *
 * The member keeps a row of its own for each (deployments.leader_id),
 * fetches the model from the leader with its node secret
 * (GET /api/v1/nodes/{node}/models/{model}/file), mirrors the
 * deployment's API key hashes, and runs the engine with its own
 * supervisor (member_sync); its next heartbeat reports the state back
 * (member_reports).
 *
 * Requests to such a deployment go from the leader's proxy to the node's
 * console (/api/v1/cluster/deployments/{leader id}/..., api/relay.c) with
 * the relay key, and on to the engine, which checks the key itself.
 */
#ifndef PRIVAI_ADMIN_REMOTE_H
#define PRIVAI_ADMIN_REMOTE_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

struct admin;

/* This node's membership of another's cluster (one row at most). */
struct membership {
	char leader[256], pin[128], secret[80], state[16], relay_sha[65];
	int64_t node_id;
};

/* 1 and *m filled when this node joined another; the caller holds the
 * store's mutex. */
int load_membership(struct admin *a, struct membership *m);

/* --- on the leader; the caller holds the store's mutex --- */

/* The heartbeat answer's "deployments" for node_id. */
cJSON *remote_specs(struct admin *a, int64_t node_id);
/* Store node_id's reports of its deployments' states; APP_EINVAL
 * naming the bad entry in err (nothing stored then). */
int remote_record(sqlite3 *db, int64_t node_id, const cJSON *reports, int64_t now, char *err);
/* The node's deployments lost their engine's state (unreachable,
 * removed): mark them with why.  APP_OK, or the store's error. */
int remote_node_lost(sqlite3 *db, int64_t node_id, const char *why, char *err);

/* A member's heartbeat, stored inside the caller's transaction: the MIG
 * results it brings ({"uuid", "error"} per layout applied), the node back
 * to ready when it was unreachable (back), its time and key pin.  APP_OK,
 * or the store's error in err (the caller rolls back). */
int heartbeat_store(sqlite3 *db, int64_t id, const cJSON *mig_results, const char *pin, int back, int64_t now,
		    char *err);

/* Where deployment id's engine answers, taking the store's mutex: 0 when
 * it runs here; 1 with base ("URL/api/v1/cluster/deployments/ID") and
 * the node's key pin when another node runs it, that node is reachable
 * and (need_ready) it says the engine is ready; APP_EUNAVAIL (not so) or
 * APP_ENOTFOUND (no such deployment) with why. */
int remote_target(struct admin *a, int64_t id, int need_ready, char *base, size_t base_size, char *pin, size_t pin_size,
		  char *why, size_t why_size);

/* Where rank `rank` (1..) of split deployment id runs, as remote_target
 * says it for a deployment: 1 with base and pin, APP_EUNAVAIL (its node
 * is not reachable) or APP_ENOTFOUND (no such rank) with why. */
int remote_rank_target(struct admin *a, int64_t id, int rank, char *base, size_t base_size, char *pin, size_t pin_size,
		       char *why, size_t why_size);

/* --- on a member --- */

/* A fetch from the leader that failed is tried again after this long. */
#define MEMBER_FETCH_RETRY_S 60

/* Make the local copies of a deployment's LoRA adapters match the
 * leader's list (its spec's model.adapters; NULL from a leader without
 * them): fetch the new ones to adapt local model base_id once it is
 * ready, drop those no longer listed.  0, or -1 with why (the others are
 * still done).  The caller holds the store's mutex. */
int member_sync_adapters(struct admin *a, const struct membership *ms, const cJSON *list, int64_t base_id, int64_t now,
			 char *err);

/* The heartbeat's "deployments": what this node runs for the leader,
 * and the specs it could not take.  The caller holds the store's mutex. */
cJSON *member_reports(struct admin *a);
/* Make this node's leader-placed deployments match the heartbeat answer
 * (its "deployments" and "relay_key_sha256"); starts model fetches and
 * kicks the supervisor.  The caller holds the store's mutex. */
void member_sync(struct admin *a, const struct membership *m, const cJSON *reply);

/* This member's row for the leader's deployment leader_id: its id,
 * APP_ENOTFOUND, or APP_EIO. */
int64_t member_local_id(sqlite3 *db, int64_t leader_id);

#endif
