/*
 * A member's half of deployments on other nodes (cluster/remote.h): take the
 * leader's specs from a heartbeat answer, checked as any outside input,
 * into rows this node's supervisor runs, and report their states back.
 */
#include <ctype.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "jsonnum.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "store/db.h"
#include "deploy/deployments.h"
#include "models/models.h"
#include "cluster/remote.h"
#include "deploy/supervisor.h"

#define MAX_SPECS 256
#define MAX_KEYS 64

/* One deployment the leader placed here, checked. */
struct spec {
	int64_t id, model_id, size;
	const char *name, *desired, *model_name, *sha; /* sha NULL: the leader has none */
	char placement[2048], *options;
	const cJSON *keys;
	int64_t local_id;
};

int
load_membership(struct admin *a, struct membership *m)
{
	sqlite3_stmt *st;
	int found = 0;

	memset(m, 0, sizeof(*m));
	if (sqlite3_prepare_v2(a->db,
			       "SELECT leader_url, coalesce(leader_pin, ''), node_id, secret, "
			       "coalesce(state, ''), coalesce(leader_key_sha256, '') FROM membership",
			       -1, &st, NULL) != SQLITE_OK)
		return 0;
	if (sqlite3_step(st) == SQLITE_ROW) {
		found = 1;
		snprintf(m->leader, sizeof(m->leader), "%s", (const char *)sqlite3_column_text(st, 0));
		snprintf(m->pin, sizeof(m->pin), "%s", (const char *)sqlite3_column_text(st, 1));
		m->node_id = sqlite3_column_int64(st, 2);
		snprintf(m->secret, sizeof(m->secret), "%s", (const char *)sqlite3_column_text(st, 3));
		snprintf(m->state, sizeof(m->state), "%s", (const char *)sqlite3_column_text(st, 4));
		snprintf(m->relay_sha, sizeof(m->relay_sha), "%s", (const char *)sqlite3_column_text(st, 5));
	}
	sqlite3_finalize(st);
	return found;
}

static int
int_in(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return json_int_in(v, lo, hi, out);
}

/* A GPU placement from the leader, which checked it against what this
 * node reported: each GPU or MIG instance must still be this node's, not
 * held by a deployment of this node's own console, and the engine must
 * have the CUDA backend.  Whether the model fits was the leader's check
 * (the model may not be here yet). */
/* A rendezvous address from the leader: HOST:PORT, in the characters of
 * host names and IP addresses only (it goes on a command line). */
static int
dist_init_ok(const char *init)
{
	size_t n = init != NULL ? strlen(init) : 0;
	int ok = n > 2 && n < 300 && strchr(init, ':') != NULL;

	for (size_t i = 0; ok && i < n; i++)
		ok = isalnum((unsigned char)init[i]) || strchr(".-:[]", init[i]) != NULL;
	return ok;
}

