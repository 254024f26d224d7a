/*
 * Resumable model uploads, for GGUF files of tens of gigabytes over links
 * that drop:
 *
 *   POST   /api/v1/uploads          {name, size, sha256?}: 201, received 0
 *   GET    /api/v1/uploads          the uploads under way
 *   GET    /api/v1/uploads/{id}     one; `received` is where to go on from
 *   PUT    /api/v1/uploads/{id}?offset=N   bytes N.. of the file (streamed)
 *   DELETE /api/v1/uploads/{id}     given up: the row and the bytes go
 *
 * A PUT may carry any part of what is left.  The one that brings the last
 * byte finishes the upload: the SHA-256 (against the one promised), the
 * GGUF reader, then the file is renamed into place and the model row made
 * in one transaction, and the reply is the model (201).  Any earlier one
 * answers 200 with the upload.
 *
 * The bytes go to STATE/models/.part-ID.  When a request ends, whole or
 * cut off, the file is synced and only then are `received` and the
 * SHA-256 state stored; a PUT begins by truncating the file to `received`,
 * so an admin restart or a power cut loses at most the request in
 * flight, and a resume never hashes again what was kept.  The name is
 * reserved from the start (a trigger stops any other model taking it).
 * An upload untouched for UPLOAD_IDLE_S is removed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "store/db.h"
#include "store/tasks.h"
#include "http/httpd.h"
#include "models/meta.h"
#include "models/models.h"
#include "api/uploads.h"

#define UPLOAD_IDLE_S (72 * 3600)
#define UPLOAD_FIELDS                                                                                                  \
	"id, name, size_bytes, received, sha256, created_by, created_at, updated_at, "                                 \
	"updated_at + 259200 AS expires_at, base_model FROM uploads"

_Static_assert(sizeof(((struct admin *)0)->uploads_busy) / sizeof(int64_t) == UPLOADS_MAX, "one busy slot per upload");
_Static_assert(UPLOAD_IDLE_S == 259200, "expires_at in UPLOAD_FIELDS");

/* A PUT in progress (r->stream). */
struct put {
	int64_t id, size;
	int64_t kept;     /* synced and stored: `received` in the row */
	int64_t received; /* written so far */
	int fd;
	crypto_hash_sha256_state h; /* over the first `received` bytes */
	char name[160], want_sha[65];
	int64_t shown_ms; /* when the task's progress was last stored */
};

/* The task of upload id ("upload:ID"). */
static void
task_ref(int64_t id, char *ref, size_t size)
{
	snprintf(ref, size, "upload:%lld", (long long)id);
}

/* STATE/models/.part-ID; APP_ERANGE when it does not fit. */
static int
part_path(const struct admin *a, int64_t id, char *buf, size_t size)
{
	return str_fmt(buf, size, "%s/.part-%lld", a->models_dir, (long long)id);
}

/* The busy slots: the caller holds the store's mutex. */
static int
busy(const struct admin *a, int64_t id)
{
	for (int i = 0; i < UPLOADS_MAX; i++)
		if (a->uploads_busy[i] == id)
			return 1;
	return 0;
}

static void
busy_set(struct admin *a, int64_t id, int on)
{
	for (int i = 0; i < UPLOADS_MAX; i++)
		if (a->uploads_busy[i] == (on ? 0 : id)) {
			a->uploads_busy[i] = on ? id : 0;
			return;
		}
}

/* Its bytes and row go; its task ends, failed, saying why. */
static void
upload_remove(struct admin *a, int64_t id, const char *why)
{
	char path[PATH_MAX + 64], ref[40];

	task_ref(id, ref, sizeof(ref));
	task_finish(a->db, ref, 0, why, admin_now());
	if (part_path(a, id, path, sizeof(path)) == APP_OK)
		unlink(path);
	if (db_delete_id(a->db, "uploads", id) < 0)
		log_warn("upload %lld: file removed, row stays: %s", (long long)id, sqlite3_errmsg(a->db));
}

