/*
 * The daemon and the request life cycle: match a route, authenticate,
 * check role and CSRF before any body is read, gather the body (bounded)
 * or stream it, run the handler under the store's mutex, and log every
 * refused change to the audit log.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "status.h"
#include "admin.h"
#include "log.h"
#include "http/httpd.h"
#include "http/tls_live.h"
#include "thread_sched.h"

#define MAX_JSON_BODY (1 << 20)
#define MAX_REPLY_HEADERS 4
#define SESSION_COOKIE "privai_session"

struct conn {
	struct req r;
	const struct route *rt;
	char *body;
	size_t len, cap;
	int too_big;
	int early; /* replied before the body was read */
	char *hdr_name[MAX_REPLY_HEADERS], *hdr_value[MAX_REPLY_HEADERS];
	int n_hdr;
};

/* Match path against pattern, copying {param} segments into args. */
static int
path_match(const char *pattern, const char *path, char args[REQ_MAX_ARGS][REQ_ARG_LEN])
{
	int n = 0;

	while (*pattern != '\0' && *path != '\0') {
		if (*pattern == '{') {
			size_t len = strcspn(path, "/");
			if (len == 0 || len >= REQ_ARG_LEN || n == REQ_MAX_ARGS)
				return 0;
			memcpy(args[n], path, len);
			args[n++][len] = '\0';
			path += len;
			pattern = strchr(pattern, '}');
			if (pattern == NULL)
				return 0;
			pattern++;
			continue;
		}
		if (*pattern != *path)
			return 0;
		pattern++;
		path++;
	}
	return *pattern == '\0' && *path == '\0';
}

/* The route for method + path; *path_known says whether any route has the path. */
static const struct route *
route_find(const struct route *const *tables, const char *method, const char *path,
	   char args[REQ_MAX_ARGS][REQ_ARG_LEN], int *path_known)
{
	char scratch[REQ_MAX_ARGS][REQ_ARG_LEN];

	*path_known = 0;
	for (size_t t = 0; tables[t] != NULL; t++)
		for (const struct route *rt = tables[t]; rt->method != NULL; rt++) {
			if (!path_match(rt->pattern, path, scratch))
				continue;
			*path_known = 1;
			if (strcmp(rt->method, method) == 0 ||
			    (strcmp(method, "HEAD") == 0 && strcmp(rt->method, "GET") == 0)) {
				memcpy(args, scratch, sizeof(scratch));
				return rt;
			}
		}
	return NULL;
}

static struct conn *
conn_of(struct req *r)
{
	return (struct conn *)r; /* r is the first member */
}

void
reply_response(struct req *r, unsigned status, struct MHD_Response *resp, const char *ctype)
{
	struct conn *cn = conn_of(r);

	if (r->status != 0) { /* a second reply is a bug; keep the first */
		if (resp != NULL)
			MHD_destroy_response(resp);
		return;
	}
	r->status = status;
	if (resp == NULL) {
		r->queued = MHD_NO;
		return;
	}
	if (ctype != NULL)
		MHD_add_response_header(resp, "Content-Type", ctype);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "X-Request-Id", r->id);
	for (int i = 0; i < cn->n_hdr; i++)
		MHD_add_response_header(resp, cn->hdr_name[i], cn->hdr_value[i]);
	r->queued = MHD_queue_response(r->c, status, resp);
	MHD_destroy_response(resp);
	if (status >= 100 && status < 600)
		atomic_fetch_add(&r->a->http_requests[status / 100], 1);
}

void
reply_header(struct req *r, const char *name, const char *value)
{
	struct conn *cn = conn_of(r);

	if (cn->n_hdr == MAX_REPLY_HEADERS)
		return;
	cn->hdr_name[cn->n_hdr] = strdup(name);
	cn->hdr_value[cn->n_hdr] = strdup(value);
	if (cn->hdr_name[cn->n_hdr] == NULL || cn->hdr_value[cn->n_hdr] == NULL) {
		free(cn->hdr_name[cn->n_hdr]);
		free(cn->hdr_value[cn->n_hdr]);
		return;
	}
	cn->n_hdr++;
}

