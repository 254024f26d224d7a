/*
 * /api/v1/deployments: a model served by privai-engine with a placement
 * and serving options.  Rows say what should run; the supervisor makes it
 * so and writes back the state (pending, loading, ready, failed with the
 * reason, stopping, stopped).  Creating one also creates its first API
 * key, shown once.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "jsonnum.h"
#include "status.h"
#include "admin.h"
#include "store/db.h"
#include "api/deployments.h"
#include "deploy/placement.h"
#include "http/httpd.h"
#include "store/tasks.h"
#include "models/models.h"
#include "store/rows.h"
#include "deploy/supervisor.h"

/* A split deployment is one group: while rank 0 serves, a follower rank
 * that is not running makes it degraded (rank 0 ends the group itself
 * within seconds, and it starts again whole); while it starts, its
 * reason counts the ranks up. */
#define SPLIT_RANKS_DOWN                                                                                               \
	"EXISTS (SELECT 1 FROM deployment_ranks r WHERE r.deployment_id = d.id AND r.state IN ('failed', 'stopped', "  \
	"'pending'))"
#define SPLIT_RANKS_UP                                                                                                 \
	"((d.state = 'ready') + (SELECT count(*) FROM deployment_ranks r WHERE r.deployment_id = d.id AND r.state = "  \
	"'ready'))"

/* endpoint: where a client with one of its keys reaches the engine: on
 * this node's loopback, or through the console of the node that runs it */
#define DEPLOY_FIELDS                                                                                                                                                         \
	"SELECT d.id, d.name, d.model_id, m.name AS model, d.placement, d.options, d.port, d.desired, "                                                                       \
	"CASE WHEN d.state = 'ready' AND " SPLIT_RANKS_DOWN " THEN 'degraded' ELSE d.state END AS state, "                                                                    \
	"coalesce(d.reason, CASE WHEN d.state IN ('loading', 'ready') AND json_extract(d.placement, '$.ranks') IS "                                                           \
	"NOT NULL THEN "                                                                                                                                                      \
	"printf('%d of %d ranks up', " SPLIT_RANKS_UP ", json_array_length(d.placement, '$.ranks')) END) AS reason, "                                                         \
	"d.pid, d.unit, d.restarts, d.started_at, d.created_at, d.updated_at, "                                                                                               \
	"coalesce(n.name, (SELECT name FROM nodes WHERE is_self = 1)) AS node, d.leader_id, "                                                                                 \
	"CASE WHEN d.pid IS NOT NULL THEN d.cpus END AS cpus, "                                                                                                               \
	"CASE WHEN d.node_id IS NULL THEN 'http://127.0.0.1:' || d.port || '/v1' "                                                                                            \
	"ELSE n.url || '/api/v1/cluster/deployments/' || d.id || '/v1' END AS endpoint, " /* a split deployment: rank 0 is its own engine, the others the nodes' followers */ \
	"CASE WHEN json_extract(d.placement, '$.ranks') IS NOT NULL THEN (SELECT json_group_array(json(x)) FROM "                                                             \
	"(SELECT 0 AS k, json_object('rank', 0, 'node', (SELECT name FROM nodes WHERE is_self = 1), 'state', "                                                                \
	"d.state, 'reason', d.reason) AS x UNION ALL SELECT r.rank, json_object('rank', r.rank, 'node', rn.name, "                                                            \
	"'state', r.state, 'reason', r.reason) FROM deployment_ranks r JOIN nodes rn ON rn.id = r.node_id "                                                                   \
	"WHERE r.deployment_id = d.id ORDER BY 1)) END AS ranks "                                                                                                             \
	"FROM deployments d JOIN models m ON m.id = d.model_id LEFT JOIN nodes n ON n.id = d.node_id"

/* What a placement is checked with besides itself. */
struct placing {
	int64_t model_id;
	const char *options; /* the deployment's options once this request is applied */
	int64_t self_id;     /* the deployment changed, 0 for a new one */
};

static void
h_list(struct req *r)
{
	reply_query(r, 200, DEPLOY_FIELDS " ORDER BY d.id", 0, NULL, NULL);
}

static void
h_get(struct req *r)
{
	int64_t id = arg_id(r, 0, "deployment");

	if (id > 0)
		reply_query(r, 200, DEPLOY_FIELDS " WHERE d.id = ?1", 1, &id, "deployment");
}

