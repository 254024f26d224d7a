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

struct upload {
	int fd;
	char tmp[PATH_MAX + 64];
	char name[160];
	char want_sha[65];
	crypto_hash_sha256_state h;
	int64_t bytes;
};

int
sha256_hex_ok(const char *s)
{
	return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

static void
discard(struct req *r)
{
	struct upload *u = r->stream;

	if (u == NULL)
		return;
	if (u->fd >= 0)
		close(u->fd);
	if (u->tmp[0] != '\0')
		unlink(u->tmp);
	free(u);
	r->stream = NULL;
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
upload_begin(struct req *r)
{
	const char *name = query_arg(r, "name"), *sha = query_arg(r, "sha256");
	const char *cl = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Content-Length");
	struct upload *u;

	if (name == NULL || !model_name_ok(name)) {
		reply_error(r, 422, "invalid_field", "name", "?name= must be 1-128 letters, digits, '.', '_', ':' or '-', "
			    "not starting with '.' or '-'");
		return;
	}
	if (sha != NULL && !sha256_hex_ok(sha)) {
		reply_error(r, 422, "invalid_field", "sha256", "?sha256= must be 64 lowercase hex digits");
		return;
	}
	if (cl != NULL && strtoll(cl, NULL, 10) > r->a->cfg.max_upload_bytes) {
		reply_error(r, 413, "too_large", NULL, "uploads are limited to %lld bytes",
			    (long long)r->a->cfg.max_upload_bytes);
		return;
	}
	if (name_taken(r->a, name)) {
		reply_error(r, 409, "conflict", "name", "a model named '%s' exists", name);
		return;
	}
	if ((u = calloc(1, sizeof(*u))) == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
		return;
	}
	snprintf(u->name, sizeof(u->name), "%s", name);
	snprintf(u->want_sha, sizeof(u->want_sha), "%s", sha != NULL ? sha : "");
	crypto_hash_sha256_init(&u->h);
	snprintf(u->tmp, sizeof(u->tmp), "%s/.upload-XXXXXX", r->a->models_dir);
	if ((u->fd = mkstemp(u->tmp)) < 0) {
		u->tmp[0] = '\0';
		r->stream = u;
		discard(r);
		reply_error(r, 500, "internal", NULL, "cannot create a file in %s: %s", r->a->models_dir, strerror(errno));
		return;
	}
	r->stream = u;
}

static int
upload_data(struct req *r, const char *buf, size_t n)
{
	struct upload *u = r->stream;

	if (u == NULL)
		return 1;
	if (u->bytes + (int64_t)n > r->a->cfg.max_upload_bytes) {
		discard(r);
		reply_error(r, 413, "too_large", NULL, "uploads are limited to %lld bytes",
			    (long long)r->a->cfg.max_upload_bytes);
		return 1;
	}
	crypto_hash_sha256_update(&u->h, (const unsigned char *)buf, n);
	for (size_t off = 0; off < n;) {
		ssize_t w = write(u->fd, buf + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			discard(r);
			reply_error(r, e == ENOSPC ? 507 : 500, e == ENOSPC ? "disk_full" : "internal", NULL,
				    "writing the upload: %s", strerror(e));
			return 1;
		}
		off += (size_t)w;
	}
	u->bytes += (int64_t)n;
	return 0;
}

static void
upload_end(struct req *r)
{
	struct upload *u = r->stream;
	unsigned char digest[crypto_hash_sha256_BYTES];
	char hex[65], final[PATH_MAX + 200], err[PRIVAI_ERR_LEN];
	struct model_meta m;
	int64_t id;
	int rc;

	if (u == NULL) {
		reply_error(r, 500, "internal", NULL, "the upload was already discarded");
		return;
	}
	crypto_hash_sha256_final(&u->h, digest);
	sodium_bin2hex(hex, sizeof(hex), digest, sizeof(digest));
	if (u->bytes == 0) {
		discard(r);
		reply_error(r, 422, "empty", NULL, "the upload is empty");
		return;
	}
	if (u->want_sha[0] != '\0' && strcmp(u->want_sha, hex) != 0) {
		reply_error(r, 422, "checksum_mismatch", "sha256", "the upload's SHA-256 is %s, not %s", hex, u->want_sha);
		discard(r);
		return;
	}
	if (fsync(u->fd) != 0) {
		discard(r);
		reply_error(r, 500, "internal", NULL, "fsync: %s", strerror(errno));
		return;
	}
	if ((rc = model_meta_read(u->tmp, &m, err)) != PRIVAI_OK) {
		discard(r);
		reply_error(r, 422, "bad_file", NULL, "not a usable GGUF file: %s", strchr(err, ':') ? strchr(err, ':') + 2 : err);
		return;
	}
	snprintf(final, sizeof(final), "%s/%s.gguf", r->a->models_dir, u->name);
	if (access(final, F_OK) == 0) {
		model_meta_free(&m);
		reply_error(r, 409, "conflict", "name", "a file %s.gguf is already in the model directory", u->name);
		discard(r);
		return;
	}
	rc = model_insert(r->a->db, u->name, final, "upload", u->bytes, hex, &m, r->now, &id, err);
	model_meta_free(&m);
	if (rc != PRIVAI_OK) {
		discard(r);
		reply_status(r, rc, "name", err);
		return;
	}
	if (rename(u->tmp, final) != 0) {
		db_delete_id(r->a->db, "models", id);
		discard(r);
		reply_error(r, 500, "internal", NULL, "cannot move the upload into place: %s", strerror(errno));
		return;
	}
	u->tmp[0] = '\0'; /* it is the model now */
	int dfd = open(r->a->models_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd); /* the rename itself survives a power cut */
		close(dfd);
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "bytes", (double)u->bytes);
	cJSON_AddStringToObject(d, "sha256", hex);
	req_audit(r, "model.upload", u->name, "ok", d);
	discard(r);
	reply_query(r, 201, "SELECT id, name, state, source, path, size_bytes, sha256, architecture, parameters, "
			    "quantization, context_length FROM models WHERE id = ?1", 1, &id, "model");
}

const struct stream_ops model_upload_ops = {
	.begin = upload_begin,
	.data = upload_data,
	.end = upload_end,
	.abort = discard,
};