/* Replies carry one-time secrets (a new token, an API key, a CSRF
 * token): wiped when libmicrohttpd is done with them. */
static void
wipe_free(void *text)
{
	sodium_memzero(text, strlen(text));
	free(text);
}

void
reply_text(struct req *r, unsigned status, const char *ctype, char *text)
{
	struct MHD_Response *resp = NULL;

	if (text != NULL) {
		resp = MHD_create_response_from_buffer_with_free_callback(strlen(text), text, wipe_free);
		if (resp == NULL)
			wipe_free(text);
	}
	reply_response(r, status, resp, ctype);
}

struct MHD_Response *
file_response(struct req *r, const char *path, const char *what)
{
	struct MHD_Response *resp;
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		if (fd >= 0)
			close(fd);
		reply_error(r, 500, "internal", NULL, "%s cannot be read", what);
		return NULL;
	}
	if ((resp = MHD_create_response_from_fd((uint64_t)sb.st_size, fd)) == NULL) {
		close(fd);
		reply_error(r, 500, "internal", NULL, "out of memory");
	}
	return resp;
}

void
reply_json(struct req *r, unsigned status, cJSON *root)
{
	char *js = root != NULL ? cJSON_PrintUnformatted(root) : NULL;

	cJSON_Delete(root);
	reply_text(r, status, "application/json", js);
}

void
reply_empty(struct req *r, unsigned status)
{
	reply_response(r, status, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT), NULL);
}

static void
reply_verror(struct req *r, unsigned status, const char *code, const char *field, const char *fmt, va_list ap)
{
	char msg[1024];
	cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");

	vsnprintf(msg, sizeof(msg), fmt, ap);
	snprintf(r->error, sizeof(r->error), "%.32s: %.200s", code, msg);
	cJSON_AddNumberToObject(e, "status", status);
	cJSON_AddStringToObject(e, "code", code);
	if (field != NULL)
		cJSON_AddStringToObject(e, "field", field);
	cJSON_AddStringToObject(e, "message", msg);
	reply_json(r, status, root);
}

void
reply_error(struct req *r, unsigned status, const char *code, const char *field, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	reply_verror(r, status, code, field, fmt, ap);
	va_end(ap);
}

void
reply_status(struct req *r, int rc, const char *field, const char *msg)
{
	switch (rc) {
	case APP_EINVAL:
		reply_error(r, 422, "invalid_field", field, "%s", msg);
		break;
	case APP_ENOTFOUND:
		reply_error(r, 404, "not_found", field, "%s", msg);
		break;
	case APP_EBUSY:
		reply_error(r, 409, "conflict", field, "%s", msg);
		break;
	case APP_EFORMAT:
		reply_error(r, 422, "bad_file", field, "%s", msg);
		break;
	case APP_EUNSUPPORTED:
		reply_error(r, 422, "unsupported", field, "%s", msg);
		break;
	case APP_ERANGE:
		reply_error(r, 422, "out_of_range", field, "%s", msg);
		break;
	case APP_EUNAVAIL:
		reply_error(r, 503, "unavailable", field, "%s", msg);
		break;
	default:
		reply_error(r, 500, "internal", field, "%s", msg);
		break;
	}
}

static void
client_addr(struct MHD_Connection *c, char *out, size_t size)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;

	snprintf(out, size, "?");
	if (sa == NULL)
		return;
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)size);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)size);
}

/* A request that changes something: a token limited to reading may not
 * send it, whatever route it is. */
static int
changes_state(const struct req *r, const struct route *rt)
{
	return strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0 && !(rt->flags & ROUTE_READ_ONLY);
}

/*
 * Authenticate and authorize before the body is read; 0 or replied.  The
 * order is the documented one (docs/api/openapi.yaml, "Authentication"):
 * 401 no or dead credentials; 403 password_change_required while the
 * account's password is one-time; 403 forbidden below the route's role;
 * 403 read_only_token for a change sent with a token that may only read;
 * 403 csrf for a session's change without its CSRF token.
 */
