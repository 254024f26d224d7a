/*
 * The SHA-256 of models registered by path, worked out in the background.
 * An upload or a download is hashed as it arrives; a path may name a file
 * of hundreds of gigabytes, so registering it does not wait for that.
 * One thread, at the lowest CPU priority, hashes one model at a time,
 * oldest first, and stores the hash only when the file's size and
 * modification time are the same after as before and its size is still
 * the one registered.  Until then the model's sha256 is null, and a node
 * it is placed on checks its size and GGUF header only; once stored,
 * every node checks its copy against it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "admin.h"
#include "log.h"
#include "store/db.h"
#include "models/models.h"
#include "store/tasks.h"
#include "worker.h"

#define HASH_BLOCK (4 << 20)
#define HASH_IDLE_S 60 /* a look for work even unasked (a file mended meanwhile) */
#define HASH_MAX_SKIPPED 64

struct hasher {
	struct admin *a;
	struct worker w;
	/* models whose file could not be hashed: not tried again until
	 * the file changes (size or time) or the admin restarts */
	struct {
		int64_t id, size, mtime_ns;
	} skipped[HASH_MAX_SKIPPED];
	int n_skipped;
};

static int
skipped(const struct hasher *h, int64_t id)
{
	for (int i = 0; i < h->n_skipped; i++)
		if (h->skipped[i].id == id)
			return 1;
	return 0;
}

/* The hashing of model id as a task (store/tasks.h): begun, moved on,
 * or ended with `result` (ok < 0: still running). */
static void
hash_task(struct hasher *h, int64_t id, const char *path, double progress, int ok, const char *result)
{
	char ref[40];
	const char *base = strrchr(path, '/');

	snprintf(ref, sizeof(ref), "hash:%lld", (long long)id);
	pthread_mutex_lock(&h->a->db_mu);
	if (progress == 0)
		task_begin(h->a->db, "model.hash", ref, base != NULL ? base + 1 : path, "system", admin_now());
	if (ok < 0)
		task_update(h->a->db, ref, progress, NULL, admin_now());
	else
		task_finish(h->a->db, ref, ok, result, admin_now());
	pthread_mutex_unlock(&h->a->db_mu);
}

static void
skip(struct hasher *h, int64_t id, const struct stat *sb, const char *path, const char *why)
{
	log_warn("model %lld (%s): no SHA-256: %s", (long long)id, path, why);
	hash_task(h, id, path, -1, 0, why);
	if (h->n_skipped < HASH_MAX_SKIPPED) {
		h->skipped[h->n_skipped].id = id;
		h->skipped[h->n_skipped].size = sb != NULL ? (int64_t)sb->st_size : -1;
		h->skipped[h->n_skipped].mtime_ns =
			sb != NULL ? (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec : -1;
		h->n_skipped++;
	}
}

/* A skipped model whose file changed since is worth another try. */
static void
unskip_changed(struct hasher *h, const char *path, int64_t id)
{
	struct stat sb;

	for (int i = 0; i < h->n_skipped; i++)
		if (h->skipped[i].id == id && stat(path, &sb) == 0 &&
		    ((int64_t)sb.st_size != h->skipped[i].size ||
		     (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec != h->skipped[i].mtime_ns)) {
			h->skipped[i] = h->skipped[--h->n_skipped];
			return;
		}
}

/* The oldest path model with no hash yet, not skipped: 1, or 0 if none. */
static int
next_model(struct hasher *h, int64_t *id, int64_t *size, char *path, size_t path_size)
{
	struct admin *a = h->a;
	sqlite3_stmt *st;
	int found = 0;

	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "SELECT id, size_bytes, path FROM models WHERE source = 'path' AND "
			       "state = 'ready' AND sha256 IS NULL ORDER BY id",
			       -1, &st, NULL) == SQLITE_OK) {
		while (!found && sqlite3_step(st) == SQLITE_ROW) {
			*id = sqlite3_column_int64(st, 0);
			snprintf(path, path_size, "%s", (const char *)sqlite3_column_text(st, 2));
			unskip_changed(h, path, *id);
			if (!skipped(h, *id)) {
				*size = sqlite3_column_int64(st, 1);
				found = 1;
			}
		}
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&a->db_mu);
	return found;
}

