/*
 * A request body streamed to a temporary file (".upload-XXXXXX" in the
 * directory it will end up in), hashed with SHA-256 as it arrives and
 * held to a size limit; then synced and renamed into place, or removed.
 * Model uploads and backup uploads both land this way, so a client that
 * goes away or a failed check never leaves a partial file.
 */
#ifndef PRIVAI_ADMIN_SPOOL_H
#define PRIVAI_ADMIN_SPOOL_H

#include <limits.h>
#include <sodium.h>
#include <stddef.h>
#include <stdint.h>

struct spool {
	int fd;                      /* -1 when closed */
	char tmp[PATH_MAX + 64];     /* "" once renamed or removed */
	crypto_hash_sha256_state h;
	int64_t bytes, limit;
};

/* 0, or an HTTP status (500) with err. */
int spool_open(struct spool *s, const char *dir, int64_t limit, char *err);
/* 0, or an HTTP status: 413 past the limit, 507 disk full, 500. */
int spool_write(struct spool *s, const char *buf, size_t n, char *err);
/* Sync the file and give its SHA-256 in hex: 0, or 500 with err. */
int spool_finish(struct spool *s, char hex[65], char *err);
/* Rename the file to path and sync its directory: 0, or 500 with err. */
int spool_commit(struct spool *s, const char *path, char *err);
/* Close and remove whatever is left. */
void spool_discard(struct spool *s);

#endif