void
uploads_sweep(struct admin *a, int64_t now, int at_start)
{
	sqlite3_stmt *st;
	int64_t stale[64];
	int n = 0;

	if (sqlite3_prepare_v2(a->db, "SELECT id FROM uploads WHERE updated_at < ?1", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, now - UPLOAD_IDLE_S);
		while (n < 64 && sqlite3_step(st) == SQLITE_ROW)
			stale[n++] = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	for (int i = 0; i < n; i++)
		if (!busy(a, stale[i]))
			upload_remove(a, stale[i], "untouched for 72 hours: removed");
	if (!at_start)
		return;
	/* a row whose file is gone cannot go on; a file with no row is a crash's */
	if (sqlite3_prepare_v2(a->db, "SELECT id FROM uploads", -1, &st, NULL) == SQLITE_OK) {
		n = 0;
		while (n < 64 && sqlite3_step(st) == SQLITE_ROW)
			stale[n++] = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
		for (int i = 0; i < n; i++) {
			char path[PATH_MAX + 64];
			if (part_path(a, stale[i], path, sizeof(path)) == APP_OK && access(path, F_OK) != 0 &&
			    db_delete_id(a->db, "uploads", stale[i]) < 0)
				log_warn("upload %lld has no file and its row stays: %s", (long long)stale[i],
					 sqlite3_errmsg(a->db));
		}
	}
	DIR *d = opendir(a->models_dir);
	struct dirent *e;
	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		char path[PATH_MAX + 300], *end;
		long long id;
		if (strncmp(e->d_name, ".part-", 6) != 0)
			continue;
		id = strtoll(e->d_name + 6, &end, 10);
		if (*end == '\0' && id > 0 &&
		    sqlite3_prepare_v2(a->db, "SELECT 1 FROM uploads WHERE id = ?1", -1, &st, NULL) == SQLITE_OK) {
			sqlite3_bind_int64(st, 1, id);
			int known = sqlite3_step(st) == SQLITE_ROW;
			sqlite3_finalize(st);
			if (known)
				continue;
		}
		if (str_fmt(path, sizeof(path), "%s/%s", a->models_dir, e->d_name) == APP_OK)
			unlink(path);
	}
	closedir(d);
}

static int64_t
upload_count(sqlite3 *db, const char *where_name, int64_t *holder)
{
	sqlite3_stmt *st;
	int64_t n = 0;

	*holder = 0;
	if (sqlite3_prepare_v2(db, "SELECT count(*), max(CASE WHEN name = ?1 THEN id END) FROM uploads", -1, &st,
			       NULL) != SQLITE_OK)
		return APP_EIO;
	sqlite3_bind_text(st, 1, where_name, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW) {
		n = sqlite3_column_int64(st, 0);
		*holder = sqlite3_column_int64(st, 1);
	}
	sqlite3_finalize(st);
	return n;
}

static int
model_named(sqlite3 *db, const char *name)
{
	sqlite3_stmt *st;
	int found = 0;

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM models WHERE name = ?1", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		found = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	return found;
}

