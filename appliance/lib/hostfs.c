/* Host files under a root prefix: bounded, non-blocking, regular files only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "hostfs.h"

int
hostfs_path(const char *root, const char *path, char *out, size_t size)
{
	const char *r = root == NULL || strcmp(root, "/") == 0 ? "" : root;
	size_t rl = strlen(r);
	int n;

	while (rl > 0 && r[rl - 1] == '/')
		rl--;
	n = snprintf(out, size, "%.*s%s%s", (int)rl, r, path[0] == '/' ? "" : "/", path);
	return n < 0 || (size_t)n >= size ? APP_ERANGE : APP_OK;
}

/* A descriptor on a regular file, or -1: sysfs attributes are regular
 * files, and anything else (a FIFO, a directory, a device) is not one. */
static int
open_regular(const char *root, const char *path)
{
	char full[PATH_MAX];
	struct stat st;
	int fd;

	if (hostfs_path(root, path, full, sizeof(full)) < 0) {
		errno = ENAMETOOLONG;
		return APP_EIO;
	}
	if ((fd = open(full, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
		return APP_EIO;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return APP_EIO;
	}
	return fd;
}

static ssize_t
read_fd(int fd, char *buf, size_t size)
{
	size_t got = 0;

	while (got < size) {
		ssize_t r = read(fd, buf + got, size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return got > 0 ? (ssize_t)got : APP_EIO;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

ssize_t
hostfs_read_bytes(const char *root, const char *path, void *buf, size_t size)
{
	int fd = open_regular(root, path);
	ssize_t n;

	if (fd < 0)
		return APP_EIO;
	n = read_fd(fd, buf, size);
	close(fd);
	return n;
}

char *
hostfs_read_text(const char *root, const char *path, size_t max, size_t *len)
{
	size_t cap = max < 4096 ? max : 4096, got = 0;
	char *buf, *grown;
	int fd = open_regular(root, path);

	if (fd < 0)
		return NULL;
	if ((buf = malloc(cap + 1)) == NULL)
		goto fail;
	for (;;) {
		ssize_t r = read_fd(fd, buf + got, cap - got);
		if (r < 0)
			goto fail;
		got += (size_t)r;
		if (got < cap || got >= max)
			break;
		cap = cap * 2 > max ? max : cap * 2;
		if ((grown = realloc(buf, cap + 1)) == NULL)
			goto fail;
		buf = grown;
	}
	close(fd);
	if (got > max)
		got = max;
	buf[got] = '\0';
	if (len != NULL)
		*len = got;
	return buf;
fail:
	free(buf);
	close(fd);
	return NULL;
}

int
hostfs_read_line(const char *root, const char *path, char *out, size_t size)
{
	char buf[4096];
	ssize_t n;
	size_t l;

	out[0] = '\0';
	if ((n = hostfs_read_bytes(root, path, buf, sizeof(buf) - 1)) <= 0)
		return APP_ENOTFOUND;
	buf[n] = '\0';
	l = strcspn(buf, "\n");
	while (l > 0 && (buf[l - 1] == ' ' || buf[l - 1] == '\t' || buf[l - 1] == '\r'))
		l--;
	if (l == 0 || memchr(buf, '\0', l) != NULL)
		return APP_ENOTFOUND;
	snprintf(out, size, "%.*s", (int)l, buf);
	return 0;
}

int
hostfs_read_long(const char *root, const char *path, int base, long long *v)
{
	char buf[64], *end;
	long long x;

	if (hostfs_read_line(root, path, buf, sizeof(buf)) < 0)
		return APP_ENOTFOUND;
	errno = 0;
	x = strtoll(buf, &end, base);
	if (end == buf || *end != '\0' || errno != 0)
		return APP_EFORMAT;
	*v = x;
	return 0;
}

int
hostfs_link_name(const char *root, const char *path, char *out, size_t size)
{
	char full[PATH_MAX], target[PATH_MAX];
	const char *base;
	ssize_t n;

	out[0] = '\0';
	if (hostfs_path(root, path, full, sizeof(full)) < 0)
		return APP_ENOTFOUND;
	if ((n = readlink(full, target, sizeof(target) - 1)) <= 0)
		return APP_ENOTFOUND;
	target[n] = '\0';
	base = strrchr(target, '/');
	base = base == NULL ? target : base + 1;
	if (*base == '\0')
		return APP_ENOTFOUND;
	snprintf(out, size, "%s", base);
	return 0;
}

int
hostfs_link_target(const char *root, const char *path, char *out, size_t size)
{
	char full[PATH_MAX];
	ssize_t n;

	if (hostfs_path(root, path, full, sizeof(full)) < 0 || (n = readlink(full, out, size - 1)) <= 0)
		return APP_ENOTFOUND;
	out[n] = '\0';
	return 0;
}

int
hostfs_resolve(const char *root, const char *path, char *out, size_t size)
{
	char full[PATH_MAX], real[PATH_MAX], rootreal[PATH_MAX];
	size_t rl;

	if (hostfs_path(root, path, full, sizeof(full)) < 0 || realpath(full, real) == NULL)
		return APP_ENOTFOUND;
	if (root == NULL || strcmp(root, "/") == 0) {
		snprintf(out, size, "%s", real);
		return strlen(real) < size ? APP_OK : APP_ERANGE;
	}
	if (realpath(root, rootreal) == NULL)
		return APP_ENOTFOUND;
	rl = strlen(rootreal);
	if (strncmp(real, rootreal, rl) != 0 || (real[rl] != '/' && real[rl] != '\0'))
		return APP_ENOTFOUND;
	snprintf(out, size, "%s", real[rl] == '\0' ? "/" : real + rl);
	return strlen(real + rl) < size ? APP_OK : APP_ERANGE;
}

int
hostfs_exists(const char *root, const char *path)
{
	char full[PATH_MAX];
	struct stat st;

	return hostfs_path(root, path, full, sizeof(full)) == 0 && stat(full, &st) == 0;
}

static int
cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char **
hostfs_list(const char *root, const char *dir, int max, int *n)
{
	char full[PATH_MAX], **names = NULL, **grown;
	int cap = 0;
	struct dirent *e;
	DIR *d;

	*n = 0;
	if (hostfs_path(root, dir, full, sizeof(full)) < 0 || (d = opendir(full)) == NULL)
		return NULL;
	while ((e = readdir(d)) != NULL && *n < max) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 16;
			if ((grown = realloc(names, (size_t)cap * sizeof(*names))) == NULL)
				goto fail;
			names = grown;
		}
		if ((names[*n] = strdup(e->d_name)) == NULL)
			goto fail;
		(*n)++;
	}
	closedir(d);
	if (names == NULL && (names = malloc(sizeof(*names))) == NULL) /* empty, not unreadable */
		return NULL;
	qsort(names, (size_t)*n, sizeof(*names), cmp_name);
	return names;
fail:
	closedir(d);
	hostfs_free_names(names, *n);
	*n = 0;
	return NULL;
}

void
hostfs_free_names(char **names, int n)
{
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static int
write_all(int fd, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return APP_EIO;
		data += w;
		len -= (size_t)w;
	}
	return 0;
}

/* full replaced whole by data (temporary file, fsync, rename), with mode. */
static int
replace_file(const char *full, const char *data, size_t len, mode_t mode)
{
	char tmp[PATH_MAX + 16];
	int fd, saved;

	snprintf(tmp, sizeof(tmp), "%s.privai-new", full);
	unlink(tmp);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode)) < 0)
		return APP_EIO;
	if (fchmod(fd, mode) < 0 || write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		saved = errno;
		close(fd);
		unlink(tmp);
		errno = saved;
		return APP_EIO;
	}
	if (close(fd) < 0 || rename(tmp, full) < 0) {
		saved = errno;
		unlink(tmp);
		errno = saved;
		return APP_EIO;
	}
	return 0;
}