static int
check_access(struct req *r, const struct route *rt)
{
	const char *h = MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "Authorization");
	const char *cookie = session_cookie(r);
	char err[APP_ERR_LEN] = "no credentials";

	if (rt->flags & ROUTE_PUBLIC)
		return 0;
	pthread_mutex_lock(&r->a->db_mu);
	if (h != NULL && strncmp(h, "Bearer ", 7) == 0) {
		if (auth_token(r->a->db, h + 7, r->now, &r->who, err) == APP_OK)
			r->authed = 2;
	} else if (cookie != NULL) {
		if (auth_session(r->a->db, cookie, r->now, &r->who) == APP_OK)
			r->authed = 1;
		else
			snprintf(err, sizeof(err), "the session expired or was ended");
	}
	pthread_mutex_unlock(&r->a->db_mu);
	if (!r->authed) {
		reply_error(r, 401, "unauthenticated", NULL,
			    "log in or send a valid API token (Authorization: Bearer pat_...): %s", err);
		return APP_EDENIED;
	}
	if (r->who.must_change && !(rt->flags & ROUTE_ONE_TIME_OK)) {
		reply_error(r, 403, "password_change_required", NULL,
			    "%s has a one-time password: change it "
			    "(POST /api/v1/auth/password) before anything else",
			    r->who.name);
		return APP_EDENIED;
	}
	if (r->who.role < rt->min_role) {
		reply_error(r, 403, "forbidden", NULL, "%s needs the %s role; %s has %s", rt->pattern,
			    role_name(rt->min_role), r->who.name, role_name(r->who.role));
		return APP_EDENIED;
	}
	if (r->authed == 2 && r->who.role < ROLE_OPERATOR && changes_state(r, rt)) {
		reply_error(r, 403, "read_only_token", NULL, "token %lld may only read; %s %s changes something",
			    (long long)r->who.token_id, r->method, rt->pattern);
		return APP_EDENIED;
	}
	if (r->authed == 1 && strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0 &&
	    !auth_csrf_ok(&r->who, MHD_lookup_connection_value(r->c, MHD_HEADER_KIND, "X-CSRF-Token"))) {
		reply_error(r, 403, "csrf", NULL,
			    "a change made with a session needs the X-CSRF-Token header "
			    "returned at login");
		return APP_EDENIED;
	}
	return 0;
}

const char *
session_cookie(struct req *r)
{
	return MHD_lookup_connection_value(r->c, MHD_COOKIE_KIND, SESSION_COOKIE);
}

void
req_audit(struct req *r, const char *action, const char *target, const char *result, cJSON *detail)
{
	char actor[96];
	char *d = detail != NULL ? cJSON_PrintUnformatted(detail) : NULL;

	if (r->authed == 2)
		snprintf(actor, sizeof(actor), "%s (token %lld)", r->who.name, (long long)r->who.token_id);
	else
		snprintf(actor, sizeof(actor), "%s", r->authed ? r->who.name : "anonymous");
	admin_audit(r->a->db, r->now, actor, action, target, r->addr, result, d);
	r->audited = 1;
	free(d);
	cJSON_Delete(detail);
}

/* A refused change goes to the audit log with who asked and why, under
 * the action's own name ("token.create"), so a search for an action finds
 * its refusals too. */
static void
audit_refusal(struct req *r, const struct route *rt)
{
	char action[160];

	if (r->status < 400 || r->audited || strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0 ||
	    (rt != NULL && (rt->flags & ROUTE_READ_ONLY)))
		return;
	if (rt != NULL && rt->action != NULL)
		snprintf(action, sizeof(action), "%s", rt->action);
	else
		snprintf(action, sizeof(action), "%s %s", r->method, rt != NULL ? rt->pattern : r->path);
	cJSON *d = cJSON_CreateObject();
	cJSON_AddStringToObject(d, "request", rt != NULL ? rt->pattern : r->path);
	cJSON_AddStringToObject(d, "method", r->method);
	cJSON_AddNumberToObject(d, "status", r->status);
	cJSON_AddStringToObject(d, "error", r->error);
	pthread_mutex_lock(&r->a->db_mu);
	req_audit(r, action, r->path, "refused", d);
	pthread_mutex_unlock(&r->a->db_mu);
}

/* The request's id: a proxy's or client's own when it is safe to echo
 * and log, else a new one. */