static void
h_create(struct req *r)
{
	static const char *const known[] = { "name", "size", "sha256", "base_model", NULL };
	char path[PATH_MAX + 64], target[200];
	const char *name, *sha, *base;
	int64_t size, holder, id;
	struct statvfs vfs;
	sqlite3_stmt *st;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 128, NULL)) == NULL ||
	    field_int(r, j, "size", 1, 1, r->a->cfg.max_upload_bytes, 0, &size) < 0 ||
	    (sha = field_str(r, j, "sha256", 0, 64, "")) == NULL ||
	    (base = field_str(r, j, "base_model", 0, 128, "")) == NULL)
		goto out;
	if (!model_name_ok(name)) {
		reply_error(r, 422, "invalid_field", "name",
			    "name must be 1-128 letters, digits, '.', '_', ':' or '-', "
			    "not starting with '.' or '-'");
		goto out;
	}
	if (sha[0] != '\0' && !sha256_hex_ok(sha)) {
		reply_error(r, 422, "invalid_field", "sha256", "sha256 must be 64 lowercase hex digits");
		goto out;
	}
	uploads_sweep(r->a, r->now, 0);
	int64_t n = upload_count(r->a->db, name, &holder);
	if (str_fmt(path, sizeof(path), "%s/%s.gguf", r->a->models_dir, name) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "the model file's path is too long");
	} else if (model_named(r->a->db, name)) {
		reply_error(r, 409, "conflict", "name", "a model named '%s' exists", name);
	} else if (holder > 0) {
		reply_error(r, 409, "conflict", "name",
			    "upload %lld for '%s' is under way: go on with it, or delete it", (long long)holder, name);
	} else if (n >= UPLOADS_MAX) {
		reply_error(r, 409, "too_many", NULL, "%d uploads are under way; finish or delete one first",
			    UPLOADS_MAX);
	} else if (access(path, F_OK) == 0) {
		reply_error(r, 409, "conflict", "name", "a file %s.gguf is already in the model directory", name);
	} else if (statvfs(r->a->models_dir, &vfs) == 0 && (int64_t)(vfs.f_bavail * vfs.f_frsize) < size) {
		reply_error(r, 507, "disk_full", "size",
			    "the model directory has %lld bytes free; the upload needs %lld",
			    (long long)(vfs.f_bavail * vfs.f_frsize), (long long)size);
	} else if (sqlite3_prepare_v2(r->a->db,
				      "INSERT INTO uploads (name, size_bytes, sha256, created_by, created_at, "
				      "updated_at, base_model) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)",
				      -1, &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
	} else {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, size);
		if (sha[0] != '\0')
			sqlite3_bind_text(st, 3, sha, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 4, r->authed ? r->who.name : "anonymous", -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 5, r->now);
		if (base[0] != '\0')
			sqlite3_bind_text(st, 6, base, -1, SQLITE_TRANSIENT);
		int rc = sqlite3_step(st);
		sqlite3_finalize(st);
		id = sqlite3_last_insert_rowid(r->a->db);
		int named = rc == SQLITE_DONE && part_path(r->a, id, path, sizeof(path)) == APP_OK;
		int fd = named ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
		if (fd < 0) {
			if (rc == SQLITE_DONE && db_delete_id(r->a->db, "uploads", id) < 0)
				log_warn("upload %lld never started and its row stays (swept when idle): %s",
					 (long long)id, sqlite3_errmsg(r->a->db));
			reply_error(r, 500, "internal", NULL, "cannot start the upload: %s",
				    rc != SQLITE_DONE ? sqlite3_errmsg(r->a->db)
				    : named           ? strerror(errno)
						      : "the part file's path is too long");
			goto out;
		}
		close(fd);
		cJSON *d = cJSON_CreateObject();
		cJSON_AddNumberToObject(d, "size", (double)size);
		snprintf(target, sizeof(target), "upload/%lld (%s)", (long long)id, name);
		req_audit(r, "model.upload_begin", target, "ok", d);
		char ref[40];
		task_ref(id, ref, sizeof(ref));
		task_begin(r->a->db, "upload", ref, name, r->who.name, r->now);
		task_update(r->a->db, ref, 0, "waiting for the bytes", r->now);
		reply_query(r, 201, "SELECT " UPLOAD_FIELDS " WHERE id = ?1", 1, &id, "upload");
	}
out:
	cJSON_Delete(j);
}

static void
h_list(struct req *r)
{
	uploads_sweep(r->a, r->now, 0);
	reply_query(r, 200, "SELECT " UPLOAD_FIELDS " ORDER BY id", 0, NULL, NULL);
}

static void
h_get(struct req *r)
{
	int64_t id = arg_id(r, 0, "upload");

	if (id > 0)
		reply_query(r, 200, "SELECT " UPLOAD_FIELDS " WHERE id = ?1", 1, &id, "upload");
}

static void
h_delete(struct req *r)
{
	int64_t id = arg_id(r, 0, "upload");
	char target[64];

	if (id < 0)
		return;
	if (busy(r->a, id)) {
		reply_error(r, 409, "busy", NULL, "a request is sending upload %lld now; delete it when that ends",
			    (long long)id);
		return;
	}
	char why[120];
	snprintf(why, sizeof(why), "discarded by %s", r->who.name);
	upload_remove(r->a, id, why);
	if (sqlite3_changes(r->a->db) == 0) {
		reply_error(r, 404, "not_found", NULL, "no upload %lld", (long long)id);
		return;
	}
	snprintf(target, sizeof(target), "upload/%lld", (long long)id);
	req_audit(r, "model.upload_abort", target, "ok", NULL);
	reply_empty(r, 204);
}

/* Sync what arrived, then store it as kept (the store's mutex is taken
 * here); on a failed sync the row keeps the last kept offset, and the
 * next PUT truncates back to it. */
static void
put_keep(struct admin *a, struct put *p, int64_t now)
{
	sqlite3_stmt *st;

	if (p->received == p->kept || fsync(p->fd) != 0)
		return;
	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "UPDATE uploads SET received = ?1, hash_state = ?2, updated_at = ?3 "
			       "WHERE id = ?4",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, p->received);
		sqlite3_bind_blob(st, 2, &p->h, sizeof(p->h), SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, now);
		sqlite3_bind_int64(st, 4, p->id);
		if (sqlite3_step(st) == SQLITE_DONE)
			p->kept = p->received;
		sqlite3_finalize(st);
	}
	char ref[40], line[120];
	task_ref(p->id, ref, sizeof(ref));
	snprintf(line, sizeof(line), "%lld of %lld bytes kept", (long long)p->kept, (long long)p->size);
	task_update(a->db, ref, (double)p->kept / (double)p->size, line, now);
	pthread_mutex_unlock(&a->db_mu);
}