int
hostfs_write(const char *root, const char *path, const char *data, size_t len, int atomic)
{
	char full[PATH_MAX];
	int fd, saved;

	if (hostfs_path(root, path, full, sizeof(full)) < 0) {
		errno = ENAMETOOLONG;
		return APP_EIO;
	}
	if (!atomic) {
		if ((fd = open(full, O_WRONLY | O_TRUNC | O_NONBLOCK | O_CLOEXEC)) < 0)
			return APP_EIO;
		if (write_all(fd, data, len) < 0) {
			saved = errno;
			close(fd);
			errno = saved;
			return APP_EIO;
		}
		return close(fd);
	}
	return replace_file(full, data, len, 0644);
}

/* mkdir -p of path's parent directories, mode 0755. */
static int
make_parents(char *full)
{
	for (char *p = full + 1; (p = strchr(p, '/')) != NULL; p++) {
		*p = '\0';
		int rc = mkdir(full, 0755);
		*p = '/';
		if (rc != 0 && errno != EEXIST)
			return APP_EIO;
	}
	return 0;
}

int
hostfs_install(const char *root, const char *path, const char *data, size_t len, mode_t mode, int *ret_changed)
{
	char full[PATH_MAX];
	struct stat sb;
	size_t have_len;

	if (ret_changed != NULL)
		*ret_changed = 0;
	if (hostfs_path(root, path, full, sizeof(full)) < 0) {
		errno = ENAMETOOLONG;
		return APP_EIO;
	}
	if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 07777) == mode && (size_t)sb.st_size == len) {
		char *have = hostfs_read_text(root, path, len + 1, &have_len);
		int same = have != NULL && have_len == len && memcmp(have, data, len) == 0;
		free(have);
		if (same)
			return 0;
	}
	if (make_parents(full) < 0)
		return APP_EIO;
	if (replace_file(full, data, len, mode) < 0)
		return APP_EIO;
	if (ret_changed != NULL)
		*ret_changed = 1;
	return 0;
}
