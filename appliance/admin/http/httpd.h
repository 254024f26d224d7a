/*
 * privai-admin's HTTP front: the libmicrohttpd daemon, a route table per
 * REST resource, authentication (session cookie + CSRF header, or bearer
 * API token), role checks, per-address rate limiting, bounded JSON bodies,
 * and one JSON error shape:
 *
 *   {"error": {"status": 422, "code": "invalid_field", "field": "name",
 *              "message": "name must be a string of 1-64 characters"}}
 *
 * Handlers run with the store's mutex held (one sqlite connection, so
 * every request sees a consistent database) unless their route says
 * ROUTE_UNLOCKED; they answer through reply_*(), exactly once.
 */
#ifndef PRIVAI_ADMIN_HTTPD_H
#define PRIVAI_ADMIN_HTTPD_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/auth.h"

struct admin;

#define REQ_MAX_ARGS 3
#define REQ_ARG_LEN 160

struct req {
	struct admin *a;
	struct MHD_Connection *c;
	const char *method, *path;
	const char *body; /* NUL-terminated; "" when none */
	size_t len;
	char arg[REQ_MAX_ARGS][REQ_ARG_LEN]; /* {param} segments of the path, in order */
	char addr[64];                       /* the client's address */
	struct principal who;                /* valid when authed */
	int authed;                          /* 0 none, 1 session cookie, 2 bearer token */
	int64_t now;
	unsigned status; /* set once a reply is queued */
	int queued;      /* MHD_YES/NO from queueing */
	void *stream;    /* ROUTE_STREAM handlers' state */
	int audited;     /* the handler wrote the audit row itself */
	char error[256]; /* the last error replied, for the audit log */
	char id[40];     /* X-Request-Id: the client's when it is 1-36 of [A-Za-z0-9._-], else
				      * 16 random hex digits; in every reply and in the log's lines (log.h) */
};

typedef void (*handler_fn)(struct req *r);

/* A streamed body (uploads): begin() after authentication with the
 * headers only (it may reply at once to refuse), data() for each chunk
 * (nonzero: stop reading, the handler has replied or will in end()),
 * end() when the body is complete, abort() if the client went away. */
struct stream_ops {
	void (*begin)(struct req *r);
	int (*data)(struct req *r, const char *buf, size_t n);
	void (*end)(struct req *r);
	void (*abort)(struct req *r);
};

enum route_flags {
	ROUTE_PUBLIC = 1,       /* no authentication (health, login) */
	ROUTE_UNLOCKED = 2,     /* the handler takes the store's mutex itself */
	ROUTE_STREAM = 4,       /* body handed over in chunks (stream_ops) */
	ROUTE_READ_ONLY = 8,    /* a POST that changes nothing (proxy, sizing): not audited */
	ROUTE_ONE_TIME_OK = 16, /* open to an account whose password is one-time (me, password, logout) */
};

struct route {
	const char *method;
	const char *pattern; /* "/api/v1/models/{id}" */
	enum role min_role;
	unsigned flags;
	handler_fn fn;
	const struct stream_ops *stream;
	const char *action; /* the audit log's name for it ("token.create"); NULL for reads */
};

/* The daemon matches requests against a->routes: route tables, each
 * ending with an entry whose method is NULL, the list ending with NULL
 * (api/routes.h has the admin's; the HTTP layer knows no resource). */

/* Claim a->cfg.host:port (port 0: any; the port bound is stored in
 * a->port) before anything else is created, so a port that is taken
 * fails the start with nothing made; then start and stop the daemon on it. */
int httpd_listen(struct admin *a, char *err);
int httpd_start(struct admin *a, char *err);
void httpd_stop(struct admin *a);

/* Replies.  reply_json takes ownership of root (NULL: out of memory). */
void reply_json(struct req *r, unsigned status, cJSON *root);
void reply_text(struct req *r, unsigned status, const char *ctype, char *text_owned);
void reply_empty(struct req *r, unsigned status);
/* Any libmicrohttpd response (a file, say); takes ownership. */
void reply_response(struct req *r, unsigned status, struct MHD_Response *resp, const char *ctype);
/* A response sending the regular file at path (the response owns its
 * descriptor), or NULL after replying 500 naming `what`. */
struct MHD_Response *file_response(struct req *r, const char *path, const char *what);
void reply_error(struct req *r, unsigned status, const char *code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* An APP_E* code mapped onto an HTTP status. */
void reply_status(struct req *r, int privai_rc, const char *field, const char *msg);
/* Write an audit row for this request (the caller holds the store's
 * mutex): actor and address from the request; detail may be NULL and is
 * consumed. */
void req_audit(struct req *r, const char *action, const char *target, const char *result, cJSON *detail);

/* Set-Cookie etc. on the next reply. */
void reply_header(struct req *r, const char *name, const char *value);

/* The body as a JSON object, or NULL after replying 400/422.  A string
 * (or key) holding NUL (\u0000) is refused with 422 naming the field: C
 * would cut it there and store less than was sent. */
cJSON *body_object(struct req *r);
/* Wipe every string in a parsed body (passwords, keys) and free it; NULL
 * is allowed. */
void body_wipe(cJSON *j);
/* The session cookie's value as sent, or NULL. */
const char *session_cookie(struct req *r);
/* Field readers: NULL/-1 after replying 422 naming the field.  A missing
 * optional field yields def. */
const char *field_str(struct req *r, const cJSON *o, const char *name, int required, size_t max_len, const char *def);
/* field_str that also allows line breaks and tabs (PEM text). */
const char *field_text(struct req *r, const cJSON *o, const char *name, int required, size_t max_len, const char *def);
int field_int(struct req *r, const cJSON *o, const char *name, int required, int64_t lo, int64_t hi, int64_t def,
	      int64_t *out);
int field_bool(struct req *r, const cJSON *o, const char *name, int def, int *out);
/* Refuse fields not in the NULL-terminated list (a typo must not pass silently). */
int fields_known(struct req *r, const cJSON *o, const char *const *names);

/* A path argument as a positive row id, or APP_EINVAL after replying 404. */
int64_t arg_id(struct req *r, int i, const char *what);
/* Reply status with the rows of sql (int64 arguments ?1..?n) as
 * {"data": [...]}, or, when single names the thing, with the one row (or
 * a 404). */
void reply_query(struct req *r, unsigned status, const char *sql, int n, const int64_t *args, const char *single);

/* The same for a statement prepared and bound by the caller (finalized
 * here; NULL replies 500); id names the row in a 404. */
void reply_stmt(struct req *r, unsigned status, sqlite3_stmt *st, const char *single, int64_t id);

/* Serve the console's static file for a GET outside /api/ (http/webui.c):
 * 1 when it replied, 0 when the path is not one of its files. */
int webui_serve(struct req *r);

/* A query-string value, or NULL. */
const char *query_arg(struct req *r, const char *name);

#endif