/* End a PUT: keep what arrived, free the upload for the next request. */
static void
put_close(struct req *r)
{
	struct put *p = r->stream;

	if (p == NULL)
		return;
	if (p->fd >= 0) {
		put_keep(r->a, p, admin_now());
		close(p->fd);
	}
	pthread_mutex_lock(&r->a->db_mu);
	busy_set(r->a, p->id, 0);
	pthread_mutex_unlock(&r->a->db_mu);
	sodium_memzero(p, sizeof(*p));
	free(p);
	r->stream = NULL;
}

/* Hash the first n bytes of fd again (a row from before the state was
 * kept, or a state of another size): 0 or -1. */
static int
rehash(int fd, int64_t n, crypto_hash_sha256_state *h)
{
	enum { BUF = 1 << 16 };
	char *b = malloc(BUF);

	crypto_hash_sha256_init(h);
	if (b == NULL)
		return APP_EIO;
	for (int64_t off = 0; off < n;) {
		ssize_t got = pread(fd, b, (size_t)(n - off < BUF ? n - off : BUF), off);
		if (got <= 0) {
			free(b);
			return APP_EIO;
		}
		crypto_hash_sha256_update(h, (unsigned char *)b, (size_t)got);
		off += got;
	}
	free(b);
	return 0;
}

static void
put_begin(struct req *r)
{
	const char *q = query_arg(r, "offset");
	const char *cl = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Content-Length");
	int64_t id = arg_id(r, 0, "upload"), offset;
	char path[PATH_MAX + 64], *end;
	struct put *p = NULL;
	sqlite3_stmt *st;
	int state_ok = 0;

	if (id < 0)
		return;
	offset = q != NULL ? strtoll(q, &end, 10) : -1;
	if (q == NULL || *q == '\0' || *end != '\0' || offset < 0) {
		reply_error(r, 422, "invalid_field", "offset",
			    "?offset= must be the byte the body starts at "
			    "(the upload's `received`)");
		return;
	}
	pthread_mutex_lock(&r->a->db_mu);
	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT name, size_bytes, coalesce(sha256, ''), received, hash_state "
			       "FROM uploads WHERE id = ?1",
			       -1, &st, NULL) != SQLITE_OK) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		goto unlock;
	}
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) != SQLITE_ROW) {
		reply_error(r, 404, "not_found", NULL, "no upload %lld (finished, deleted, or idle too long)",
			    (long long)id);
	} else if (busy(r->a, id)) {
		reply_error(r, 409, "busy", NULL, "another request is sending upload %lld now", (long long)id);
	} else if (offset != sqlite3_column_int64(st, 3)) {
		reply_error(r, 409, "offset_mismatch", "offset",
			    "upload %lld has kept %lld bytes: send from there, not "
			    "from %lld",
			    (long long)id, (long long)sqlite3_column_int64(st, 3), (long long)offset);
	} else if (cl != NULL && offset + strtoll(cl, NULL, 10) > sqlite3_column_int64(st, 1)) {
		reply_error(r, 413, "too_large", NULL, "upload %lld is %lld bytes; this body would end at byte %lld",
			    (long long)id, (long long)sqlite3_column_int64(st, 1),
			    (long long)(offset + strtoll(cl, NULL, 10)));
	} else if ((p = calloc(1, sizeof(*p))) == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
	} else {
		p->id = id;
		p->fd = -1;
		snprintf(p->name, sizeof(p->name), "%s", (const char *)sqlite3_column_text(st, 0));
		p->size = sqlite3_column_int64(st, 1);
		snprintf(p->want_sha, sizeof(p->want_sha), "%s", (const char *)sqlite3_column_text(st, 2));
		p->kept = p->received = offset;
		if (sqlite3_column_bytes(st, 4) == (int)sizeof(p->h)) {
			memcpy(&p->h, sqlite3_column_blob(st, 4), sizeof(p->h));
			state_ok = 1;
		}
		busy_set(r->a, id, 1);
		r->stream = p;
		char ref[40], line[120];
		task_ref(id, ref, sizeof(ref));
		/* a task ended by a restart goes on as a new one */
		task_begin(r->a->db, "upload", ref, p->name, r->who.name, r->now);
		snprintf(line, sizeof(line), "a part from byte %lld", (long long)offset);
		task_update(r->a->db, ref, (double)offset / (double)p->size, line, r->now);
	}
	sqlite3_finalize(st);
