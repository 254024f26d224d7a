/*
 * /api/v1/models: register a GGUF from a directory the appliance allows
 * (--model-root), by upload or by URL (models/download.c); list, describe, delete;
 * size a model for a GPU type (gpu/sizing.c).  Every file is read with the
 * engine's validating GGUF reader before a row is written.  A LoRA adapter
 * names the model it adapts (base_model) and is checked against it; the
 * running deployments of its base load it at once (deploy/lora_sync.c).
 */
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "store/db.h"
#include "http/httpd.h"
#include "models/models.h"
#include "store/rows.h"
#include "http/spool.h"
#include "deploy/deployments.h"
#include "api/uploads.h"

#define MODEL_FIELDS                                                                                                   \
	"SELECT id, name, state, source, path, size_bytes, sha256, architecture, parameters, quantization, "           \
	"context_length, n_layer, n_head, n_head_kv, head_dim, n_embd, n_vocab, kv_latent, tokenizer, "                \
	"chat_template IS NOT NULL AS has_chat_template, error, bytes_done, url, created_at, "                         \
	"(SELECT count(*) FROM deployments d WHERE d.model_id = models.id) AS deployments, kind, base_model_id, "      \
	"(SELECT b.name FROM models b WHERE b.id = models.base_model_id) AS base_model, lora_rank, lora_alpha, "       \
	"(SELECT count(*) FROM models l WHERE l.base_model_id = models.id) AS adapters"
#define MODEL_COLUMNS MODEL_FIELDS " FROM models"

/* The real path of a model file inside an allowed root: no traversal,
 * no symlink out, a regular file named *.gguf. */
static int
allowed_path(struct admin *a, const char *path, char *real, int64_t *size, char *err)
{
	char root[PATH_MAX];
	struct stat sb;
	size_t n = strlen(path);

	if (path[0] != '/')
		return app_fail(err, APP_EINVAL, "path must be absolute");
	if (n < 6 || strcmp(path + n - 5, ".gguf") != 0)
		return app_fail(err, APP_EINVAL, "path must name a .gguf file");
	if (realpath(path, real) == NULL)
		return app_fail(err, APP_EINVAL, "%s: %s", path, strerror(errno));
	for (int i = 0; i < a->cfg.n_model_roots; i++) {
		if (realpath(a->cfg.model_roots[i], root) == NULL)
			continue;
		size_t rn = strlen(root);
		if (strncmp(real, root, rn) == 0 && (real[rn] == '/' || root[rn - 1] == '/')) {
			if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode))
				return app_fail(err, APP_EINVAL, "%s is not a regular file", path);
			*size = (int64_t)sb.st_size;
			return APP_OK;
		}
	}
	return app_fail(err, APP_EINVAL, "%s is outside the model directories this appliance allows", path);
}

void
models_reply_row(struct req *r, unsigned status, int64_t id, int64_t base_id, const char *name, const char *path)
{
	int found, busy;
	cJSON *row = row_json(rows_prepare(r->a->db, MODEL_COLUMNS " WHERE id = ?1", 1, &id), &found);

	if (row == NULL) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	if (base_id > 0) {
		cJSON *sync = deploy_lora_sync(r->a, base_id, name, path, 1, &busy);
		if (sync != NULL)
			cJSON_AddItemToObject(row, "served_by", sync);
	}
	reply_json(r, status, row);
}

static void
h_list(struct req *r)
{
	reply_query(r, 200, MODEL_COLUMNS " ORDER BY id", 0, NULL, NULL);
}

static void
h_get(struct req *r)
{
	int64_t id = arg_id(r, 0, "model");

	if (id > 0)
		reply_query(r, 200, MODEL_FIELDS ", chat_template FROM models WHERE id = ?1", 1, &id, "model");
}

/* POST /api/v1/models with a "url": check it against the allowed hosts,
 * insert an 'importing' row and download in the background; replies. */