/* placement.node: absent or this node (0), or another node that can
 * take deployments (its id); *cpus is that node's CPU count.  -1 after
 * replying. */
static int64_t
node_field(struct req *r, const cJSON *p, long *cpus)
{
	const char *node = field_str(r, p, "node", 0, 64, NULL);
	char state[16] = "";
	sqlite3_stmt *st;
	int64_t id = -1;
	int is_self = 0;

	*cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (node == NULL)
		return cJSON_GetObjectItemCaseSensitive(p, "node") != NULL ? APP_EINVAL : APP_OK;
	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT id, is_self, state, coalesce(cpu_cores, 0) FROM nodes WHERE name = ?1 "
			       "AND state != 'removed'",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, node, -1, SQLITE_TRANSIENT);
		if (sqlite3_step(st) == SQLITE_ROW) {
			id = sqlite3_column_int64(st, 0);
			is_self = sqlite3_column_int(st, 1);
			snprintf(state, sizeof(state), "%s", (const char *)sqlite3_column_text(st, 2));
			if (!is_self && sqlite3_column_int(st, 3) > 0)
				*cpus = sqlite3_column_int(st, 3);
		}
		sqlite3_finalize(st);
	}
	if (id < 0) {
		reply_error(r, 422, "invalid_field", "placement.node", "no node named '%s' (see GET /api/v1/nodes)",
			    node);
		return APP_EINVAL;
	}
	if (is_self)
		return 0;
	if (strcmp(state, "draining") == 0) {
		reply_error(r, 409, "node_draining", "placement.node",
			    "node %s is draining; resume it before placing "
			    "deployments on it",
			    node);
		return APP_EINVAL;
	}
	return id;
}

/* kind gpu: placement.gpus or placement.count, checked by deploy/placement.c. */
static char *
gpu_placement(struct req *r, const cJSON *p, const struct placing *pl, int64_t node_id)
{
	const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(p, "gpus");
	const char *node = cJSON_GetStringValue(cJSON_GetObjectItem(p, "node"));
	struct place_error e;
	int64_t count, tp;
	char *text = NULL;

	if (cJSON_GetObjectItemCaseSensitive(p, "threads") != NULL) {
		reply_error(r, 422, "invalid_field", "placement.threads", "placement.threads is for kind cpu, not gpu");
		return NULL;
	}
	if (field_int(r, p, "count", 0, 1, 16, 0, &count) < 0 ||
	    field_int(r, p, "tensor_parallel", 0, 1, 64, 0, &tp) < 0)
		return NULL;
	if ((gpus == NULL) == (count == 0)) {
		reply_error(r, 422, "invalid_field", "placement.gpus",
			    "a GPU placement names its GPUs (placement.gpus) "
			    "or how many to pick (placement.count): one of the two");
		return NULL;
	}
	struct gpu_ask q = { node_id > 0 ? node_id : r->a->self_node_id,
			     node != NULL ? node : r->a->cfg.node_name,
			     gpus,
			     (int)count,
			     (int)tp,
			     pl->model_id,
			     pl->options,
			     pl->self_id };
	const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(p, "ranks");
	cJSON *out = cJSON_CreateObject();
	if (out == NULL || cJSON_AddStringToObject(out, "kind", "gpu") == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
	} else if (ranks != NULL) {
		/* a group over nodes: count GPUs on each (placement.h) */
		if (deploy_ranks_field(r, p, pl->model_id, node_id, 0, 1, out) == 0) {
			if (gpu_place_group(r->a->db, &q, cJSON_GetObjectItem(out, "ranks"), out, &e) < 0)
				reply_error(r, (unsigned)e.status, e.code, e.field, "%s", e.msg);
			else if ((text = cJSON_PrintUnformatted(out)) == NULL)
				reply_error(r, 500, "internal", NULL, "out of memory");
		}
	} else if (gpu_place(r->a->db, &q, out, &e) < 0) {
		reply_error(r, (unsigned)e.status, e.code, e.field, "%s", e.msg);
	} else {
		if (node_id > 0)
			cJSON_AddStringToObject(out, "node", node);
		if ((text = cJSON_PrintUnformatted(out)) == NULL)
			reply_error(r, 500, "internal", NULL, "out of memory");
	}
	cJSON_Delete(out);
	return text;
}