unlock:
	pthread_mutex_unlock(&r->a->db_mu);
	if (p == NULL)
		return;
	/* past `received` is what a cut-off request wrote but never kept */
	if (part_path(r->a, id, path, sizeof(path)) != APP_OK || (p->fd = open(path, O_RDWR | O_CLOEXEC)) < 0 ||
	    ftruncate(p->fd, offset) != 0 || lseek(p->fd, offset, SEEK_SET) != offset ||
	    (!state_ok && (offset == 0 ? crypto_hash_sha256_init(&p->h) : rehash(p->fd, offset, &p->h)) != 0)) {
		reply_error(r, 500, "internal", NULL, "cannot go on with upload %lld: %s", (long long)id,
			    strerror(errno));
		put_close(r);
		return;
	}
}

static int
put_data(struct req *r, const char *buf, size_t n)
{
	struct put *p = r->stream;

	if (p == NULL)
		return 1;
	if (p->received + (int64_t)n > p->size) {
		reply_error(r, 413, "too_large", NULL, "upload %lld is %lld bytes; the body goes past the end",
			    (long long)p->id, (long long)p->size);
		put_close(r);
		return 1;
	}
	for (size_t off = 0; off < n;) {
		ssize_t w = write(p->fd, buf + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			/* this chunk is not counted: what it wrote past
			 * `received` is cut off by the next PUT */
			int e = w < 0 ? errno : EIO;
			reply_error(r, e == ENOSPC ? 507 : 500, e == ENOSPC ? "disk_full" : "internal", NULL,
				    "writing upload %lld: %s", (long long)p->id, strerror(e));
			put_close(r);
			return 1;
		}
		off += (size_t)w;
	}
	crypto_hash_sha256_update(&p->h, (const unsigned char *)buf, n);
	p->received += (int64_t)n;
	int64_t ms = admin_mono_ms();
	if (ms - p->shown_ms >= 1000) { /* the task view's progress, without a write per chunk */
		char ref[40];
		p->shown_ms = ms;
		task_ref(p->id, ref, sizeof(ref));
		pthread_mutex_lock(&r->a->db_mu);
		task_update(r->a->db, ref, (double)p->received / (double)p->size, NULL, admin_now());
		pthread_mutex_unlock(&r->a->db_mu);
	}
	return 0;
}

/* The last byte is in: check it all, then make it a model.  The store's
 * mutex is held. */
