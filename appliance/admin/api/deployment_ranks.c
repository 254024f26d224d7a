/*
 * A CPU deployment split over nodes (tensor parallel): its placement's
 * "ranks" checked, and the follower ranks it names stored for the
 * heartbeats that hand them to their nodes (cluster/leader.c).
 */
#include <stdio.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "store/db.h"
#include "api/deployments.h"
#include "http/httpd.h"

/* placement.ranks: the nodes a CPU deployment is split over (tensor
 * parallel), rank 0 first: this node, whose engine serves, then one rank
 * a member node, whose console runs it as a follower.  The model's heads
 * must divide among them and its KV heads be split or shared (the
 * engine's rule, engine/src/tp_part.c), and this node's engine must load
 * the collectives ranks started apart meet with (Gloo).  Adds "ranks"
 * to out.  0, or -1 after replying. */
int
deploy_split_heads(struct req *r, int64_t model_id, int n, const char *field)
{
	sqlite3_stmt *st;
	int heads = 0, kv = 0;

	if (sqlite3_prepare_v2(r->a->db, "SELECT coalesce(n_head, 0), coalesce(n_head_kv, 0) FROM models WHERE id = ?1",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, model_id);
		if (sqlite3_step(st) == SQLITE_ROW) {
			heads = sqlite3_column_int(st, 0);
			kv = sqlite3_column_int(st, 1);
		}
		sqlite3_finalize(st);
	}
	if (heads > 0 && (heads % n != 0 || (kv > 0 && kv % n != 0 && n % kv != 0))) {
		reply_error(r, 422, "invalid_field", field,
			    "the model's %d attention heads and %d KV heads cannot be split over %d ranks (the heads "
			    "must divide, the KV heads divide or be divided)",
			    heads, kv, n);
		return -1;
	}
	return 0;
}

int
deploy_ranks_field(struct req *r, const cJSON *p, int64_t model_id, int64_t node_id, int64_t threads, int gpus,
		   cJSON *out)
{
	const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(p, "ranks"), *v, *t;
	const char *coll = gpus ? "nccl" : "gloo";
	int n = cJSON_GetArraySize(ranks), k = 0, has = 0;
	sqlite3_stmt *st;

	if (!cJSON_IsArray(ranks) || n < 2 || n > 16) {
		reply_error(r, 422, "invalid_field", "placement.ranks",
			    "placement.ranks lists 2 to 16 node names, this node first");
		return -1;
	}
	if (node_id != 0 || (!gpus && threads < 1)) {
		reply_error(r, 422, "invalid_field", node_id != 0 ? "placement.node" : "placement.threads",
			    node_id != 0 ? "a split deployment's rank 0 runs on this node: leave placement.node out"
					 : "a split deployment needs placement.threads: each rank's CPUs on its node");
		return -1;
	}
	cJSON_ArrayForEach (t, cJSON_GetObjectItem(atomic_load(&r->a->engine), "collectives"))
		has |= cJSON_IsString(t) && strcmp(t->valuestring, coll) == 0;
	if (!has) {
		reply_error(r, 422, "unsupported", "placement.ranks",
			    "this node's privai-engine cannot load its %s collectives (see privai-engine features)",
			    gpus ? "NCCL" : "Gloo");
		return -1;
	}
	if (!gpus && deploy_split_heads(r, model_id, n, "placement.ranks") < 0)
		return -1;
	if (sqlite3_prepare_v2(r->a->db, "SELECT is_self, state FROM nodes WHERE name = ?1 AND state != 'removed'", -1,
			       &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return -1;
	}
	cJSON *names = cJSON_AddArrayToObject(out, "ranks");
	cJSON_ArrayForEach (v, ranks) {
		const char *name = cJSON_GetStringValue(v);
		int found = 0, self = 0, dup = 0;
		char state[16] = "";
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, name != NULL ? name : "", -1, SQLITE_TRANSIENT);
		if (name != NULL && sqlite3_step(st) == SQLITE_ROW) {
			found = 1;
			self = sqlite3_column_int(st, 0);
			snprintf(state, sizeof(state), "%s", (const char *)sqlite3_column_text(st, 1));
		}
		for (const cJSON *w = ranks->child; w != v && name != NULL; w = w->next)
			dup |= cJSON_IsString(w) && strcmp(w->valuestring, name) == 0;
		const char *why = !found                    ? "is no node of this cluster (see GET /api/v1/nodes)"
				  : dup                     ? "is named twice: one rank a node"
				  : (k == 0) != (self == 1) ? (k == 0 ? "must be this node: rank 0 serves from here"
								      : "is this node, which holds rank 0 only")
				  : strcmp(state, "draining") == 0 ? "is draining"
								   : NULL;
		if (why != NULL) {
			sqlite3_finalize(st);
			reply_error(r, 422, "invalid_field", "placement.ranks", "placement.ranks[%d] '%.64s' %s", k,
				    name != NULL ? name : "?", why);
			return -1;
		}
		cJSON_AddItemToArray(names, cJSON_CreateString(name));
		k++;
	}
	sqlite3_finalize(st);
	return 0;
}

