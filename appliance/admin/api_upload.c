/*
 * POST /api/v1/models/upload?name=N[&sha256=HEX]: a GGUF streamed in the
 * request body to a temporary file beside the model directory, hashed as
 * it arrives, checked (size limit, checksum, GGUF reader), then synced and
 * renamed into place and registered.  A client that goes away, or any
 * failed check, leaves nothing behind: no file, no row.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
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
#include "spool.h"

int
sha256_hex_ok(const char *s)
{
	return s != NULL && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

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
		reply_error(r, 422, "invalid_field", "name", "?name= must be 1-128 letters, digits, '.', '_', ':' or '-', "
			    "not starting with '.' or '-'");
		return;
	}
	if (name_taken(r->a, name)) {
		reply_error(r, 409, "conflict", "name", "a model named '%s' exists", name);
		return;
	}
	if ((u = upload_begin_in(r, r->a->models_dir, r->a->cfg.max_upload_bytes)) != NULL)
		snprintf(u->name, sizeof(u->name), "%s", name);
}

static void
model_upload_end(struct req *r)
{
	struct upload *u;
	char hex[65], final[PATH_MAX + 200], err[PRIVAI_ERR_LEN];
	struct model_meta m;
	int64_t id;
	int rc;

	if ((u = upload_finish(r, hex)) == NULL)
		return;
	if ((rc = model_meta_read(u->sp.tmp, &m, err)) != PRIVAI_OK) {
		upload_discard(r);
		reply_error(r, 422, "bad_file", NULL, "not a usable GGUF file: %s", strchr(err, ':') ? strchr(err, ':') + 2 : err);
		return;
	}
	snprintf(final, sizeof(final), "%s/%s.gguf", r->a->models_dir, u->name);
	if (access(final, F_OK) == 0) {
		model_meta_free(&m);
		reply_error(r, 409, "conflict", "name", "a file %s.gguf is already in the model directory", u->name);
		upload_discard(r);
		return;
	}
	rc = model_insert(r->a->db, u->name, final, "upload", u->sp.bytes, hex, &m, r->now, &id, err);
	model_meta_free(&m);
	if (rc != PRIVAI_OK) {
		upload_discard(r);
		reply_status(r, rc, "name", err);
		return;
	}
	if (spool_commit(&u->sp, final, err) != 0) {
		db_delete_id(r->a->db, "models", id);
		upload_discard(r);
		reply_error(r, 500, "internal", NULL, "%s", err);
		return;
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "bytes", (double)u->sp.bytes);
	cJSON_AddStringToObject(d, "sha256", hex);
	req_audit(r, "model.upload", u->name, "ok", d);
	upload_discard(r);
	reply_query(r, 201, "SELECT id, name, state, source, path, size_bytes, sha256, architecture, parameters, "
			    "quantization, context_length FROM models WHERE id = ?1", 1, &id, "model");
}

const struct stream_ops model_upload_ops = {
	.begin = model_upload_begin,
	.data = upload_data,
	.end = model_upload_end,
	.abort = upload_discard,
};