static void
store(struct hasher *h, int64_t id, const char *path, int64_t size, const char *hex)
{
	struct admin *a = h->a;
	sqlite3_stmt *st;
	char err[APP_ERR_LEN];

	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "UPDATE models SET sha256 = ?1 WHERE id = ?2 AND path = ?3 AND size_bytes = ?4 "
			       "AND sha256 IS NULL",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, id);
		sqlite3_bind_text(st, 3, path, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 4, size);
	}
	if (db_write(a->db, st, err) != APP_OK)
		log_warn("model %lld (%s): SHA-256 not stored: %s", (long long)id, path, err);
	pthread_mutex_unlock(&a->db_mu);
}

static void
hash_one(struct hasher *h, int64_t id, int64_t size, const char *path)
{
	struct stat before, after, now;
	crypto_hash_sha256_state s;
	unsigned char digest[crypto_hash_sha256_BYTES];
	char hex[65], why[200];
	char *buf = malloc(HASH_BLOCK);
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (buf == NULL || fd < 0 || fstat(fd, &before) != 0) {
		snprintf(why, sizeof(why), "%s", buf == NULL ? "out of memory" : strerror(errno));
		skip(h, id, NULL, path, why);
		goto out;
	}
	if ((int64_t)before.st_size != size) {
		snprintf(why, sizeof(why), "the file is %lld bytes, not the %lld registered; register it again",
			 (long long)before.st_size, (long long)size);
		skip(h, id, &before, path, why);
		goto out;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	crypto_hash_sha256_init(&s);
	hash_task(h, id, path, 0, -1, NULL);
	int64_t shown = admin_mono_ms();
	for (off_t off = 0;;) {
		ssize_t n = pread(fd, buf, HASH_BLOCK, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			skip(h, id, &before, path, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		crypto_hash_sha256_update(&s, (unsigned char *)buf, (size_t)n);
		/* read once: leave the page cache to the engines */
		posix_fadvise(fd, off, n, POSIX_FADV_DONTNEED);
		off += n;
		if (admin_mono_ms() - shown >= 1000) {
			shown = admin_mono_ms();
			hash_task(h, id, path, size > 0 ? (double)off / (double)size : 0, -1, NULL);
		}
		if (worker_stopping(&h->w))
			goto out; /* done again from the start next time */
	}
	int same = fstat(fd, &after) == 0 && stat(path, &now) == 0;
	if (!same || after.st_size != before.st_size || after.st_mtim.tv_sec != before.st_mtim.tv_sec ||
	    after.st_mtim.tv_nsec != before.st_mtim.tv_nsec || now.st_ino != before.st_ino ||
	    now.st_dev != before.st_dev) {
		/* tried again once it changes no more between two looks */
		skip(h, id, same ? &now : NULL, path, "the file changed while it was read");
		goto out;
	}
	crypto_hash_sha256_final(&s, digest);
	sodium_bin2hex(hex, sizeof(hex), digest, sizeof(digest));
	store(h, id, path, size, hex);
	snprintf(why, sizeof(why), "SHA-256 %s", hex);
	hash_task(h, id, path, -1, 1, why);
out:
	if (fd >= 0)
		close(fd);
	free(buf);
}

static void *
hasher_main(void *arg)
{
	struct hasher *h = arg;
	char path[PATH_MAX + 64];
	int64_t id, size;

	setpriority(PRIO_PROCESS, 0, 19); /* this thread only, on Linux */
	do {
		while (!worker_stopping(&h->w) && next_model(h, &id, &size, path, sizeof(path)))
			hash_one(h, id, size, path);
	} while (worker_wait(&h->w, HASH_IDLE_S));
	return NULL;
}

int
model_hash_start(struct admin *a, char *err)
{
	struct hasher *h = calloc(1, sizeof(*h));

	if (h == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	h->a = a;
	if (worker_start(&h->w, hasher_main, h) != 0) {
		free(h);
		return app_fail(err, APP_EIO, "cannot start the model hasher thread");
	}
	a->hasher = h;
	return APP_OK;
}

void
model_hash_kick(struct admin *a)
{
	if (a->hasher != NULL)
		worker_kick(&a->hasher->w);
}

void
model_hash_stop(struct admin *a)
{
	if (a->hasher == NULL)
		return;
	worker_stop(&a->hasher->w);
	free(a->hasher);
	a->hasher = NULL;
}