/* A CPU placement with threads > 0 holds that many of its node's CPUs for
 * itself (deploy/supervisor.c gives its engine a CPU set of its own, as
 * Kubernetes' static CPU manager does for guaranteed pods); those of the
 * running deployments on a node add up to at most its CPUs, unless the
 * placement says oversubscribe.  0 after checking, -1 after replying. */
static int
cpus_free(struct req *r, int64_t node_id, int64_t self_id, int64_t threads, long cpus, const char *node)
{
	sqlite3_stmt *st;
	char holders[512] = "";
	size_t len = 0;
	int64_t held = 0;

	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT name, json_extract(placement, '$.threads') * coalesce(json_extract(placement, "
			       "'$.ranks_per_node'), 1) FROM deployments WHERE desired = "
			       "'running' AND id != ?2 AND leader_id IS NULL AND json_extract(placement, '$.kind') = "
			       "'cpu' AND json_extract(placement, '$.threads') > 0 AND NOT coalesce(json_extract("
			       "placement, '$.oversubscribe'), 0) AND CASE WHEN ?1 = 0 THEN node_id IS NULL ELSE "
			       "node_id = ?1 END ORDER BY id",
			       -1, &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return -1;
	}
	sqlite3_bind_int64(st, 1, node_id);
	sqlite3_bind_int64(st, 2, self_id);
	while (sqlite3_step(st) == SQLITE_ROW) {
		held += sqlite3_column_int64(st, 1);
		if (len < sizeof(holders))
			len += (size_t)snprintf(holders + len, sizeof(holders) - len, "%s%s (%lld)", len ? ", " : "",
						(const char *)sqlite3_column_text(st, 0),
						(long long)sqlite3_column_int64(st, 1));
	}
	sqlite3_finalize(st);
	if (held + threads <= cpus)
		return 0;
	reply_error(r, 409, "cpus_exhausted", "placement.threads",
		    "node %s has %ld CPUs and %lld are held by %s: at most %lld threads are free; ask for fewer, "
		    "stop one of those, or set placement.oversubscribe to share CPUs",
		    node, cpus, (long long)held, holders, (long long)(cpus - held > 0 ? cpus - held : 0));
	return -1;
}

/* A stopped CPU deployment asked to run again: cpus_free() on its stored
 * placement. */
static int
cpus_recheck(struct req *r, int64_t node_id, const char *node, const char *placement, int64_t id)
{
	cJSON *p = cJSON_Parse(placement);
	const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(p, "kind"));
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int rc = 0;

	if (kind != NULL && strcmp(kind, "cpu") == 0 && cJSON_GetNumberValue(cJSON_GetObjectItem(p, "threads")) > 0 &&
	    !cJSON_IsTrue(cJSON_GetObjectItem(p, "oversubscribe"))) {
		sqlite3_stmt *st;
		if (node_id > 0 &&
		    sqlite3_prepare_v2(r->a->db, "SELECT cpu_cores FROM nodes WHERE id = ?1 AND cpu_cores > 0", -1, &st,
				       NULL) == SQLITE_OK) {
			sqlite3_bind_int64(st, 1, node_id);
			if (sqlite3_step(st) == SQLITE_ROW)
				cpus = sqlite3_column_int(st, 0);
			sqlite3_finalize(st);
		}
		const cJSON *per_node = cJSON_GetObjectItem(p, "ranks_per_node");
		rc = cpus_free(r, node_id, id,
			       (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(p, "threads")) *
				       (cJSON_IsNumber(per_node) ? per_node->valueint : 1),
			       cpus, node_id > 0 ? node : r->a->cfg.node_name);
	}
	cJSON_Delete(p);
	return rc;
}

/* placement: {"kind": "cpu", "threads": N[, "oversubscribe": B][, "node": NAME]
 * [, "ranks": [NODE, ...]]} or {"kind": "gpu", "gpus": [...] | "count": N
 * [, "tensor_parallel": N][, "node": NAME | "ranks": [NODE, ...]]},
 * stored with the node's name when it is another node. */