static int
gpu_spec(struct admin *a, const cJSON *p, struct spec *s, char *err)
{
	static const char *const known[] = { "kind", "gpus",   "tensor_parallel", "node", "rank",
					     "tp",   "nnodes", "dist_init",       NULL };
	const cJSON *gpus = cJSON_GetObjectItemCaseSensitive(p, "gpus"), *v;
	const cJSON *backends = cJSON_GetObjectItem(atomic_load(&a->engine), "backends");
	int64_t tp;
	sqlite3_stmt *st;

	cJSON_ArrayForEach (v, p) {
		int ok = 0;
		for (int i = 0; known[i] != NULL && !ok; i++)
			ok = strcmp(v->string, known[i]) == 0;
		if (!ok)
			return app_fail(err, APP_EINVAL, "unknown placement field '%.40s'", v->string);
	}
	int n = cJSON_GetArraySize(gpus);
	if (!cJSON_IsArray(gpus) || n < 1 || n > 16 || int_in(p, "tensor_parallel", 1, 16, &tp) < 0 || tp != n)
		return app_fail(err, APP_EINVAL,
				"placement.gpus must list 1 to 16 GPUs and tensor_parallel their number");
	int cuda = 0;
	cJSON_ArrayForEach (v, backends)
		cuda |= cJSON_IsString(v) && strcmp(v->valuestring, "cuda") == 0;
	if (!cuda)
		return app_fail(err, APP_EUNSUPPORTED, "this node's privai-engine has no CUDA backend");
	if (sqlite3_prepare_v2(a->db,
			       "SELECT (SELECT count(*) FROM gpus g JOIN nodes n ON n.id = g.node_id WHERE "
			       "n.is_self = 1 AND ((g.uuid = ?1 AND g.mig_enabled = 0) OR (g.mig_enabled = 1 AND "
			       "EXISTS (SELECT 1 FROM json_each(g.instances) i WHERE json_extract(i.value, '$.uuid') "
			       "= ?1)))), (SELECT d.name FROM deployments d, json_each(d.placement, '$.gpus') x "
			       "WHERE d.leader_id IS NULL AND d.desired = 'running' AND x.value = ?1)",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	int bad = 0;
	cJSON_ArrayForEach (v, gpus) {
		const char *u = cJSON_GetStringValue(v);
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, u != NULL ? u : "", -1, SQLITE_TRANSIENT);
		if (u == NULL || strlen(u) > 95 || sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0) != 1)
			bad = app_fail(err, APP_ENOTFOUND, "this node has no GPU or MIG instance %.96s to run it on",
				       u ? u : "?");
		else if (sqlite3_column_type(st, 1) == SQLITE_TEXT)
			bad = app_fail(err, APP_EBUSY, "GPU %s is held by this node's own deployment '%s'", u,
				       (const char *)sqlite3_column_text(st, 1));
		if (bad)
			break;
	}
	sqlite3_finalize(st);
	if (bad)
		return bad;
	/* a node's ranks of a group over nodes: where they meet, and which */
	int64_t rank = 0, size = 0, nodes = 0;
	const char *init = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "dist_init"));
	if (cJSON_GetObjectItemCaseSensitive(p, "rank") != NULL &&
	    (int_in(p, "rank", 1, 15, &rank) < 0 || int_in(p, "nnodes", 2, 16, &nodes) < 0 || rank >= nodes ||
	     int_in(p, "tp", 2, 4096, &size) < 0 || size != tp * nodes || !dist_init_ok(init)))
		return app_fail(err, APP_EINVAL,
				"a GPU group's node takes placement.rank 1..nnodes-1, nnodes 2..16, tp its GPUs "
				"times nnodes, and dist_init HOST:PORT");
	cJSON *out = cJSON_CreateObject();
	char *text = NULL;
	if (out != NULL && cJSON_AddStringToObject(out, "kind", "gpu") != NULL &&
	    cJSON_AddItemToObject(out, "gpus", cJSON_Duplicate(gpus, 1)) &&
	    cJSON_AddNumberToObject(out, "tensor_parallel", (double)tp) != NULL &&
	    (rank == 0 || (cJSON_AddNumberToObject(out, "rank", (double)rank) != NULL &&
			   cJSON_AddNumberToObject(out, "tp", (double)size) != NULL &&
			   cJSON_AddNumberToObject(out, "nnodes", (double)nodes) != NULL &&
			   cJSON_AddStringToObject(out, "dist_init", init) != NULL)))
		text = cJSON_PrintUnformatted(out);
	cJSON_Delete(out);
	if (text == NULL || strlen(text) >= sizeof(s->placement)) {
		cJSON_free(text);
		return app_fail(err, APP_ENOMEM, "out of memory");
	}
	snprintf(s->placement, sizeof(s->placement), "%s", text);
	cJSON_free(text);
	return 0;
}

/* A follower rank of one of the leader's split deployments: which rank
 * of how many, and where rank 0 listens for the others (HOST:PORT, as
 * the engine's --dist-init takes it). */
