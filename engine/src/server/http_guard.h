/*
 * The HTTP edge's defence against slow clients (slowloris and kin).
 *
 * libmicrohttpd gives each connection a thread and resets its idle timeout
 * on every byte, so a client that trickles header bytes holds a slot for as
 * long as it likes, and a few hundred such clients lock everyone out.  The
 * guard keeps its own table of connections and the phase each is in:
 *
 *	connect ──> HEADERS ──(headers complete)──> BODY ──(body read)──> BUSY
 *	               ^              └─────────(no body)─────────────────┘  |
 *	               └─────────────(response sent, keep-alive)─────────────┘
 *
 * and drops (shutdown(2) of the socket, which the connection's thread sees
 * as the peer leaving) a connection that
 *   - has not completed its request headers header_timeout seconds after
 *     it connected or its previous response ended;
 *   - sends its body slower than min_body_rate bytes a second on average,
 *     once header_timeout seconds of it have passed;
 *   - is the longest waiting for headers when a new connection would
 *     exceed max_total, or max_per_client from one address.
 * A request being served (BUSY) is never dropped, so a client that sends
 * its request promptly is never the one to go.  When every connection of
 * a full group is busy, the new connection itself is dropped.
 */
#ifndef PRIVAI_HTTP_GUARD_H
#define PRIVAI_HTTP_GUARD_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

struct http_guard_config {
	int max_total;         /* connections held at once */
	int max_per_client;    /* of them from one address; 0: no per-address cap */
	double header_timeout; /* seconds to send the request headers */
	double min_body_rate;  /* bytes a second a body must average; 0: no floor */
};

/* Why connections were dropped, for /metrics. */
enum http_drop_reason { DROP_HEADER_TIMEOUT, DROP_SLOW_BODY, DROP_SERVER_FULL, DROP_CLIENT_FULL, DROP_REASONS };

struct http_guard;

/* Start the guard and its watchdog thread; NULL when out of memory or
 * the thread cannot start.  Free with http_guard_free(). */
struct http_guard *http_guard_new(const struct http_guard_config *cfg);
/* Stop the watchdog; call after the HTTP daemon is stopped.  NULL is fine. */
void http_guard_free(struct http_guard *g);

/* The MHD_OPTION_NOTIFY_CONNECTION callback; cls is the guard. */
void http_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		       enum MHD_ConnectionNotificationCode toe);

/* The access handler's reports: the headers are in (has_body: a body
 * follows), n body bytes arrived, the body is complete, the response
 * is done (MHD_OPTION_NOTIFY_COMPLETED).  Connections the guard does not
 * know are ignored. */
void http_guard_headers(struct MHD_Connection *c, int has_body);
void http_guard_body(struct MHD_Connection *c, size_t n);
void http_guard_busy(struct MHD_Connection *c);
void http_guard_idle(struct MHD_Connection *c);

/* Connections dropped so far, by reason. */
void http_guard_drops(struct http_guard *g, uint64_t ret_drops[DROP_REASONS]);

#endif