static void
model_fetch_start(struct req *r, const cJSON *body, const char *name, const char *base)
{
	char host[300], err[APP_ERR_LEN];
	const char *url, *sha;

	if ((url = field_str(r, body, "url", 1, 2048, NULL)) == NULL ||
	    (sha = field_str(r, body, "sha256", 0, 64, ""), r->status))
		return;
	if (cJSON_GetObjectItemCaseSensitive(body, "path") != NULL) {
		reply_error(r, 422, "invalid_field", "path", "give a path or a url, not both");
		return;
	}
	if (sha[0] != '\0' && !sha256_hex_ok(sha)) {
		reply_error(r, 422, "invalid_field", "sha256", "sha256 must be 64 lowercase hex digits");
		return;
	}
	if (model_url_host(url, host, sizeof(host)) < 0) {
		reply_error(r, 422, "invalid_field", "url", "url must be an http:// or https:// URL");
		return;
	}
	if (!model_url_host_allowed(r->a->db, host)) {
		reply_error(r, 403, "host_not_allowed", "url",
			    "%s is not in the model_url_hosts setting; an admin "
			    "names the servers models may come from",
			    host);
		return;
	}
	int64_t id, base_id = 0;
	int is_adapter = 0;
	if (base[0] != '\0' && (model_find(r->a->db, base, &base_id, &is_adapter) != APP_OK || is_adapter)) {
		reply_error(r, 422, "invalid_field", "base_model", "no ready model '%s' to adapt", base);
		return;
	}
	int rc = model_fetch_begin(r->a, name, url, sha, -1, NULL, NULL, base_id, r->now, 0, &id, err);
	if (rc != APP_OK) {
		reply_status(r, rc, "name", err);
		return;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "url", url);
	req_audit(r, "model.download_start", name, "ok", d);
	reply_query(r, 202, "SELECT id, name, state, source, url, bytes_done, created_at FROM models WHERE id = ?1", 1,
		    &id, "model");
}

static void
h_register(struct req *r)
{
	static const char *const known[] = { "name", "path", "url", "sha256", "base_model", NULL };
	char real[PATH_MAX], err[APP_ERR_LEN];
	struct model_meta m;
	const char *name, *path, *base;
	int64_t size = 0, id, base_id;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 128, NULL)) == NULL ||
	    (base = field_str(r, j, "base_model", 0, 128, ""), r->status))
		goto out;
	if (!model_name_ok(name)) {
		reply_error(r, 422, "invalid_field", "name",
			    "a model name is 1-128 letters, digits, '.', '_', ':' or "
			    "'-', not starting with '.' or '-'");
		goto out;
	}
	/* the route is unlocked: the file is checked and its GGUF metadata
	 * read (a vocabulary of 150k tokens and every tensor's entry) without
	 * the store's lock, which is taken for the row only */
	if (cJSON_GetObjectItemCaseSensitive(j, "url") != NULL) {
		pthread_mutex_lock(&r->a->db_mu);
		model_fetch_start(r, j, name, base);
		pthread_mutex_unlock(&r->a->db_mu);
		goto out;
	}
	if ((path = field_str(r, j, "path", 1, PATH_MAX - 1, NULL)) == NULL)
		goto out;
	int rc = allowed_path(r->a, path, real, &size, err);
	if (rc != APP_OK) {
		reply_status(r, rc, "path", err);
		goto out;
	}
	if ((rc = model_meta_read(real, &m, err)) != APP_OK) {
		reply_status(r, rc == APP_EIO ? APP_EINVAL : rc, "path", err);
		goto out;
	}
	pthread_mutex_lock(&r->a->db_mu);
	if ((rc = model_base_check(r->a->db, name, &m, real, base, &base_id, err)) != APP_OK) {
		model_meta_free(&m);
		reply_status(r, rc, "base_model", err);
		pthread_mutex_unlock(&r->a->db_mu);
		goto out;
	}
	rc = model_insert(r->a->db, name, real, "path", size, NULL, &m, base_id, r->now, &id, err);
	model_meta_free(&m);
	if (rc != APP_OK) {
		reply_status(r, rc, "name", err);
		pthread_mutex_unlock(&r->a->db_mu);
		goto out;
	}
	model_hash_kick(r->a); /* its SHA-256 follows in the background */
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "path", real);
	if (base_id > 0)
		cJSON_AddNumberToObject(d, "base_model_id", (double)base_id);
	req_audit(r, "model.create", name, "ok", d);
	models_reply_row(r, 201, id, base_id, name, real);
	pthread_mutex_unlock(&r->a->db_mu);
out:
	cJSON_Delete(j);
}

/* An adapter about to be deleted leaves the engines of its base first:
 * 0, or -1 after replying 409 when one still holds it (a request uses it,
 * or it did not answer), so that nothing serves an adapter that is gone. */