static char *
placement_field(struct req *r, const cJSON *j, const struct placing *pl, int64_t *node_id)
{
	static const char *const known[] = { "kind", "threads",         "oversubscribe", "gpus",           "count",
					     "node", "tensor_parallel", "ranks",         "ranks_per_node", NULL };
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "placement");
	const char *kind;
	int64_t threads;
	long cpus;
	int oversubscribe;

	*node_id = 0;
	if (p == NULL)
		return strdup("{\"kind\":\"cpu\",\"threads\":0}");
	if (!cJSON_IsObject(p)) {
		reply_error(r, 422, "invalid_field", "placement", "placement must be an object");
		return NULL;
	}
	if (fields_known(r, p, known) < 0 || (kind = field_str(r, p, "kind", 1, 8, NULL)) == NULL)
		return NULL;
	if (strcmp(kind, "cpu") != 0 && strcmp(kind, "gpu") != 0) {
		reply_error(r, 422, "invalid_field", "placement.kind", "placement.kind must be cpu or gpu");
		return NULL;
	}
	if ((*node_id = node_field(r, p, &cpus)) < 0)
		return NULL;
	if (cJSON_GetObjectItemCaseSensitive(p, "oversubscribe") != NULL && strcmp(kind, "cpu") != 0) {
		reply_error(r, 422, "invalid_field", "placement.oversubscribe",
			    "placement.oversubscribe is for kind cpu, not gpu");
		return NULL;
	}
	if (strcmp(kind, "gpu") == 0) {
		if (cJSON_GetObjectItemCaseSensitive(p, "ranks_per_node") != NULL) {
			reply_error(r, 422, "invalid_field", "placement.ranks_per_node",
				    "placement.ranks_per_node is for kind cpu: on GPUs a node runs a rank a GPU");
			return NULL;
		}
		return gpu_placement(r, p, pl, *node_id);
	}
	for (const char *const *g = (const char *const[]){ "gpus", "count", "tensor_parallel", NULL }; *g != NULL; g++)
		if (cJSON_GetObjectItemCaseSensitive(p, *g) != NULL) {
			reply_error(r, 422, "invalid_field", *g, "placement.%s is for kind gpu, not cpu", *g);
			return NULL;
		}
	/* several ranks a node (one a NUMA node or socket): the engine
	 * starts them, each with `threads` CPUs (cli/tp_local.c) */
	int64_t per_node;
	if (field_int(r, p, "threads", 0, 0, 1024, 0, &threads) < 0 ||
	    field_int(r, p, "ranks_per_node", 0, 1, 8, 1, &per_node) < 0)
		return NULL;
	int ranks_n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(p, "ranks"));
	if (per_node > 1 && (threads < 1 || (*node_id != 0 && ranks_n == 0))) {
		reply_error(r, 422, "invalid_field", threads < 1 ? "placement.threads" : "placement.node",
			    threads < 1
				    ? "placement.ranks_per_node needs placement.threads: each rank's CPUs of its own"
				    : "placement.ranks_per_node runs on this node, or over placement.ranks");
		return NULL;
	}
	if (per_node > 1 && deploy_split_heads(r, pl->model_id, (int)per_node * (ranks_n > 0 ? ranks_n : 1),
					       "placement.ranks_per_node") < 0)
		return NULL;
	threads *= per_node; /* what the node gives the deployment */
	if (threads > cpus) {
		reply_error(r, 422, "invalid_field", "placement.threads", "node %s has %ld CPUs, not %lld%s",
			    *node_id ? cJSON_GetStringValue(cJSON_GetObjectItem(p, "node")) : "this", cpus,
			    (long long)threads, per_node > 1 ? " (threads a rank times ranks_per_node)" : "");
		return NULL;
	}
	const char *node_name = *node_id ? cJSON_GetStringValue(cJSON_GetObjectItem(p, "node")) : r->a->cfg.node_name;
	if (field_bool(r, p, "oversubscribe", 0, &oversubscribe) < 0 ||
	    (threads > 0 && !oversubscribe && cpus_free(r, *node_id, pl->self_id, threads, cpus, node_name) < 0))
		return NULL;
	cJSON *out = cJSON_CreateObject();
	cJSON_AddStringToObject(out, "kind", "cpu");
	cJSON_AddNumberToObject(out, "threads", (double)(threads / per_node));
	if (per_node > 1)
		cJSON_AddNumberToObject(out, "ranks_per_node", (double)per_node);
	if (oversubscribe)
		cJSON_AddTrueToObject(out, "oversubscribe");
	if (cJSON_GetObjectItemCaseSensitive(p, "ranks") != NULL &&
	    deploy_ranks_field(r, p, pl->model_id, *node_id, threads, 0, out) < 0) {
		cJSON_Delete(out);
		return NULL;
	}
	if (*node_id > 0)
		cJSON_AddStringToObject(out, "node", cJSON_GetStringValue(cJSON_GetObjectItem(p, "node")));
	char *text = cJSON_PrintUnformatted(out);
	cJSON_Delete(out);
	if (text == NULL)
		reply_error(r, 500, "internal", NULL, "out of memory");
	return text;
}