/* The follower ranks of deployment id as its placement names them
 * (none when it is not split), and the port its rank 0 listens on for
 * them, picked once; a placement of several ranks on this node alone
 * (GPUs, or ranks_per_node: started by the engine, --nnodes 1) gets that
 * port too.  Inside
 * the caller's transaction.  0, or -1 after replying. */
int
deploy_store_ranks(struct req *r, int64_t id, const char *placement)
{
	cJSON *pl = cJSON_Parse(placement);
	const cJSON *ranks = cJSON_GetObjectItem(pl, "ranks"), *v;
	sqlite3_stmt *st = NULL;
	int rc = -1, k = 0;

	if (db_prepare(r->a->db, "DELETE FROM deployment_ranks WHERE deployment_id = ?1", &st, NULL) != APP_OK)
		goto fail;
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) != SQLITE_DONE)
		goto fail;
	sqlite3_finalize(st);
	st = NULL;
	const cJSON *per_node = cJSON_GetObjectItem(pl, "ranks_per_node");
	if (!cJSON_IsArray(ranks) && cJSON_GetArraySize(cJSON_GetObjectItem(pl, "gpus")) < 2 &&
	    !(cJSON_IsNumber(per_node) && per_node->valueint > 1)) {
		cJSON_Delete(pl);
		return 0;
	}
	if (cJSON_GetObjectItem(pl, "dist_port") == NULL) {
		int port = deploy_pick_port(r->a);
		if (port < 0) {
			cJSON_Delete(pl);
			reply_error(r, 409, "no_port", NULL,
				    "every engine port %d-%d is taken (the ranks of a deployment "
				    "split over nodes or GPUs meet on one of them)",
				    r->a->cfg.engine_port_lo, r->a->cfg.engine_port_hi);
			return -1;
		}
		if (db_prepare(r->a->db,
			       "UPDATE deployments SET placement = json_set(placement, '$.dist_port', ?2) WHERE id = "
			       "?1",
			       &st, NULL) != APP_OK)
			goto fail;
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int(st, 2, port);
		if (sqlite3_step(st) != SQLITE_DONE)
			goto fail;
		sqlite3_finalize(st);
		st = NULL;
	}
	if (!cJSON_IsArray(ranks)) {
		cJSON_Delete(pl);
		return 0;
	}
	if (db_prepare(r->a->db,
		       "INSERT INTO deployment_ranks (deployment_id, rank, node_id, state, updated_at) "
		       "SELECT ?1, ?2, id, 'pending', ?4 FROM nodes WHERE name = ?3",
		       &st, NULL) != APP_OK)
		goto fail;
	cJSON_ArrayForEach (v, ranks) {
		if (k++ == 0)
			continue; /* rank 0 is the deployment's own engine */
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int(st, 2, k - 1);
		sqlite3_bind_text(st, 3, cJSON_GetStringValue(v), -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 4, r->now);
		if (sqlite3_step(st) != SQLITE_DONE)
			goto fail;
	}
	rc = 0;
fail:
	if (rc < 0)
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
	sqlite3_finalize(st);
	cJSON_Delete(pl);
	return rc;
}

int
deploy_stop_split_on(struct req *r, int64_t node_id, int is_self, const char *node, const char *why)
{
	sqlite3_stmt *st;
	char reason[300];

	snprintf(reason, sizeof(reason),
		 "stopped: a rank of it ran on node %.64s, which was %.40s; name other nodes in placement.ranks "
		 "and start it again",
		 node, why);
	if (db_prepare(r->a->db,
		       "UPDATE deployments SET desired = 'stopped', drained = 2, reason = ?3 WHERE desired = 'running' "
		       "AND "
		       "json_extract(placement, '$.ranks') IS NOT NULL AND leader_id IS NULL AND CASE WHEN ?2 THEN "
		       "node_id IS NULL ELSE id IN (SELECT deployment_id FROM deployment_ranks WHERE node_id = ?1) END",
		       &st, NULL) != APP_OK)
		return APP_EIO;
	sqlite3_bind_int64(st, 1, node_id);
	sqlite3_bind_int(st, 2, is_self);
	sqlite3_bind_text(st, 3, reason, -1, SQLITE_TRANSIENT);
	return db_write(r->a->db, st, NULL);
}
