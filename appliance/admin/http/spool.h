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
	int fd;                  /* -1 when closed */
	char tmp[PATH_MAX + 64]; /* "" once renamed or removed */
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

/* The same for a streamed request (stream_ops in http/httpd.h), kept in
 * r->stream.  `name` is the caller's. */
struct req;
struct upload {
	struct spool sp;
	char name[160];
	char want_sha[65]; /* from ?sha256=, or "" */
	char base[160];    /* a model upload's ?base_model= (LoRA adapters), or "" */
};

/* For a stream's begin: check ?sha256= and the Content-Length against
 * limit, then spool into dir.  The upload (also r->stream), or NULL after
 * replying. */
struct upload *upload_begin_in(struct req *r, const char *dir, int64_t limit);
/* stream_ops.data and .abort of such an upload. */
int upload_data(struct req *r, const char *buf, size_t n);
void upload_discard(struct req *r);
/* For a stream's end: sync, and check it is not empty and matches
 * ?sha256=.  The upload, its SHA-256 in hex; NULL after replying (the
 * upload is discarded). */
struct upload *upload_finish(struct req *r, char hex[65]);

#endif