static char *
options_field(struct req *r, const cJSON *j)
{
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "options");
	char field[64], err[160], *out;

	if (o == NULL)
		return strdup("{}");
	int rc = deploy_options_parse(o, &out, field, sizeof(field), err, sizeof(err));
	if (rc < 0) {
		reply_error(r, 422, rc == APP_EUNSUPPORTED ? "unknown_field" : "invalid_field", field, "%s", err);
		return NULL;
	}
	return out;
}

/* A model by id (number) or name; its id, or -1 after a 422. */
static int64_t
model_field(struct req *r, const cJSON *j)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "model");
	sqlite3_stmt *st;
	int64_t id = -1, by_id = 0;

	if (!cJSON_IsString(m) && !cJSON_IsNumber(m)) {
		reply_error(r, 422, "missing_field", "model", "model (a model's id or name) is required");
		return APP_EINVAL;
	}
	/* an id is a whole number (1.5 was taken as model 1, 1e300 cast out of range) */
	if (cJSON_IsNumber(m) && json_int_in(m, 1, INT64_MAX, &by_id) != APP_OK) {
		reply_error(r, 422, "invalid_field", "model",
			    "model must be a model's id (a whole number from 1) or name");
		return APP_EINVAL;
	}
	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT m.id, m.kind = 'lora', b.name FROM models m LEFT JOIN models b ON "
			       "b.id = m.base_model_id WHERE m.id = ?1 OR m.name = ?2",
			       -1, &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return APP_EINVAL;
	}
	if (cJSON_IsNumber(m))
		sqlite3_bind_int64(st, 1, by_id);
	else
		sqlite3_bind_text(st, 2, m->valuestring, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW) {
		id = sqlite3_column_int64(st, 0);
		if (sqlite3_column_int(st, 1)) {
			reply_error(r, 422, "lora_adapter", "model",
				    "model %lld is a LoRA adapter of '%s': deploy '%s', whose deployments serve the "
				    "adapter by its name",
				    (long long)id, (const char *)sqlite3_column_text(st, 2),
				    (const char *)sqlite3_column_text(st, 2));
			id = APP_EINVAL;
		}
	}
	sqlite3_finalize(st);
	if (id == -1)
		reply_error(r, 422, "invalid_field", "model", "no such model");
	return id;
}

/* Nothing new starts on a draining node (node_id, 0: this one): 1 after
 * replying 409. */
