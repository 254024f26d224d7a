/*
 * What an operator does with a running deployment: its API keys, its
 * engine log, its metrics, and requests to its OpenAI endpoint through
 * privai-admin (the engines listen on loopback only; the console's chat
 * panel and the dashboard's charts come this way).
 */
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "store/db.h"
#include "api/deployments.h"
#include "http/httpd.h"
#include "cluster/remote.h"
#include "deploy/supervisor.h"

static int
deploy_exists(struct req *r, int64_t id)
{
	sqlite3_stmt *st;
	int found = 0;

	if (sqlite3_prepare_v2(r->a->db, "SELECT 1 FROM deployments WHERE id = ?", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		found = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	if (!found)
		reply_error(r, 404, "not_found", NULL, "no deployment %lld", (long long)id);
	return found;
}

static void
h_keys(struct req *r)
{
	int64_t id = arg_id(r, 0, "deployment");

	if (id > 0 && deploy_exists(r, id))
		reply_query(r, 200,
			    "SELECT id, name, created_at, revoked_at FROM deployment_keys "
			    "WHERE deployment_id = ?1 ORDER BY id",
			    1, &id, NULL);
}

static void
h_key_create(struct req *r)
{
	static const char *const known[] = { "name", NULL };
	char key[DEPLOY_KEY_LEN], err[APP_ERR_LEN], target[80];
	int64_t id = arg_id(r, 0, "deployment"), key_id;
	const char *name;
	cJSON *j;

	if (id < 0 || !deploy_exists(r, id) || deploy_refuse_if_leader_owned(r, id) || (j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 64, NULL)) == NULL) {
		cJSON_Delete(j);
		return;
	}
	if (deploy_key_create(r->a->db, id, name, r->now, key, &key_id, err) != APP_OK) {
		cJSON_Delete(j);
		reply_error(r, 500, "internal", NULL, "%s", err);
		return;
	}
	if (supervisor_keys_changed(r->a->sup, id) != 0) {
		/* a key the engine does not know must not be listed as made */
		int undone = db_delete_id(r->a->db, "deployment_keys", key_id) == 1;
		sodium_memzero(key, sizeof(key));
		cJSON_Delete(j);
		reply_error(r, 500, "internal", NULL, "could not rewrite the engine's key file%s",
			    undone ? "" : "; the key's row could not be removed either");
		return;
	}
	snprintf(target, sizeof(target), "deployment/%lld/key/%lld", (long long)id, (long long)key_id);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "name", name);
	req_audit(r, "deployment.key_create", target, "ok", d);
	cJSON *root = cJSON_CreateObject();
	cJSON_AddNumberToObject(root, "id", (double)key_id);
	cJSON_AddStringToObject(root, "name", name);
	cJSON_AddStringToObject(root, "api_key", key);
	reply_json(r, 201, root);
	sodium_memzero(key, sizeof(key));
	cJSON_Delete(j);
}

static void
h_key_revoke(struct req *r)
{
	char target[80], err[APP_ERR_LEN];
	sqlite3_stmt *st;
	int64_t id = arg_id(r, 0, "deployment"), key_id;

	if (id < 0 || (key_id = arg_id(r, 1, "key")) < 0 || deploy_refuse_if_leader_owned(r, id))
		return;
	if (sqlite3_prepare_v2(r->a->db,
			       "UPDATE deployment_keys SET revoked_at = ?1 WHERE id = ?2 AND "
			       "deployment_id = ?3 AND revoked_at IS NULL",
			       -1, &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	sqlite3_bind_int64(st, 1, r->now);
	sqlite3_bind_int64(st, 2, key_id);
	sqlite3_bind_int64(st, 3, id);
	if (db_write(r->a->db, st, err) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "%s", err);
		return;
	}
	if (sqlite3_changes(r->a->db) == 0) {
		reply_error(r, 404, "not_found", NULL, "no active key %lld on deployment %lld", (long long)key_id,
			    (long long)id);
		return;
	}
	if (supervisor_keys_changed(r->a->sup, id) != 0) {
		reply_error(r, 500, "internal", NULL,
			    "the key is revoked in the store but the engine's key file "
			    "could not be rewritten; it is rewritten when the engine restarts");
		return;
	}
	snprintf(target, sizeof(target), "deployment/%lld/key/%lld", (long long)id, (long long)key_id);
	req_audit(r, "deployment.key_revoke", target, "ok", NULL);
	reply_empty(r, 204);
}

/* The last `lines` lines (query, default 200) of deployment id's engine
 * log on this node. */
void
deploy_reply_log(struct req *r, int64_t id)
{
	const char *q = query_arg(r, "lines");
	char path[4200], *end;
	long lines = q != NULL ? strtol(q, &end, 10) : 200;

	if (q != NULL && (*end != '\0' || lines < 1 || lines > 10000)) {
		reply_error(r, 422, "invalid_field", "lines", "lines must be an integer in 1..10000");
		return;
	}
	if (deploy_file(r->a, id, "engine.log", path, sizeof(path)) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "the engine log's path does not fit its buffer");
		return;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		reply_text(r, 200, "text/plain; charset=utf-8", strdup(""));
		return;
	}
	/* read at most 1 MiB from the end, then keep the last `lines` lines */
	off_t size = lseek(fd, 0, SEEK_END), from = size > (1 << 20) ? size - (1 << 20) : 0;
	char *buf = malloc((size_t)(size - from) + 1);
	ssize_t n = buf != NULL ? pread(fd, buf, (size_t)(size - from), from) : -1;
	close(fd);
	if (n < 0) {
		free(buf);
		reply_error(r, 500, "internal", NULL, "cannot read the engine log");
		return;
	}
	buf[n] = '\0';
	char *p = buf + n;
	long seen = 0;
	if (p > buf && p[-1] == '\n')
		p--;
	while (p > buf && seen < lines)
		if (*--p == '\n' && ++seen == lines)
			p++;
	char *out = strdup(p);
	free(buf);
	reply_text(r, 200, "text/plain; charset=utf-8", out);
}