static int
follower_spec(const cJSON *p, int64_t threads, struct spec *s, char *err)
{
	const char *init = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "dist_init"));
	int64_t rank, tp;

	if (int_in(p, "rank", 1, 4095, &rank) < 0 || int_in(p, "tp", 2, 4096, &tp) < 0 || rank >= tp)
		return app_fail(err, APP_EINVAL, "placement.rank must be 1..tp-1 and placement.tp 2..4096");
	if (threads < 1)
		return app_fail(err, APP_EINVAL, "a follower rank needs placement.threads");
	if (!dist_init_ok(init))
		return app_fail(err, APP_EINVAL, "placement.dist_init must be HOST:PORT");
	if (cJSON_GetObjectItemCaseSensitive(p, "nnodes") == NULL) {
		snprintf(s->placement, sizeof(s->placement),
			 "{\"kind\":\"cpu\",\"threads\":%lld,\"rank\":%lld,\"tp\":%lld,\"dist_init\":\"%s\"}",
			 (long long)threads, (long long)rank, (long long)tp, init);
		return 0;
	}
	/* several ranks a node: `rank` is this node's number; its engine
	 * starts ranks_per_node ranks with `threads` CPUs each */
	int64_t nodes, per_node;
	if (int_in(p, "nnodes", 2, 16, &nodes) < 0 || int_in(p, "ranks_per_node", 2, 8, &per_node) < 0 ||
	    rank >= nodes || tp != nodes * per_node)
		return app_fail(err, APP_EINVAL,
				"placement.nnodes must be 2..16 with rank below it, ranks_per_node 2..8, and tp their "
				"product");
	if (threads * per_node > sysconf(_SC_NPROCESSORS_ONLN))
		return app_fail(err, APP_EINVAL, "%lld ranks of %lld threads; this node has %ld CPUs",
				(long long)per_node, (long long)threads, sysconf(_SC_NPROCESSORS_ONLN));
	snprintf(s->placement, sizeof(s->placement),
		 "{\"kind\":\"cpu\",\"threads\":%lld,\"rank\":%lld,\"tp\":%lld,\"nnodes\":%lld,\"ranks_per_node\":%lld,"
		 "\"dist_init\":\"%s\"}",
		 (long long)threads, (long long)rank, (long long)tp, (long long)nodes, (long long)per_node, init);
	return 0;
}

/* Check one spec; 0, or -1 with the reason. */
static int
spec_parse(struct admin *a, const cJSON *e, struct spec *s, char *err)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "placement"), *v, *k;
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "model");
	char field[64];
	int64_t threads = 0;

	memset(s, 0, sizeof(*s));
	s->name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
	s->desired = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "desired"));
	if (s->name == NULL || strlen(s->name) > 64 || !model_name_ok(s->name))
		return app_fail(err, APP_EINVAL, "the name is not a deployment name");
	if (s->desired == NULL || (strcmp(s->desired, "running") != 0 && strcmp(s->desired, "stopped") != 0))
		return app_fail(err, APP_EINVAL, "desired must be running or stopped");
	const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "kind"));
	if (!cJSON_IsObject(p) || kind == NULL || (strcmp(kind, "cpu") != 0 && strcmp(kind, "gpu") != 0))
		return app_fail(err, APP_EINVAL, "placement.kind must be cpu or gpu");
	if (strcmp(kind, "gpu") == 0) {
		if (gpu_spec(a, p, s, err) < 0)
			return APP_EINVAL;
	} else {
		static const char *const known[] = { "kind",   "threads",        "node",      "rank", "tp",
						     "nnodes", "ranks_per_node", "dist_init", NULL };
		cJSON_ArrayForEach (v, p) {
			int ok = 0;
			for (int i = 0; known[i] != NULL && !ok; i++)
				ok = strcmp(v->string, known[i]) == 0;
			if (!ok)
				return app_fail(err, APP_EINVAL, "unknown placement field '%.40s'", v->string);
		}
		if (cJSON_GetObjectItemCaseSensitive(p, "threads") != NULL &&
		    int_in(p, "threads", 0, 1024, &threads) < 0)
			return app_fail(err, APP_EINVAL, "placement.threads must be an integer in 0..1024");
		if (threads > sysconf(_SC_NPROCESSORS_ONLN))
			return app_fail(err, APP_EINVAL, "placement.threads is %lld; this node has %ld CPUs",
					(long long)threads, sysconf(_SC_NPROCESSORS_ONLN));
		snprintf(s->placement, sizeof(s->placement), "{\"kind\":\"cpu\",\"threads\":%lld}", (long long)threads);
		if (cJSON_GetObjectItemCaseSensitive(p, "rank") != NULL && follower_spec(p, threads, s, err) < 0)
			return APP_EINVAL;
	}
	if (deploy_options_parse(cJSON_GetObjectItemCaseSensitive(e, "options"), &s->options, field, sizeof(field), err,
				 APP_ERR_LEN) < 0)
		return APP_EINVAL;
	s->model_name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "name"));
	v = cJSON_GetObjectItemCaseSensitive(m, "sha256");
	s->sha = cJSON_GetStringValue(v);
	if (!cJSON_IsObject(m) || int_in(m, "id", 1, INT64_C(1) << 53, &s->model_id) < 0 || s->model_name == NULL ||
	    !model_name_ok(s->model_name) || (!cJSON_IsNull(v) && !sha256_hex_ok(s->sha)) ||
	    int_in(m, "size_bytes", 1, a->cfg.max_upload_bytes, &s->size) < 0)
		return app_fail(err, APP_EINVAL,
				"model must have an id, a model name, a SHA-256 or null, and a size of "
				"1..%lld bytes",
				(long long)a->cfg.max_upload_bytes);
	s->keys = cJSON_GetObjectItemCaseSensitive(e, "keys");
	if (!cJSON_IsArray(s->keys) || cJSON_GetArraySize(s->keys) > MAX_KEYS)
		return app_fail(err, APP_EINVAL, "keys must be an array of at most %d SHA-256s", MAX_KEYS);
	cJSON_ArrayForEach (k, s->keys)
		if (!sha256_hex_ok(cJSON_GetStringValue(k)))
			return app_fail(err, APP_EINVAL, "keys must be SHA-256s in hex");
	return 0;
}

