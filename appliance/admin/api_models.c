/*
 * /api/v1/models: register a GGUF from a directory the appliance allows
 * (--model-root), or by upload (api_upload.c); list, describe, delete;
 * size a model for a GPU type (sizing.c).  Every file is read with the
 * engine's validating GGUF reader before a row is written.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "privai/status.h"
#include "admin.h"
#include "db.h"
#include "httpd.h"
#include "models.h"
#include "rows.h"

#define MODEL_FIELDS                                                                                         \
	"SELECT id, name, state, source, path, size_bytes, sha256, architecture, parameters, quantization, "  \
	"context_length, n_layer, n_head, n_head_kv, head_dim, n_embd, n_vocab, kv_latent, tokenizer, "      \
	"chat_template IS NOT NULL AS has_chat_template, error, bytes_done, url, created_at, "               \
	"(SELECT count(*) FROM deployments d WHERE d.model_id = models.id) AS deployments"
#define MODEL_COLUMNS MODEL_FIELDS " FROM models"

int
model_name_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= 128 && s[0] != '.' && s[0] != '-' &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") == n;
}

int
model_name_clash(sqlite3 *db, const char *name, char *err)
{
	/* the reservation trigger's message (schema 6), or a second model */
	if (strstr(sqlite3_errmsg(db), "reserved by an upload") != NULL)
		return privai_fail(err, PRIVAI_EBUSY, "the name '%s' is reserved by an upload under way", name);
	return privai_fail(err, PRIVAI_EBUSY, "a model named '%s' exists", name);
}

int
model_insert(sqlite3 *db, const char *name, const char *path, const char *source, int64_t size, const char *sha256,
	     const struct model_meta *m, int64_t now, int64_t *ret_id, char *err)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db, "INSERT INTO models (name, path, size_bytes, sha256, architecture, parameters, "
				   "quantization, context_length, n_layer, n_head, n_head_kv, head_dim, tokenizer, "
				   "chat_template, source, created_at, n_embd, n_vocab, kv_latent, weight_bytes, state) "
				   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
				   "?18, ?19, ?20, 'ready')", -1, &st, NULL) != SQLITE_OK)
		return privai_fail(err, PRIVAI_EIO, "database: %s", sqlite3_errmsg(db));
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, size);
	sqlite3_bind_text(st, 4, sha256, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 5, m->architecture, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 6, m->parameters);
	sqlite3_bind_text(st, 7, m->quantization, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 8, m->context_length);
	sqlite3_bind_int(st, 9, m->n_layer);
	sqlite3_bind_int(st, 10, m->n_head);
	sqlite3_bind_int(st, 11, m->n_head_kv);
	sqlite3_bind_int(st, 12, m->head_dim);
	sqlite3_bind_text(st, 13, m->tokenizer, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 14, m->chat_template, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 15, source, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 16, now);
	sqlite3_bind_int(st, 17, m->n_embd);
	sqlite3_bind_int(st, 18, m->n_vocab);
	sqlite3_bind_int(st, 19, m->kv_latent);
	sqlite3_bind_int64(st, 20, m->weight_bytes);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_CONSTRAINT)
		return model_name_clash(db, name, err);
	if (rc != SQLITE_DONE)
		return privai_fail(err, PRIVAI_EIO, "database: %s", sqlite3_errmsg(db));
	*ret_id = sqlite3_last_insert_rowid(db);
	return PRIVAI_OK;
}

/* The real path of a model file inside an allowed root: no traversal,
 * no symlink out, a regular file named *.gguf. */
static int
allowed_path(struct admin *a, const char *path, char *real, int64_t *size, char *err)
{
	char root[PATH_MAX];
	struct stat sb;
	size_t n = strlen(path);

	if (path[0] != '/')
		return privai_fail(err, PRIVAI_EINVAL, "path must be absolute");
	if (n < 6 || strcmp(path + n - 5, ".gguf") != 0)
		return privai_fail(err, PRIVAI_EINVAL, "path must name a .gguf file");
	if (realpath(path, real) == NULL)
		return privai_fail(err, PRIVAI_EINVAL, "%s: %s", path, strerror(errno));
	for (int i = 0; i < a->cfg.n_model_roots; i++) {
		if (realpath(a->cfg.model_roots[i], root) == NULL)
			continue;
		size_t rn = strlen(root);
		if (strncmp(real, root, rn) == 0 && (real[rn] == '/' || root[rn - 1] == '/')) {
			if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode))
				return privai_fail(err, PRIVAI_EINVAL, "%s is not a regular file", path);
			*size = (int64_t)sb.st_size;
			return PRIVAI_OK;
		}
	}
	return privai_fail(err, PRIVAI_EINVAL, "%s is outside the model directories this appliance allows", path);
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