static void
put_finish(struct req *r, struct put *p)
{
	unsigned char digest[crypto_hash_sha256_BYTES];
	char hex[65], part[PATH_MAX + 64], final[PATH_MAX + 200], err[APP_ERR_LEN], target[200];
	struct model_meta m;
	int64_t model_id, base_id;
	char base[160] = "";
	sqlite3_stmt *st;
	int rc;

	crypto_hash_sha256_final(&p->h, digest);
	sodium_bin2hex(hex, sizeof(hex), digest, sizeof(digest));
	snprintf(target, sizeof(target), "upload/%lld (%s)", (long long)p->id, p->name);
	if (part_path(r->a, p->id, part, sizeof(part)) != APP_OK ||
	    str_fmt(final, sizeof(final), "%s/%s.gguf", r->a->models_dir, p->name) != APP_OK) {
		reply_error(r, 500, "internal", NULL, "upload %lld: the model file's path is too long",
			    (long long)p->id);
		return;
	}
	/* a whole file that fails a check cannot be mended by sending more */
	if (p->want_sha[0] != '\0' && strcmp(hex, p->want_sha) != 0) {
		reply_error(r, 422, "checksum_mismatch", "sha256", "upload %lld's SHA-256 is %s, not %s; it is removed",
			    (long long)p->id, hex, p->want_sha);
		upload_remove(r->a, p->id, r->error);
		return;
	}
	if ((rc = model_meta_read(part, &m, err)) != APP_OK) {
		reply_error(r, 422, "bad_file", NULL, "not a usable GGUF file: %s; upload %lld is removed",
			    strchr(err, ':') ? strchr(err, ':') + 2 : err, (long long)p->id);
		upload_remove(r->a, p->id, r->error);
		return;
	}
	if (access(final, F_OK) == 0) {
		model_meta_free(&m);
		reply_error(r, 409, "conflict", "name",
			    "a file %s.gguf is already in the model directory; delete "
			    "upload %lld or move the file",
			    p->name, (long long)p->id);
		return;
	}
	if (sqlite3_prepare_v2(r->a->db, "SELECT base_model FROM uploads WHERE id = ?", -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, p->id);
		if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
			snprintf(base, sizeof(base), "%s", (const char *)sqlite3_column_text(st, 0));
		sqlite3_finalize(st);
	}
	/* an adapter whose base is gone (or a file that is not the adapter
	 * it was said to be) cannot be mended by sending more */
	if ((rc = model_base_check(r->a->db, p->name, &m, part, base, &base_id, err)) != APP_OK) {
		model_meta_free(&m);
		reply_error(r, 422, "invalid_field", "base_model", "%s; upload %lld is removed", err, (long long)p->id);
		upload_remove(r->a, p->id, r->error);
		return;
	}
	if (db_begin(r->a->db) != SQLITE_OK) {
		model_meta_free(&m);
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	/* the row goes first: it is what reserves the name */
	if (db_delete_id(r->a->db, "uploads", p->id) < 0)
		rc = app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(r->a->db));
	else
		rc = model_insert(r->a->db, p->name, final, "upload", p->size, hex, &m, base_id, r->now, &model_id,
				  err);
	model_meta_free(&m);
	if (rc != APP_OK) {
		db_rollback(r->a->db);
		reply_status(r, rc, "name", err);
		return;
	}
	if (rename(part, final) != 0) {
		db_rollback(r->a->db);
		reply_error(r, 500, "internal", NULL, "cannot move upload %lld into place: %s", (long long)p->id,
			    strerror(errno));
		return;
	}
	if (db_commit(r->a->db) != SQLITE_OK) {
		rename(final, part);
		db_rollback(r->a->db);
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	int dfd = open(r->a->models_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd); /* the rename survives a power cut */
		close(dfd);
	}
	cJSON *d = cJSON_CreateObject();
	cJSON_AddNumberToObject(d, "bytes", (double)p->size);
	cJSON_AddStringToObject(d, "sha256", hex);
	req_audit(r, "model.upload", target, "ok", d);
	char ref[40], result[400];
	task_ref(p->id, ref, sizeof(ref));
	snprintf(result, sizeof(result), "model %s registered (%lld bytes, SHA-256 %.16s...)", p->name,
		 (long long)p->size, hex);
	task_finish(r->a->db, ref, 1, result, r->now);
	models_reply_row(r, 201, model_id, base_id, p->name, final);
}

static void
put_end(struct req *r)
{
	struct put *p = r->stream;

	if (p == NULL) {
		reply_error(r, 500, "internal", NULL, "the upload request was already closed");
		return;
	}
	put_keep(r->a, p, r->now);
	if (p->kept != p->received) {
		reply_error(r, 500, "internal", NULL,
			    "upload %lld: the bytes could not be synced to disk; send from "
			    "%lld again",
			    (long long)p->id, (long long)p->kept);
	} else if (p->received < p->size) {
		int64_t id = p->id;
		pthread_mutex_lock(&r->a->db_mu);
		reply_query(r, 200, "SELECT " UPLOAD_FIELDS " WHERE id = ?1", 1, &id, "upload");
		pthread_mutex_unlock(&r->a->db_mu);
	} else {
		pthread_mutex_lock(&r->a->db_mu);
		put_finish(r, p);
		pthread_mutex_unlock(&r->a->db_mu);
	}
	put_close(r);
}

static const struct stream_ops put_ops = {
	.begin = put_begin,
	.data = put_data,
	.end = put_end,
	.abort = put_close,
};

const struct route api_uploads_routes[] = {
	{ "GET", "/api/v1/uploads", ROLE_OPERATOR, 0, h_list, NULL, NULL },
	{ "POST", "/api/v1/uploads", ROLE_OPERATOR, 0, h_create, NULL, "model.upload_begin" },
	{ "GET", "/api/v1/uploads/{id}", ROLE_OPERATOR, 0, h_get, NULL, NULL },
	{ "PUT", "/api/v1/uploads/{id}", ROLE_OPERATOR, ROUTE_STREAM | ROUTE_UNLOCKED, NULL, &put_ops, "model.upload" },
	{ "DELETE", "/api/v1/uploads/{id}", ROLE_OPERATOR, 0, h_delete, NULL, "model.upload_abort" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