static int
refuse_if_draining(struct req *r, int64_t node_id)
{
	sqlite3_stmt *st;
	int draining = 0;

	if (node_id == 0)
		node_id = r->a->self_node_id;
	if (sqlite3_prepare_v2(r->a->db, "SELECT 1 FROM nodes WHERE id = ?1 AND state = 'draining'", -1, &st, NULL) ==
	    SQLITE_OK) {
		sqlite3_bind_int64(st, 1, node_id);
		draining = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	if (draining)
		reply_error(r, 409, "node_draining", NULL,
			    "node %lld is draining; resume it (POST "
			    "/api/v1/nodes/%lld/resume) before starting deployments",
			    (long long)node_id, (long long)node_id);
	return draining;
}

int
deploy_refuse_if_leader_owned(struct req *r, int64_t id)
{
	sqlite3_stmt *st;
	int owned = 0;

	if (sqlite3_prepare_v2(r->a->db, "SELECT 1 FROM deployments WHERE id = ?1 AND leader_id IS NOT NULL", -1, &st,
			       NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		owned = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	if (owned)
		reply_error(r, 409, "leader_owned", NULL,
			    "deployment %lld was placed here by the cluster's leader; "
			    "change it on the leader's console",
			    (long long)id);
	return owned;
}

/* The node a deployment runs on (0: this one), or -1 after a 404. */
static int64_t
node_of(struct req *r, int64_t id)
{
	sqlite3_stmt *st;
	int64_t node = -1;

	if (sqlite3_prepare_v2(r->a->db, "SELECT coalesce(node_id, 0) FROM deployments WHERE id = ?1", -1, &st, NULL) ==
	    SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		if (sqlite3_step(st) == SQLITE_ROW)
			node = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	if (node < 0)
		reply_error(r, 404, "not_found", NULL, "no deployment %lld", (long long)id);
	return node;
}

static void
h_create(struct req *r)
{
	static const char *const known[] = { "name", "model", "placement", "options", NULL };
	char *placement = NULL, *options = NULL, key[DEPLOY_KEY_LEN], err[APP_ERR_LEN];
	const char *name;
	int64_t model_id, id, node_id = 0;
	sqlite3_stmt *st;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 64, NULL)) == NULL)
		goto out;
	if (!model_name_ok(name)) {
		reply_error(r, 422, "invalid_field", "name",
			    "a deployment name is 1-64 letters, digits, '.', '_', ':' "
			    "or '-', not starting with '.' or '-'");
		goto out;
	}
	if ((model_id = model_field(r, j)) < 0 || (options = options_field(r, j)) == NULL ||
	    (placement = placement_field(r, j, &(struct placing){ model_id, options, 0 }, &node_id)) == NULL ||
	    refuse_if_draining(r, node_id))
		goto out;
	if (db_begin(r->a->db) != 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	int port = node_id > 0 ? 0 : deploy_pick_port(r->a); /* another node picks its own */
	if (port < 0) {
		db_rollback(r->a->db);
		reply_error(r, 409, "no_port", NULL, "every engine port %d-%d is taken", r->a->cfg.engine_port_lo,
			    r->a->cfg.engine_port_hi);
		goto out;
	}
	int rc = SQLITE_ERROR;
	if (sqlite3_prepare_v2(r->a->db,
			       "INSERT INTO deployments (name, model_id, placement, options, port, state, "
			       "desired, created_at, updated_at, node_id, reason) VALUES (?1, ?2, ?3, ?4, "
			       "nullif(?5, 0), 'pending', 'running', ?6, ?6, nullif(?7, 0), CASE WHEN ?7 > 0 "
			       "THEN 'placed on node ' || (SELECT name FROM nodes WHERE id = ?7) || '; waiting "
			       "for its next heartbeat' END)",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, model_id);
		sqlite3_bind_text(st, 3, placement, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 4, options, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int(st, 5, port);
		sqlite3_bind_int64(st, 6, r->now);
		sqlite3_bind_int64(st, 7, node_id);
		rc = sqlite3_step(st);
		sqlite3_finalize(st);
	}
	if (rc != SQLITE_DONE) {
		db_rollback(r->a->db);
		if (rc == SQLITE_CONSTRAINT)
			reply_error(r, 409, "conflict", "name", "a deployment named '%s' exists", name);
		else
			reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	id = sqlite3_last_insert_rowid(r->a->db);
	if (deploy_store_ranks(r, id, placement) < 0) {
		db_rollback(r->a->db);
		goto out;
	}
	int64_t key_id;
	if (deploy_key_create(r->a->db, id, "default", r->now, key, &key_id, err) != APP_OK ||
	    db_commit(r->a->db) != 0) {
		db_rollback(r->a->db);
		reply_error(r, 500, "internal", NULL, "%s", err);
		goto out;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "model_id", (double)model_id);
	cJSON_AddRawToObject(d, "placement", placement);
	cJSON_AddRawToObject(d, "options", options);
	req_audit(r, "deployment.create", name, "ok", d);
	supervisor_kick(r->a->sup);
	reply_deployment_with_key(r, 201, id, key);
out:
	sodium_memzero(key, sizeof(key));
	free(placement);
	free(options);
	cJSON_Delete(j);
}

/* A deployment as stored, for checking a change against. */
struct current {
	int64_t model_id;
	char *options, *placement;
	char desired[16], node[80];
};

static int
load_current(struct req *r, int64_t id, struct current *c)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT d.model_id, d.options, d.placement, d.desired, coalesce(n.name, "
			       "(SELECT name FROM nodes WHERE is_self = 1)) FROM deployments d LEFT JOIN nodes n "
			       "ON n.id = d.node_id WHERE d.id = ?1",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		if (sqlite3_step(st) == SQLITE_ROW) {
			c->model_id = sqlite3_column_int64(st, 0);
			c->options = strdup((const char *)sqlite3_column_text(st, 1));
			c->placement = strdup((const char *)sqlite3_column_text(st, 2));
			snprintf(c->desired, sizeof(c->desired), "%s", (const char *)sqlite3_column_text(st, 3));
			snprintf(c->node, sizeof(c->node), "%s", (const char *)sqlite3_column_text(st, 4));
		}
		sqlite3_finalize(st);
	}
	if (c->options == NULL || c->placement == NULL) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return APP_EIO;
	}
	return 0;
}

static void
h_update(struct req *r)
{
	static const char *const known[] = { "desired", "placement", "options", NULL };
	char *placement = NULL, *options = NULL, target[32];
	const char *desired;
	int64_t id = arg_id(r, 0, "deployment"), node_id, new_node;
	struct current cur = { 0 };
	sqlite3_stmt *st;
	cJSON *j;

	if (id < 0 || (node_id = node_of(r, id)) < 0 || deploy_refuse_if_leader_owned(r, id) ||
	    (j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (desired = field_str(r, j, "desired", 0, 16, NULL), r->status))
		goto out;
	if (desired != NULL && strcmp(desired, "running") != 0 && strcmp(desired, "stopped") != 0) {
		reply_error(r, 422, "invalid_field", "desired", "desired must be running or stopped");
		goto out;
	}
	if (desired != NULL && strcmp(desired, "running") == 0 && refuse_if_draining(r, node_id))
		goto out;
	if (cJSON_GetObjectItemCaseSensitive(j, "options") != NULL && (options = options_field(r, j)) == NULL)
		goto out;
	if (load_current(r, id, &cur) < 0)
		goto out;
	struct placing pl = { cur.model_id, options != NULL ? options : cur.options, id };
	if (cJSON_GetObjectItemCaseSensitive(j, "placement") != NULL) {
		if ((placement = placement_field(r, j, &pl, &new_node)) == NULL)
			goto out;
	} else if ((options != NULL || desired != NULL) &&
		   strcmp(desired != NULL ? desired : cur.desired, "running") == 0) {
		/* its GPUs may have gone to another deployment while it was
		 * stopped, or the new options may not fit them */
		struct place_error e;
		if (gpu_place_recheck(r->a->db, node_id > 0 ? node_id : r->a->self_node_id, cur.node, cur.placement,
				      cur.model_id, pl.options, id, &e) < 0) {
			reply_error(r, (unsigned)e.status, e.code, e.field, "%s", e.msg);
			goto out;
		}
		/* and its CPUs may have gone to others likewise */
		if (cpus_recheck(r, node_id, cur.node, cur.placement, id) < 0)
			goto out;
	}
	if (db_begin(r->a->db) != SQLITE_OK ||
	    sqlite3_prepare_v2(r->a->db,
			       /* started again by hand: no longer stopped by a node's going */
			       /* asked to stop, a running engine is on its way down
			        * from now: a client must not read "ready" until the
			        * supervisor's tick (which takes "stopping" on) */
			       "UPDATE deployments SET state = CASE WHEN ?1 = 'stopped' AND desired = 'running' AND "
			       "state IN ('loading', 'ready') THEN 'stopping' ELSE state END, "
			       "desired = coalesce(?1, desired), drained = CASE WHEN ?1 = "
			       "'running' AND drained = 2 THEN 0 ELSE drained END, "
			       "placement = coalesce(?2, placement), options = coalesce(?3, options), "
			       "updated_at = ?4 WHERE id = ?5",
			       -1, &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		db_rollback(r->a->db);
		goto out;
	}
	sqlite3_bind_text(st, 1, desired, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, placement, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, options, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 4, r->now);
	sqlite3_bind_int64(st, 5, id);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	cJSON *moved = NULL;
	char err[APP_ERR_LEN];
	if (rc != SQLITE_DONE) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		db_rollback(r->a->db);
		goto out;
	}
	if (placement != NULL && new_node != node_id &&
	    (rc = deploy_move(r->a, id, new_node, placement, NULL, &moved, err)) != APP_OK) {
		db_rollback(r->a->db);
		reply_status(r, rc, "placement.node", err);
		goto out;
	}
	if (placement != NULL && deploy_store_ranks(r, id, placement) < 0) {
		db_rollback(r->a->db);
		goto out;
	}
	if (db_commit(r->a->db) != SQLITE_OK) {
		db_rollback(r->a->db);
		cJSON_Delete(moved);
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto out;
	}
	snprintf(target, sizeof(target), "deployment/%lld", (long long)id);
	if (moved != NULL) {
		char ref[40], *detail = cJSON_PrintUnformatted(moved);
		snprintf(ref, sizeof(ref), "move:%lld", (long long)id);
		task_begin(r->a->db, "deployment.move", ref, target, r->who.name, r->now);
		task_update(r->a->db, ref, -1, detail != NULL ? detail : "moved", r->now);
		task_finish(r->a->db, ref, 1, "moved; the new node starts it (see its deployment.start task)", r->now);
		free(detail);
		req_audit(r, "deployment.move", target, "ok", moved);
	}
	cJSON *d = cJSON_CreateObject();
	if (desired != NULL)
		cJSON_AddStringToObject(d, "desired", desired);
	if (placement != NULL)
		cJSON_AddRawToObject(d, "placement", placement);
	if (options != NULL)
		cJSON_AddRawToObject(d, "options", options);
	req_audit(r, "deployment.update", target, "ok", d);
	if (placement != NULL || options != NULL)
		supervisor_restart(r->a->sup, id);
	supervisor_kick(r->a->sup);
	reply_query(r, 200, DEPLOY_FIELDS " WHERE d.id = ?1", 1, &id, "deployment");
out:
	free(placement);
	free(options);
	free(cur.options);
	free(cur.placement);
	cJSON_Delete(j);
}

static void
h_delete(struct req *r)
{
	char target[32];
	int64_t id = arg_id(r, 0, "deployment");

	if (id < 0 || deploy_refuse_if_leader_owned(r, id))
		return;
	int deleted = db_delete_id(r->a->db, "deployments", id);
	if (deleted < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	if (deleted == 0) {
		reply_error(r, 404, "not_found", NULL, "no deployment %lld", (long long)id);
		return;
	}
	snprintf(target, sizeof(target), "deployment/%lld", (long long)id);
	req_audit(r, "deployment.delete", target, "ok", NULL);
	supervisor_kick(r->a->sup); /* its engine, now without a row, is stopped */
	reply_empty(r, 204);
}

void
reply_deployment_with_key(struct req *r, unsigned status, int64_t id, const char *key)
{
	sqlite3_stmt *st = NULL;
	int found;

	if (sqlite3_prepare_v2(r->a->db, DEPLOY_FIELDS " WHERE d.id = ?1", -1, &st, NULL) == SQLITE_OK)
		sqlite3_bind_int64(st, 1, id);
	cJSON *o = row_json(st, &found);
	if (o == NULL || !found) {
		cJSON_Delete(o);
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	cJSON_AddStringToObject(o, "api_key", key);
	reply_json(r, status, o);
}

const struct route api_deployments_routes[] = {
	{ "GET", "/api/v1/deployments", ROLE_VIEWER, 0, h_list, NULL, NULL },
	{ "POST", "/api/v1/deployments", ROLE_OPERATOR, 0, h_create, NULL, "deployment.create" },
	{ "GET", "/api/v1/deployments/{id}", ROLE_VIEWER, 0, h_get, NULL, NULL },
	{ "PATCH", "/api/v1/deployments/{id}", ROLE_OPERATOR, 0, h_update, NULL, "deployment.update" },
	{ "DELETE", "/api/v1/deployments/{id}", ROLE_OPERATOR, 0, h_delete, NULL, "deployment.delete" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