static void
request_id(struct MHD_Connection *c, char *out, size_t size)
{
	const char *given = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
	size_t n = given != NULL ? strlen(given) : 0;
	unsigned char raw[8];

	if (n >= 1 && n <= 36 && n < size &&
	    strspn(given, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n) {
		memcpy(out, given, n + 1);
		return;
	}
	randombytes_buf(raw, sizeof(raw));
	sodium_bin2hex(out, size, raw, sizeof(raw));
}

static enum MHD_Result
first_call(struct admin *a, struct MHD_Connection *c, const char *url, const char *method, void **con_cls)
{
	struct conn *cn = calloc(1, sizeof(*cn));
	int path_known;

	if (cn == NULL)
		return MHD_NO;
	*con_cls = cn;
	struct req *r = &cn->r;
	request_id(c, r->id, sizeof(r->id));
	log_set_request(r->id);
	r->a = a;
	r->c = c;
	r->method = method;
	r->path = url;
	r->body = "";
	r->now = admin_now();
	client_addr(c, r->addr, sizeof(r->addr));
	cn->rt = route_find(r->a->routes, method, url, r->arg, &path_known);
	if (cn->rt == NULL && !path_known && a->fallback != NULL && a->fallback(r)) {
		cn->early = 1;
		return (enum MHD_Result)r->queued;
	}
	if (cn->rt == NULL) {
		if (path_known)
			reply_error(r, 405, "method_not_allowed", NULL, "%s does not accept %s", url, method);
		else
			reply_error(r, 404, "not_found", NULL, "no such path: %s", url);
	} else if (check_access(r, cn->rt) == 0) {
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (!(cn->rt->flags & ROUTE_STREAM) && cl != NULL && strtoull(cl, NULL, 10) > MAX_JSON_BODY)
			reply_error(r, 413, "too_large", NULL, "the body exceeds %d bytes", MAX_JSON_BODY);
		else if (cn->rt->flags & ROUTE_STREAM)
			cn->rt->stream->begin(r);
	}
	if (r->status != 0) {
		cn->early = 1;
		audit_refusal(r, cn->rt);
		return (enum MHD_Result)r->queued;
	}
	return MHD_YES;
}

static void
body_append(struct conn *cn, const char *data, size_t n)
{
	if (cn->too_big)
		return;
	if (cn->len + n > MAX_JSON_BODY) {
		cn->too_big = 1;
		return;
	}
	if (cn->len + n + 1 > cn->cap) {
		size_t cap = cn->cap ? cn->cap * 2 : 4096;
		while (cap < cn->len + n + 1)
			cap *= 2;
		/* not realloc: the old buffer may hold secrets to wipe */
		char *nb = malloc(cap);
		if (nb == NULL) {
			cn->too_big = 1;
			return;
		}
		if (cn->body != NULL) {
			memcpy(nb, cn->body, cn->len);
			sodium_memzero(cn->body, cn->cap);
			free(cn->body);
		}
		cn->body = nb;
		cn->cap = cap;
	}
	memcpy(cn->body + cn->len, data, n);
	cn->len += n;
	cn->body[cn->len] = '\0';
}

static enum MHD_Result
handle(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *upload_data,
       size_t *upload_data_size, void **con_cls)
{
	struct conn *cn = *con_cls;

	if (cn == NULL)
		return first_call(cls, c, url, method, con_cls);
	struct req *r = &cn->r;
	log_set_request(r->id);
	if (*upload_data_size > 0) {
		if (r->status == 0 && (cn->rt->flags & ROUTE_STREAM)) {
			if (cn->rt->stream->data(r, upload_data, *upload_data_size) != 0 && r->status != 0) {
				cn->early = 1;
				audit_refusal(r, cn->rt);
			}
		} else if (r->status == 0) {
			body_append(cn, upload_data, *upload_data_size);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (cn->early || r->status != 0)
		return (enum MHD_Result)r->queued;
	if (cn->too_big) {
		reply_error(r, 413, "too_large", NULL, "the body exceeds %d bytes", MAX_JSON_BODY);
	} else {
		r->body = cn->body != NULL ? cn->body : "";
		r->len = cn->len;
		int locked = !(cn->rt->flags & ROUTE_UNLOCKED);
		if (locked)
			pthread_mutex_lock(&r->a->db_mu);
		if (cn->rt->flags & ROUTE_STREAM)
			cn->rt->stream->end(r);
		else
			cn->rt->fn(r);
		if (locked)
			pthread_mutex_unlock(&r->a->db_mu);
		if (r->status == 0)
			reply_error(r, 500, "internal", NULL, "the handler for %s %s gave no answer", method, url);
	}
	audit_refusal(r, cn->rt);
	return (enum MHD_Result)r->queued;
}

/* libmicrohttpd's callback: the request's id is the thread's while its
 * code runs, so every line it logs names the request. */
static enum MHD_Result
access_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
	       const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	/* woken by a peer, preempt the engines at once (a hint; a relayed
	 * stream's later writes wait for a free CPU: api/forward.c) */
	(void)thread_sched_defer(0);
	enum MHD_Result rc = handle(cls, c, url, method, upload_data, upload_data_size, con_cls);

	log_set_request(NULL);
	return rc;
}

static void
completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct conn *cn = *con_cls;

	if (cn == NULL)
		return;
	if (cn->rt != NULL && (cn->rt->flags & ROUTE_STREAM) && cn->r.stream != NULL) {
		log_set_request(cn->r.id);
		cn->rt->stream->abort(&cn->r); /* end() clears stream when it finishes */
		log_set_request(NULL);
	}
	for (int i = 0; i < cn->n_hdr; i++) {
		/* Set-Cookie carries a session secret */
		sodium_memzero(cn->hdr_value[i], strlen(cn->hdr_value[i]));
		free(cn->hdr_name[i]);
		free(cn->hdr_value[i]);
	}
	if (cn->body != NULL) /* passwords, TLS keys, tokens in JSON bodies */
		sodium_memzero(cn->body, cn->cap);
	free(cn->body);
	free(cn);
	*con_cls = NULL;
}

int
httpd_listen(struct admin *a, char *err)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd, one = 1;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)a->cfg.port);
	if (inet_pton(AF_INET, a->cfg.host, &sa.sin_addr) != 1)
		return app_fail(err, APP_EINVAL, "--host %s is not an IPv4 address", a->cfg.host);
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return app_fail(err, APP_EIO, "socket: %s", strerror(errno));
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 128) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		int e = errno;
		close(fd);
		return app_fail(err, APP_EIO, "cannot listen on %s:%d: %s%s", a->cfg.host, a->cfg.port, strerror(e),
				e == EADDRINUSE ? " (another program holds the port; nothing was "
						  "created or changed)"
						: "");
	}
	a->listen_fd = fd;
	a->port = ntohs(sa.sin_port);
	return APP_OK;
}