static int
unload_everywhere(struct req *r, int64_t id, int64_t base_id, const char *name)
{
	int busy;
	cJSON *sync = deploy_lora_sync(r->a, base_id, name, NULL, 0, &busy);
	const cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(sync, "failed"), 0);

	if (sync == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
		return -1;
	}
	if (f != NULL) {
		reply_error(r, 409, busy ? "in_use" : "unload_failed", NULL,
			    "adapter %lld is still loaded by deployment %lld (%s); try again%s", (long long)id,
			    (long long)cJSON_GetObjectItem(f, "deployment")->valuedouble,
			    cJSON_GetObjectItem(f, "error")->valuestring, busy ? " when its requests are done" : "");
		cJSON_Delete(sync);
		return -1;
	}
	cJSON_Delete(sync);
	return 0;
}

static void
h_delete(struct req *r)
{
	char path[PATH_MAX], source[16], name[160], state[16] = "", adapters[600] = "";
	sqlite3_stmt *st;
	int64_t id = arg_id(r, 0, "model"), base_id = 0;
	int found = 0, deployments = 0;

	if (id < 0)
		return;
	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT path, source, name, (SELECT count(*) FROM deployments d WHERE "
			       "d.model_id = m.id), state, coalesce(base_model_id, 0), (SELECT group_concat(name, "
			       "', ') FROM models l WHERE l.base_model_id = m.id) FROM models m WHERE id = ?",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		if (sqlite3_step(st) == SQLITE_ROW) {
			found = 1;
			snprintf(path, sizeof(path), "%s", (const char *)sqlite3_column_text(st, 0));
			snprintf(source, sizeof(source), "%s", (const char *)sqlite3_column_text(st, 1));
			snprintf(name, sizeof(name), "%s", (const char *)sqlite3_column_text(st, 2));
			deployments = sqlite3_column_int(st, 3);
			snprintf(state, sizeof(state), "%s",
				 sqlite3_column_text(st, 4) ? (const char *)sqlite3_column_text(st, 4) : "");
			base_id = sqlite3_column_int64(st, 5);
			msg_fmt(adapters, sizeof(adapters), "%s",
				sqlite3_column_text(st, 6) ? (const char *)sqlite3_column_text(st, 6) : "");
		}
		sqlite3_finalize(st);
	}
	if (!found) {
		reply_error(r, 404, "not_found", NULL, "no model %lld", (long long)id);
		return;
	}
	if (adapters[0] != '\0') {
		reply_error(r, 409, "in_use", NULL, "model %lld has LoRA adapters (%s); delete them first",
			    (long long)id, adapters);
		return;
	}
	if (deployments > 0) {
		reply_error(r, 409, "in_use", NULL, "model %lld has %d deployment(s); delete them first", (long long)id,
			    deployments);
		return;
	}
	/* a download that has marked its row failed or ready does nothing
	 * more to it, though its thread may not have ended yet */
	if (strcmp(state, "importing") == 0 && model_fetch_cancel(r->a, id)) {
		reply_error(r, 409, "importing", NULL,
			    "model %lld is still downloading; it was asked to stop, "
			    "delete it again once it has failed",
			    (long long)id);
		return;
	}
	if (base_id > 0 && strcmp(state, "ready") == 0 && unload_everywhere(r, id, base_id, name) < 0)
		return;
	if (db_delete_id(r->a->db, "models", id) < 0) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	/* files the appliance wrote itself go with the row; a registered
	 * path belongs to whoever put it there */
	if (strcmp(source, "path") != 0)
		unlink(path);
	req_audit(r, "model.delete", name, "ok", NULL);
	reply_empty(r, 204);
}

/*
 * POST /api/v1/models/upload?name=N[&sha256=HEX]: a GGUF streamed in the
 * request body to a temporary file beside the model directory, hashed as
 * it arrives, checked (size limit, checksum, GGUF reader), then synced and
 * renamed into place and registered.  A client that goes away, or any
 * failed check, leaves nothing behind: no file, no row.
 */
static int
name_taken(struct admin *a, const char *name)
{
	sqlite3_stmt *st;
	int taken = 0;

	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db, "SELECT 1 FROM models WHERE name = ?", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		taken = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&a->db_mu);
	return taken;
}