static void
h_register(struct req *r)
{
	static const char *const known[] = { "name", "path", "url", "sha256", NULL };
	char real[PATH_MAX], err[PRIVAI_ERR_LEN];
	struct model_meta m;
	const char *name, *path;
	int64_t size = 0, id;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 128, NULL)) == NULL)
		goto out;
	if (!model_name_ok(name)) {
		reply_error(r, 422, "invalid_field", "name", "a model name is 1-128 letters, digits, '.', '_', ':' or "
			    "'-', not starting with '.' or '-'");
		goto out;
	}
	if (cJSON_GetObjectItemCaseSensitive(j, "url") != NULL) {
		model_fetch_start(r, j, name);
		goto out;
	}
	if ((path = field_str(r, j, "path", 1, PATH_MAX - 1, NULL)) == NULL)
		goto out;
	int rc = allowed_path(r->a, path, real, &size, err);
	if (rc != PRIVAI_OK) {
		reply_status(r, rc, "path", err);
		goto out;
	}
	if ((rc = model_meta_read(real, &m, err)) != PRIVAI_OK) {
		reply_status(r, rc == PRIVAI_EIO ? PRIVAI_EINVAL : rc, "path", err);
		goto out;
	}
	rc = model_insert(r->a->db, name, real, "path", size, NULL, &m, r->now, &id, err);
	model_meta_free(&m);
	if (rc != PRIVAI_OK) {
		reply_status(r, rc, "name", err);
		goto out;
	}
	model_hash_kick(r->a); /* its SHA-256 follows in the background */
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "path", real);
	req_audit(r, "model.create", name, "ok", d);
	reply_query(r, 201, MODEL_COLUMNS " WHERE id = ?1", 1, &id, "model");
out:
	cJSON_Delete(j);
}

static void
h_delete(struct req *r)
{
	char path[PATH_MAX], source[16], name[160];
	sqlite3_stmt *st;
	int64_t id = arg_id(r, 0, "model");
	int found = 0, deployments = 0;

	if (id < 0)
		return;
	if (sqlite3_prepare_v2(r->a->db, "SELECT path, source, name, (SELECT count(*) FROM deployments d WHERE "
					 "d.model_id = m.id) FROM models m WHERE id = ?", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, id);
		if (sqlite3_step(st) == SQLITE_ROW) {
			found = 1;
			snprintf(path, sizeof(path), "%s", (const char *)sqlite3_column_text(st, 0));
			snprintf(source, sizeof(source), "%s", (const char *)sqlite3_column_text(st, 1));
			snprintf(name, sizeof(name), "%s", (const char *)sqlite3_column_text(st, 2));
			deployments = sqlite3_column_int(st, 3);
		}
		sqlite3_finalize(st);
	}
	if (!found) {
		reply_error(r, 404, "not_found", NULL, "no model %lld", (long long)id);
		return;
	}
	if (deployments > 0) {
		reply_error(r, 409, "in_use", NULL, "model %lld has %d deployment(s); delete them first", (long long)id,
			    deployments);
		return;
	}
	if (model_fetch_cancel(r->a, id)) {
		reply_error(r, 409, "importing", NULL, "model %lld is still downloading; it was asked to stop, "
			    "delete it again once it has failed", (long long)id);
		return;
	}
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

const struct route api_models_routes[] = {
	{ "GET", "/api/v1/models", ROLE_VIEWER, 0, h_list, NULL, NULL },
	{ "POST", "/api/v1/models", ROLE_OPERATOR, 0, h_register, NULL, "model.create" },
	{ "POST", "/api/v1/models/upload", ROLE_OPERATOR, ROUTE_STREAM, NULL, &model_upload_ops, "model.upload" },
	{ "GET", "/api/v1/models/{id}", ROLE_VIEWER, 0, h_get, NULL, NULL },
	{ "DELETE", "/api/v1/models/{id}", ROLE_OPERATOR, 0, h_delete, NULL, "model.delete" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
