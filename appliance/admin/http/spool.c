/* Request bodies spooled to disk: see http/spool.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "http/httpd.h"
#include "models/models.h"
#include "http/spool.h"

int
spool_open(struct spool *s, const char *dir, int64_t limit, char *err)
{
	memset(s, 0, sizeof(*s));
	s->limit = limit;
	crypto_hash_sha256_init(&s->h);
	s->fd = -1;
	if (str_fmt(s->tmp, sizeof(s->tmp), "%s/.upload-XXXXXX", dir) != APP_OK) {
		snprintf(err, APP_ERR_LEN, "%s: the path is too long", dir);
		return 500;
	}
	if ((s->fd = mkostemp(s->tmp, O_CLOEXEC)) < 0) {
		snprintf(err, APP_ERR_LEN, "cannot create a file in %s: %s", dir, strerror(errno));
		s->tmp[0] = '\0';
		return 500;
	}
	return 0;
}

int
spool_write(struct spool *s, const char *buf, size_t n, char *err)
{
	if (s->bytes + (int64_t)n > s->limit) {
		snprintf(err, APP_ERR_LEN, "uploads here are limited to %lld bytes", (long long)s->limit);
		return 413;
	}
	crypto_hash_sha256_update(&s->h, (const unsigned char *)buf, n);
	for (size_t off = 0; off < n;) {
		ssize_t w = write(s->fd, buf + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			snprintf(err, APP_ERR_LEN, "writing the upload: %s", strerror(e));
			return e == ENOSPC ? 507 : 500;
		}
		off += (size_t)w;
	}
	s->bytes += (int64_t)n;
	return 0;
}

int
spool_finish(struct spool *s, char hex[65], char *err)
{
	unsigned char digest[crypto_hash_sha256_BYTES];

	crypto_hash_sha256_final(&s->h, digest);
	sodium_bin2hex(hex, 65, digest, sizeof(digest));
	if (fsync(s->fd) != 0) {
		snprintf(err, APP_ERR_LEN, "fsync: %s", strerror(errno));
		return 500;
	}
	return 0;
}

int
spool_commit(struct spool *s, const char *path, char *err)
{
	char dir[PATH_MAX + 64];

	if (rename(s->tmp, path) != 0) {
		snprintf(err, APP_ERR_LEN, "cannot move the upload into place: %s", strerror(errno));
		return 500;
	}
	snprintf(dir, sizeof(dir), "%s", s->tmp);
	s->tmp[0] = '\0';
	char *slash = strrchr(dir, '/');
	if (slash != NULL)
		*slash = '\0';
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd); /* the rename itself survives a power cut */
		close(dfd);
	}
	return 0;
}

void
spool_discard(struct spool *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	if (s->tmp[0] != '\0')
		unlink(s->tmp);
	s->tmp[0] = '\0';
}

static const char *
error_code(int status)
{
	return status == 413 ? "too_large" : status == 507 ? "disk_full" : "internal";
}

void
upload_discard(struct req *r)
{
	struct upload *u = r->stream;

	if (u == NULL)
		return;
	spool_discard(&u->sp);
	free(u);
	r->stream = NULL;
}

struct upload *
upload_begin_in(struct req *r, const char *dir, int64_t limit)
{
	const char *sha = query_arg(r, "sha256");
	const char *cl = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Content-Length");
	char err[APP_ERR_LEN];
	struct upload *u;

	if (sha != NULL && !sha256_hex_ok(sha)) {
		reply_error(r, 422, "invalid_field", "sha256", "?sha256= must be 64 lowercase hex digits");
		return NULL;
	}
	if (cl != NULL && strtoll(cl, NULL, 10) > limit) {
		reply_error(r, 413, "too_large", NULL, "uploads here are limited to %lld bytes", (long long)limit);
		return NULL;
	}
	if ((u = calloc(1, sizeof(*u))) == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
		return NULL;
	}
	snprintf(u->want_sha, sizeof(u->want_sha), "%s", sha != NULL ? sha : "");
	r->stream = u;
	int status = spool_open(&u->sp, dir, limit, err);
	if (status != 0) {
		upload_discard(r);
		reply_error(r, (unsigned)status, error_code(status), NULL, "%s", err);
		return NULL;
	}
	return u;
}

int
upload_data(struct req *r, const char *buf, size_t n)
{
	struct upload *u = r->stream;
	char err[APP_ERR_LEN];

	if (u == NULL)
		return 1;
	int status = spool_write(&u->sp, buf, n, err);
	if (status != 0) {
		upload_discard(r);
		reply_error(r, (unsigned)status, error_code(status), NULL, "%s", err);
		return 1;
	}
	return 0;
}

struct upload *
upload_finish(struct req *r, char hex[65])
{
	struct upload *u = r->stream;
	char err[APP_ERR_LEN];

	if (u == NULL) {
		reply_error(r, 500, "internal", NULL, "the upload was already discarded");
		return NULL;
	}
	if (spool_finish(&u->sp, hex, err) != 0)
		reply_error(r, 500, "internal", NULL, "%s", err);
	else if (u->sp.bytes == 0)
		reply_error(r, 422, "empty", NULL, "the upload is empty");
	else if (u->want_sha[0] != '\0' && strcmp(u->want_sha, hex) != 0)
		reply_error(r, 422, "checksum_mismatch", "sha256", "the upload's SHA-256 is %s, not %s", hex,
			    u->want_sha);
	else
		return u;
	upload_discard(r);
	return NULL;
}