/* The log of a deployment here, or, through its node, of one elsewhere. */
static void
h_logs(struct req *r)
{
	const char *q = query_arg(r, "lines"), *rq = query_arg(r, "rank");
	char base[700], pin[128], why[400], url[800], auth[128], *end;
	int64_t id = arg_id(r, 0, "deployment");
	long rank = 0;

	if (id < 0)
		return;
	if (q != NULL && (strtol(q, &end, 10) < 1 || *end != '\0' || strtol(q, NULL, 10) > 10000)) {
		reply_error(r, 422, "invalid_field", "lines", "lines must be an integer in 1..10000");
		return;
	}
	/* a split deployment's other ranks log on their own nodes */
	if (rq != NULL && ((rank = strtol(rq, &end, 10)) < 0 || *end != '\0' || rank > 4095)) {
		reply_error(r, 422, "invalid_field", "rank", "rank must be an integer in 0..4095");
		return;
	}
	int where = rank > 0 ? remote_rank_target(r->a, id, (int)rank, base, sizeof(base), pin, sizeof(pin), why,
						  sizeof(why))
			     : remote_target(r->a, id, 0, base, sizeof(base), pin, sizeof(pin), why, sizeof(why));
	if (where == APP_ENOTFOUND)
		reply_error(r, 404, "not_found", NULL, "%s", why);
	else if (where < 0)
		reply_error(r, 409, "not_ready", NULL, "%s", why);
	else if (where == 0)
		deploy_reply_log(r, id);
	else {
		if (str_fmt(url, sizeof(url), "%s/logs?lines=%s", base, q != NULL ? q : "200") != APP_OK ||
		    str_fmt(auth, sizeof(auth), "Bearer %s", r->a->relay_key) != APP_OK)
			reply_error(r, 500, "internal", NULL, "the node's URL is too long");
		else
			deploy_forward(r, url, auth, pin, 0, "the node running this deployment");
	}
}

/* Forward the request to the deployment's engine: here with the admin's
 * own key, or through the node that runs it with the relay key. */
static void
proxy(struct req *r, const char *engine_path, int post)
{
	char url[900], key[80], auth[128], base[700], pin[128], why[400], who[160];
	int64_t id = arg_id(r, 0, "deployment");
	int port;

	if (id < 0)
		return;
	int where = remote_target(r->a, id, 1, base, sizeof(base), pin, sizeof(pin), why, sizeof(why));
	if (where < 0) {
		reply_error(r, where == APP_ENOTFOUND ? 404 : 409, where == APP_ENOTFOUND ? "not_found" : "not_ready",
			    NULL, "%s", why);
		return;
	}
	if (where == 1) {
		snprintf(url, sizeof(url), "%s%s", base, engine_path);
		snprintf(auth, sizeof(auth), "Bearer %s", r->a->relay_key);
		snprintf(who, sizeof(who), "the node running deployment %lld", (long long)id);
		deploy_forward(r, url, auth, pin, post, who);
		sodium_memzero(auth, sizeof(auth)); /* libcurl has its own copy */
		return;
	}
	if (supervisor_endpoint(r->a->sup, id, &port, key, sizeof(key)) != 0) {
		reply_error(r, 409, "not_ready", NULL, "deployment %lld is not ready (see its state and reason)",
			    (long long)id);
		return;
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, engine_path);
	snprintf(auth, sizeof(auth), "Bearer %s", key);
	snprintf(who, sizeof(who), "deployment %lld's engine", (long long)id);
	deploy_forward(r, url, auth, NULL, post, who);
	sodium_memzero(key, sizeof(key));
	sodium_memzero(auth, sizeof(auth));
}

static void
h_chat(struct req *r)
{
	proxy(r, "/v1/chat/completions", 1);
}

static void
h_completions(struct req *r)
{
	proxy(r, "/v1/completions", 1);
}

static void
h_metrics(struct req *r)
{
	proxy(r, "/metrics", 0);
}

static void
h_models(struct req *r)
{
	proxy(r, "/v1/models", 0);
}

const struct route api_deploy_ops_routes[] = {
	{ "GET", "/api/v1/deployments/{id}/keys", ROLE_OPERATOR, 0, h_keys, NULL, NULL },
	{ "POST", "/api/v1/deployments/{id}/keys", ROLE_OPERATOR, 0, h_key_create, NULL, "deployment.key_create" },
	{ "DELETE", "/api/v1/deployments/{id}/keys/{key}", ROLE_OPERATOR, 0, h_key_revoke, NULL,
	  "deployment.key_revoke" },
	{ "GET", "/api/v1/deployments/{id}/logs", ROLE_OPERATOR, ROUTE_UNLOCKED, h_logs, NULL, NULL },
	{ "GET", "/api/v1/deployments/{id}/metrics", ROLE_VIEWER, ROUTE_UNLOCKED, h_metrics, NULL, NULL },
	{ "POST", "/api/v1/deployments/{id}/v1/chat/completions", ROLE_OPERATOR, ROUTE_UNLOCKED | ROUTE_READ_ONLY,
	  h_chat, NULL, NULL },
	{ "POST", "/api/v1/deployments/{id}/v1/completions", ROLE_OPERATOR, ROUTE_UNLOCKED | ROUTE_READ_ONLY,
	  h_completions, NULL, NULL },
	{ "GET", "/api/v1/deployments/{id}/v1/models", ROLE_OPERATOR, ROUTE_UNLOCKED, h_models, NULL, NULL },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