int
httpd_start(struct admin *a, char *err)
{
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;

	if (a->listen_fd < 0)
		return app_fail(err, APP_EINVAL, "httpd_start before httpd_listen");
	if (a->tls)
		flags |= MHD_USE_TLS;
	a->daemon = MHD_start_daemon(flags, 0, NULL, NULL, access_handler, a, MHD_OPTION_LISTEN_SOCKET,
				     (MHD_socket)a->listen_fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
				     MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_CONNECTION_TIMEOUT,
				     (unsigned)300, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512 << 10),
				     MHD_OPTION_NOTIFY_COMPLETED, completed, a,
				     /* asked at each handshake, so an uploaded certificate needs no restart */
				     a->tls ? MHD_OPTION_HTTPS_CERT_CALLBACK : MHD_OPTION_END, tls_live_retrieve,
				     MHD_OPTION_END);
	if (a->daemon == NULL)
		return app_fail(err, APP_EIO, "cannot serve on %s:%d (a bad TLS key/certificate?)", a->cfg.host,
				a->port);
	a->listen_fd = -1; /* the daemon's now: MHD_stop_daemon closes it */
	return APP_OK;
}

void
httpd_stop(struct admin *a)
{
	if (a->daemon != NULL)
		MHD_stop_daemon(a->daemon);
	a->daemon = NULL;
	if (a->listen_fd >= 0)
		close(a->listen_fd);
	a->listen_fd = -1;
}