static void
model_upload_begin(struct req *r)
{
	const char *name = query_arg(r, "name");
	struct upload *u;

	if (name == NULL || !model_name_ok(name)) {
		reply_error(r, 422, "invalid_field", "name",
			    "?name= must be 1-128 letters, digits, '.', '_', ':' or '-', "
			    "not starting with '.' or '-'");
		return;
	}
	if (name_taken(r->a, name)) {
		reply_error(r, 409, "conflict", "name", "a model named '%s' exists", name);
		return;
	}
	const char *base = query_arg(r, "base_model");
	if (base != NULL && strlen(base) > 128) {
		reply_error(r, 422, "invalid_field", "base_model", "?base_model= is a model's name or id");
		return;
	}
	if ((u = upload_begin_in(r, r->a->models_dir, r->a->cfg.max_upload_bytes)) != NULL) {
		snprintf(u->name, sizeof(u->name), "%s", name);
		snprintf(u->base, sizeof(u->base), "%s", base != NULL ? base : "");
	}
}

static void
model_upload_end(struct req *r)
{
	struct upload *u;
	char hex[65], final[PATH_MAX + 200], err[APP_ERR_LEN];
	struct model_meta m;
	int64_t id, base_id;
	int rc;

	if ((u = upload_finish(r, hex)) == NULL)
		return;
	if ((rc = model_meta_read(u->sp.tmp, &m, err)) != APP_OK) {
		upload_discard(r);
		reply_error(r, 422, "bad_file", NULL, "not a usable GGUF file: %s",
			    strchr(err, ':') ? strchr(err, ':') + 2 : err);
		return;
	}
	if (str_fmt(final, sizeof(final), "%s/%s.gguf", r->a->models_dir, u->name) != APP_OK) {
		model_meta_free(&m);
		reply_error(r, 500, "internal", NULL, "the model file's path is too long");
		upload_discard(r);
		return;
	}
	if (access(final, F_OK) == 0) {
		model_meta_free(&m);
		reply_error(r, 409, "conflict", "name", "a file %s.gguf is already in the model directory", u->name);
		upload_discard(r);
		return;
	}
	if ((rc = model_base_check(r->a->db, u->name, &m, u->sp.tmp, u->base, &base_id, err)) != APP_OK) {
		model_meta_free(&m);
		upload_discard(r);
		reply_status(r, rc, "base_model", err);
		return;
	}
	rc = model_insert(r->a->db, u->name, final, "upload", u->sp.bytes, hex, &m, base_id, r->now, &id, err);
	model_meta_free(&m);
	if (rc != APP_OK) {
		upload_discard(r);
		reply_status(r, rc, "name", err);
		return;
	}
	if (spool_commit(&u->sp, final, err) != 0) {
		/* a row for a file that is not there would be served as ready */
		if (db_delete_id(r->a->db, "models", id) != 1)
			log_error("model %lld (%s): registered, but its file failed and its row stays: %s",
				  (long long)id, final, sqlite3_errmsg(r->a->db));
		upload_discard(r);
		reply_error(r, 500, "internal", NULL, "%s", err);
		return;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "bytes", (double)u->sp.bytes);
	cJSON_AddStringToObject(d, "sha256", hex);
	req_audit(r, "model.upload", u->name, "ok", d);
	char uname[sizeof(u->name)];
	snprintf(uname, sizeof(uname), "%s", u->name);
	upload_discard(r);
	models_reply_row(r, 201, id, base_id, uname, final);
}

static const struct stream_ops model_upload_ops = {
	.begin = model_upload_begin,
	.data = upload_data,
	.end = model_upload_end,
	.abort = upload_discard,
};

const struct route api_models_routes[] = {
	{ "GET", "/api/v1/models", ROLE_VIEWER, 0, h_list, NULL, NULL },
	{ "POST", "/api/v1/models", ROLE_OPERATOR, ROUTE_UNLOCKED, h_register, NULL, "model.create" },
	{ "POST", "/api/v1/models/upload", ROLE_OPERATOR, ROUTE_STREAM, NULL, &model_upload_ops, "model.upload" },
	{ "GET", "/api/v1/models/{id}", ROLE_VIEWER, 0, h_get, NULL, NULL },
	{ "DELETE", "/api/v1/models/{id}", ROLE_OPERATOR, 0, h_delete, NULL, "model.delete" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