/* The local model for the spec: one with its SHA-256, or the fetch from
 * the leader's URL (started now, or again a while after it failed). */
static int
ensure_model(struct admin *a, const struct membership *ms, const struct spec *s, int64_t now, int64_t *model_id,
	     char *err)
{
	char url[512], e[APP_ERR_LEN];
	sqlite3_stmt *st;
	int64_t id = 0, created = 0;
	char state[16] = "";

	if (str_fmt(url, sizeof(url), "%s/api/v1/nodes/%lld/models/%lld/file", ms->leader, (long long)ms->node_id,
		    (long long)s->model_id) != APP_OK)
		return app_fail(err, APP_ERANGE, "the leader's URL is too long");
	if (sqlite3_prepare_v2(a->db,
			       "SELECT id, state, created_at FROM models WHERE (?1 IS NOT NULL AND sha256 = ?1 "
			       "AND state = 'ready') OR (url = ?2 AND size_bytes = ?3 AND (?1 IS NULL OR "
			       "sha256 IS NULL OR sha256 = ?1)) ORDER BY state = 'ready' DESC, id DESC LIMIT 1",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	sqlite3_bind_text(st, 1, s->sha, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, url, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, s->size);
	if (sqlite3_step(st) == SQLITE_ROW) {
		id = sqlite3_column_int64(st, 0);
		snprintf(state, sizeof(state), "%s", (const char *)sqlite3_column_text(st, 1));
		created = sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	int rc = APP_OK;
	if (id == 0) {
		rc = model_fetch_begin(a, s->model_name, url, s->sha, s->size, ms->pin, ms->secret, 0, now, 0, &id, e);
		if (rc == APP_EBUSY) {
			/* a model of this node's own has the name: the copy takes
			 * another (engines serve the deployment's name, not the
			 * model's, and the copy is found again by its URL) */
			char alt[160];
			snprintf(alt, sizeof(alt), "%.90s.from-leader-%lld", s->model_name, (long long)s->model_id);
			rc = model_fetch_begin(a, alt, url, s->sha, s->size, ms->pin, ms->secret, 0, now, 0, &id, e);
		}
	} else if (strcmp(state, "failed") == 0 && created < now - MEMBER_FETCH_RETRY_S)
		rc = model_fetch_begin(a, s->model_name, url, s->sha, s->size, ms->pin, ms->secret, 0, now, id, &id, e);
	if (rc == APP_EBUSY)
		return app_fail(err, APP_EINVAL,
				"models named '%s' and '%s.from-leader-%lld' are on this node already; rename or "
				"delete one there",
				s->model_name, s->model_name, (long long)s->model_id);
	if (rc != APP_OK)
		return app_fail(err, APP_EIO, "cannot fetch the model: %s", e);
	*model_id = id;
	return 0;
}

/* Mirror the deployment's API key hashes: 1 when they changed, 0 when
 * not, or the store's error (negative) in err. */
static int
sync_keys(struct admin *a, const struct spec *s, int64_t now, char *err)
{
	sqlite3_stmt *st;
	const cJSON *k;
	int have = 0, same = 1, rc;

	if ((rc = db_prepare(a->db,
			     "SELECT key_sha256 FROM deployment_keys WHERE deployment_id = ?1 AND "
			     "revoked_at IS NULL",
			     &st, err)) != APP_OK)
		return rc;
	sqlite3_bind_int64(st, 1, s->local_id);
	while (sqlite3_step(st) == SQLITE_ROW) {
		int found = 0;
		have++;
		cJSON_ArrayForEach (k, s->keys)
			found |= strcmp(k->valuestring, (const char *)sqlite3_column_text(st, 0)) == 0;
		same &= found;
	}
	sqlite3_finalize(st);
	if (same && have == cJSON_GetArraySize(s->keys))
		return 0;
	if (db_prepare(a->db, "DELETE FROM deployment_keys WHERE deployment_id = ?1", &st, NULL) == APP_OK)
		sqlite3_bind_int64(st, 1, s->local_id);
	if ((rc = db_write(a->db, st, err)) != APP_OK ||
	    (rc = db_prepare(a->db,
			     "INSERT OR IGNORE INTO deployment_keys (deployment_id, name, key_sha256, "
			     "created_at) VALUES (?1, 'leader', ?2, ?3)",
			     &st, err)) != APP_OK)
		return rc;
	cJSON_ArrayForEach (k, s->keys) {
		sqlite3_bind_int64(st, 1, s->local_id);
		sqlite3_bind_text(st, 2, k->valuestring, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, now);
		if ((rc = db_step_write(a->db, st, err)) != APP_OK)
			break;
	}
	sqlite3_finalize(st);
	return rc == APP_OK ? 1 : rc;
}

/* ?1-?5 of both statements below */
static void
bind_spec(sqlite3_stmt *st, const struct spec *s, int64_t model_id, const char *desired)
{
	sqlite3_bind_int64(st, 1, s->id);
	sqlite3_bind_int64(st, 2, model_id);
	sqlite3_bind_text(st, 3, s->placement, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 4, s->options, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 5, desired, -1, SQLITE_STATIC);
}

/* Insert or update the local row; 1 when its engine must restart (model,
 * placement or options changed), 0, or -1 with the reason. */
static int
upsert(struct admin *a, const struct membership *ms, struct spec *s, int64_t model_id, int draining, int64_t now,
       char *err)
{
	int drained = draining && strcmp(s->desired, "running") == 0; /* it runs again when the node resumes */
	const char *desired = drained ? "stopped" : s->desired;
	sqlite3_stmt *st;
	int found = 0, changed = 0;

	if (sqlite3_prepare_v2(a->db,
			       "SELECT id, model_id = ?2 AND placement = ?3 AND options = ?4, desired = ?5 "
			       "FROM deployments WHERE leader_id = ?1",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	bind_spec(st, s, model_id, desired);
	if (sqlite3_step(st) == SQLITE_ROW) {
		found = 1;
		s->local_id = sqlite3_column_int64(st, 0);
		changed = !sqlite3_column_int(st, 1);
		if (!changed && sqlite3_column_int(st, 2)) {
			sqlite3_finalize(st);
			return 0; /* as it was */
		}
	}
	sqlite3_finalize(st);
	int port = found ? 0 : deploy_pick_port(a);
	if (port < 0)
		return app_fail(err, APP_EBUSY, "every engine port %d-%d of this node is taken", a->cfg.engine_port_lo,
				a->cfg.engine_port_hi);
	const char *sql =
		found ? "UPDATE deployments SET model_id = ?2, placement = ?3, options = ?4, desired = ?5, "
			"drained = ?6, reason = CASE WHEN ?6 THEN 'stopped: node drained' ELSE reason END, "
			"updated_at = ?7 WHERE leader_id = ?1"
		      : "INSERT INTO deployments (leader_id, model_id, placement, options, desired, drained, "
			"created_at, updated_at, name, port, state, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
			"?7, ?8, ?9, 'pending', CASE WHEN ?6 THEN 'stopped: node drained' END)";
	if (sqlite3_prepare_v2(a->db, sql, -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	bind_spec(st, s, model_id, desired);
	sqlite3_bind_int(st, 6, drained);
	sqlite3_bind_int64(st, 7, now);
	if (!found) {
		sqlite3_bind_text(st, 8, s->name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int(st, 9, port);
	}
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_CONSTRAINT)
		return app_fail(err, APP_EBUSY, "a deployment named '%s' runs on this node already", s->name);
	if (rc != SQLITE_DONE)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	if (!found)
		s->local_id = sqlite3_last_insert_rowid(a->db);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "leader_id", (double)s->id);
	cJSON_AddStringToObject(d, "desired", desired);
	cJSON_AddRawToObject(d, "placement", s->placement);
	cJSON_AddRawToObject(d, "options", s->options);
	char *detail = cJSON_PrintUnformatted(d);
	cJSON_Delete(d);
	admin_audit(a->db, now, "leader", found ? "deployment.update" : "deployment.create", s->name, ms->leader, "ok",
		    detail);
	free(detail);
	return found && changed;
}

static void
note_error(struct admin *a, int64_t id, const char *why)
{
	cJSON *e = cJSON_CreateObject();

	cJSON_AddNumberToObject(e, "id", (double)id);
	cJSON_AddStringToObject(e, "state", "failed");
	cJSON_AddStringToObject(e, "reason", why);
	cJSON_AddItemToArray(a->member_errors, e);
}

/* Rows the leader no longer lists go; their engines stop. */
static void
drop_unlisted(struct admin *a, const struct membership *ms, const int64_t *seen, int n, int64_t now)
{
	sqlite3_stmt *st;
	int64_t gone[MAX_SPECS];
	char names[MAX_SPECS][80];
	int k = 0;

	if (sqlite3_prepare_v2(a->db, "SELECT id, leader_id, name FROM deployments WHERE leader_id IS NOT NULL", -1,
			       &st, NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW && k < MAX_SPECS) {
		int64_t lid = sqlite3_column_int64(st, 1);
		int listed = 0;
		for (int i = 0; i < n && !listed; i++)
			listed = seen[i] == lid;
		if (!listed) {
			gone[k] = sqlite3_column_int64(st, 0);
			snprintf(names[k++], sizeof(names[0]), "%s", (const char *)sqlite3_column_text(st, 2));
		}
	}
	sqlite3_finalize(st);
	for (int i = 0; i < k; i++)
		if (db_delete_id(a->db, "deployments", gone[i]) > 0)
			admin_audit(a->db, now, "leader", "deployment.delete", names[i], ms->leader, "ok", NULL);
}

void
member_sync(struct admin *a, const struct membership *ms, const cJSON *reply)
{
	const cJSON *specs = cJSON_GetObjectItemCaseSensitive(reply, "deployments"), *e;
	const char *relay = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(reply, "relay_key_sha256"));
	int64_t seen[MAX_SPECS], restart[MAX_SPECS], rekey[MAX_SPECS], now = admin_now();
	int n = 0, nr = 0, nk = 0, draining = 0;
	char err[APP_ERR_LEN];
	sqlite3_stmt *st;

	if (!cJSON_IsArray(specs))
		return; /* a leader that places nothing on other nodes */
	cJSON_Delete(a->member_errors);
	a->member_errors = cJSON_CreateArray();
	if (cJSON_GetArraySize(specs) > MAX_SPECS) {
		note_error(a, 0, "the leader sent more than 256 deployments; none were taken");
		return;
	}
	int relay_changed = relay != NULL && sha256_hex_ok(relay) && strcmp(relay, ms->relay_sha) != 0;
	if (sqlite3_prepare_v2(a->db, "SELECT 1 FROM nodes WHERE is_self = 1 AND state = 'draining'", -1, &st, NULL) ==
	    SQLITE_OK) {
		draining = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	if (db_begin(a->db) != APP_OK) {
		note_error(a, 0, "the leader's deployments were not taken: the store is busy or failing");
		return;
	}
	if (relay_changed) {
		if (db_prepare(a->db, "UPDATE membership SET leader_key_sha256 = ?1", &st, NULL) == APP_OK)
			sqlite3_bind_text(st, 1, relay, -1, SQLITE_TRANSIENT);
		if (db_write(a->db, st, err) != APP_OK) {
			db_rollback(a->db);
			note_error(a, 0, err);
			return;
		}
	}
	cJSON_ArrayForEach (e, specs) {
		struct spec s;
		int64_t model_id = 0, id = 0;
		int rc = APP_EINVAL;
		const cJSON *idv = cJSON_GetObjectItemCaseSensitive(e, "id");
		if (!cJSON_IsNumber(idv) || idv->valuedouble < 1 || idv->valuedouble > 9007199254740992.0 ||
		    idv->valuedouble != (double)(int64_t)idv->valuedouble) {
			note_error(a, 0, "a deployment without a valid id was not taken");
			continue;
		}
		id = (int64_t)idv->valuedouble;
		seen[n++] = id;
		if (spec_parse(a, e, &s, err) == 0 && (s.id = id) > 0 &&
		    ensure_model(a, ms, &s, now, &model_id, err) == 0)
			rc = upsert(a, ms, &s, model_id, draining, now, err);
		if (rc >= 0 &&
		    member_sync_adapters(a, ms,
					 cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "model"),
									  "adapters"),
					 model_id, now, err) < 0)
			/* the deployment runs without it: not a failure of the deployment */
			log_warn("deployment %lld from the leader: %s", (long long)id, err);
		if (rc < 0) {
			note_error(a, id, err);
		} else {
			if (rc == 1)
				restart[nr++] = s.local_id;
			int keys = sync_keys(a, &s, now, err);
			if (keys < 0)
				note_error(a, id, err);
			else if (keys || relay_changed)
				rekey[nk++] = s.local_id;
		}
		free(s.options);
	}
	drop_unlisted(a, ms, seen, n, now);
	if (db_commit(a->db) != APP_OK) {
		msg_fmt(err, sizeof(err), "the leader's deployments were not stored: %s", sqlite3_errmsg(a->db));
		db_rollback(a->db);
		note_error(a, 0, err);
		return;
	}
	for (int i = 0; i < nk; i++)
		supervisor_keys_changed(a->sup, rekey[i]);
	for (int i = 0; i < nr; i++)
		supervisor_restart(a->sup, restart[i]);
	supervisor_kick(a->sup);
}

cJSON *
member_reports(struct admin *a)
{
	cJSON *list = cJSON_CreateArray(), *e;
	sqlite3_stmt *st;
	char reason[800];

	if (list == NULL)
		return NULL;
	if (sqlite3_prepare_v2(a->db,
			       "SELECT d.leader_id, d.state, d.reason, d.restarts, d.started_at, m.state, "
			       "m.bytes_done, m.size_bytes, coalesce(m.error, '') FROM deployments d JOIN models m "
			       "ON m.id = d.model_id WHERE d.leader_id IS NOT NULL ORDER BY d.leader_id",
			       -1, &st, NULL) == SQLITE_OK) {
		while (sqlite3_step(st) == SQLITE_ROW) {
			const char *state = (const char *)sqlite3_column_text(st, 1);
			const char *why = (const char *)sqlite3_column_text(st, 2);
			const char *mstate = (const char *)sqlite3_column_text(st, 5);
			e = cJSON_CreateObject();
			cJSON_AddNumberToObject(e, "id", (double)sqlite3_column_int64(st, 0));
			if (strcmp(mstate, "failed") == 0) {
				state = "failed";
				snprintf(reason, sizeof(reason),
					 "the model could not be fetched from the leader: %.600s "
					 "(tried again within %d s)",
					 (const char *)sqlite3_column_text(st, 8), MEMBER_FETCH_RETRY_S);
				why = reason;
			} else if (strcmp(mstate, "importing") == 0 && strcmp(state, "pending") == 0) {
				snprintf(reason, sizeof(reason),
					 "fetching the model from the leader: %lld of %lld bytes",
					 (long long)sqlite3_column_int64(st, 6),
					 (long long)sqlite3_column_int64(st, 7));
				why = reason;
			}
			cJSON_AddStringToObject(e, "state", state);
			if (why != NULL)
				cJSON_AddStringToObject(e, "reason", why);
			cJSON_AddNumberToObject(e, "restarts", sqlite3_column_int(st, 3));
			if (sqlite3_column_type(st, 4) == SQLITE_INTEGER)
				cJSON_AddNumberToObject(e, "started_at", (double)sqlite3_column_int64(st, 4));
			cJSON_AddItemToArray(list, e);
		}
		sqlite3_finalize(st);
	}
	cJSON_ArrayForEach (e, a->member_errors)
		if (cJSON_GetNumberValue(cJSON_GetObjectItem(e, "id")) > 0)
			cJSON_AddItemToArray(list, cJSON_Duplicate(e, 1));
	return list;
}

int64_t
member_local_id(sqlite3 *db, int64_t leader_id)
{
	return db_int64(db, "SELECT id FROM deployments WHERE leader_id = ?1", leader_id, APP_ENOTFOUND);
}
