/*
 * The console's static files (webui/): GET of any path outside /api/ that
 * names a file there.  Names are restricted to a safe alphabet with no
 * dot-segments and must resolve inside the directory, so neither ".."
 * nor a symlink leaves it.  Pages load only from this origin: the
 * Content-Security-Policy forbids inline script and every other host.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "http/httpd.h"

static const struct {
	const char *ext, *type;
} types[] = {
	{ ".html", "text/html; charset=utf-8" },
	{ ".js", "text/javascript; charset=utf-8" },
	{ ".css", "text/css; charset=utf-8" },
	{ ".svg", "image/svg+xml" },
	{ ".png", "image/png" },
	{ ".ico", "image/x-icon" },
	{ ".json", "application/json" },
	{ ".txt", "text/plain; charset=utf-8" },
};

static const char *
type_of(const char *path)
{
	const char *dot = strrchr(path, '.');

	for (size_t i = 0; dot != NULL && i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	return NULL;
}

static int
safe_name(const char *p)
{
	if (strlen(p) > 200)
		return 0;
	for (const char *s = p; *s; s++) {
		if (*s == '/' && s[1] == '.')
			return 0; /* no "..", no hidden files */
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '/' ||
		      *s == '.' || *s == '-' || *s == '_'))
			return 0;
	}
	return 1;
}

int
webui_serve(struct req *r)
{
	char want[PATH_MAX], real[PATH_MAX], root[PATH_MAX];
	const char *path = strcmp(r->path, "/") == 0 ? "/index.html" : r->path;
	const char *type = type_of(path);
	struct stat st;
	int fd;

	if (strncmp(r->path, "/api/", 5) == 0 || (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0))
		return 0;
	if (type == NULL || !safe_name(path) || realpath(r->a->cfg.webui_dir, root) == NULL)
		return 0;
	size_t n = strlen(root);
	if (str_fmt(want, sizeof(want), "%s%s", root, path) != APP_OK || realpath(want, real) == NULL ||
	    strncmp(real, root, n) != 0 || real[n] != '/')
		return 0;
	if ((fd = open(real, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return 0;
	}
	struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
	if (resp == NULL) {
		close(fd);
		return 0;
	}
	reply_header(r, "Content-Security-Policy",
		     "default-src 'self'; img-src 'self' data:; style-src 'self'; "
		     "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action "
		     "'self'");
	reply_header(r, "X-Frame-Options", "DENY");
	reply_header(r, "Referrer-Policy", "no-referrer");
	reply_response(r, 200, resp, type);
	return 1;
}
