/* Request bodies spooled to disk: see spool.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "privai/status.h"
#include "spool.h"

int
spool_open(struct spool *s, const char *dir, int64_t limit, char *err)
{
	memset(s, 0, sizeof(*s));
	s->limit = limit;
	crypto_hash_sha256_init(&s->h);
	snprintf(s->tmp, sizeof(s->tmp), "%s/.upload-XXXXXX", dir);
	if ((s->fd = mkostemp(s->tmp, O_CLOEXEC)) < 0) {
		snprintf(err, PRIVAI_ERR_LEN, "cannot create a file in %s: %s", dir, strerror(errno));
		s->tmp[0] = '\0';
		return 500;
	}
	return 0;
}

int
spool_write(struct spool *s, const char *buf, size_t n, char *err)
{
	if (s->bytes + (int64_t)n > s->limit) {
		snprintf(err, PRIVAI_ERR_LEN, "uploads here are limited to %lld bytes", (long long)s->limit);
		return 413;
	}
	crypto_hash_sha256_update(&s->h, (const unsigned char *)buf, n);
	for (size_t off = 0; off < n;) {
		ssize_t w = write(s->fd, buf + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			snprintf(err, PRIVAI_ERR_LEN, "writing the upload: %s", strerror(e));
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
		snprintf(err, PRIVAI_ERR_LEN, "fsync: %s", strerror(errno));
		return 500;
	}
	return 0;
}

int
spool_commit(struct spool *s, const char *path, char *err)
{
	char dir[PATH_MAX + 64];

	if (rename(s->tmp, path) != 0) {
		snprintf(err, PRIVAI_ERR_LEN, "cannot move the upload into place: %s", strerror(errno));
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
