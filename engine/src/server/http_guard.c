/*
 * The slow-client guard (http_guard.h has the rules).
 *
 * Connections live on one list in the order they connected, under one
 * mutex.  libmicrohttpd reports a connection's start from its listening
 * thread and its end just before it closes the socket, both through
 * http_guard_notify(), so a socket on the list is always open: shutting
 * it down under the mutex can never hit a descriptor reused by another.
 * A dropped connection stays on the list, marked, until it closes; it no
 * longer counts against the caps.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/http_guard.h"

enum phase { PHASE_HEADERS, PHASE_BODY, PHASE_BUSY };

struct guard_conn {
	struct http_guard *g;
	int fd;
	unsigned char addr[16]; /* the client's address, IPv4 in the first 4 bytes */
	int family;
	enum phase phase;
	double since;  /* when the phase began */
	uint64_t body; /* body bytes so far, in PHASE_BODY */
	int dropped;
	struct guard_conn *prev, *next;
};

struct http_guard {
	struct http_guard_config cfg;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	pthread_t watchdog;
	int stopping;
	struct guard_conn *head, *tail;
	uint64_t drops[DROP_REASONS];
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Under g->mu. */
static void
drop(struct http_guard *g, struct guard_conn *k, enum http_drop_reason why)
{
	k->dropped = 1;
	g->drops[why]++;
	/* the connection's thread wakes to an end of stream and closes it */
	(void)shutdown(k->fd, SHUT_RDWR);
}

static int
same_client(const struct guard_conn *a, const struct guard_conn *b)
{
	return a->family == b->family && memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

/* Under g->mu: enforce a cap on the live connections that match (all of
 * them, or those of one client), dropping the one that has waited longest
 * for its headers; n is how many match, k the newcomer. */
static void
enforce_cap(struct http_guard *g, struct guard_conn *k, int per_client, int cap, enum http_drop_reason why)
{
	struct guard_conn *oldest = NULL;
	int n = 0;

	if (cap <= 0)
		return;
	for (struct guard_conn *p = g->head; p != NULL; p = p->next) {
		if (p->dropped || (per_client && !same_client(p, k)))
			continue;
		n++;
		if (p->phase == PHASE_HEADERS && (oldest == NULL || p->since < oldest->since))
			oldest = p;
	}
	if (n > cap)
		drop(g, oldest != NULL ? oldest : k, why);
}

static void
conn_started(struct http_guard *g, struct MHD_Connection *c, void **socket_context)
{
	const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	struct guard_conn *k = calloc(1, sizeof(*k));

	*socket_context = k;
	if (fd == NULL)
		return; /* not a socket: nothing to guard */
	if (k == NULL) {
		/* out of memory: serving it unguarded would let a flood in */
		(void)shutdown(fd->connect_fd, SHUT_RDWR);
		return;
	}
	k->g = g;
	k->fd = fd->connect_fd;
	if (ad != NULL && ad->client_addr != NULL) {
		k->family = ad->client_addr->sa_family;
		if (k->family == AF_INET)
			memcpy(k->addr, &((const struct sockaddr_in *)ad->client_addr)->sin_addr, 4);
		else if (k->family == AF_INET6)
			memcpy(k->addr, &((const struct sockaddr_in6 *)ad->client_addr)->sin6_addr, 16);
	}
	k->phase = PHASE_HEADERS;
	k->since = now_s();
	pthread_mutex_lock(&g->mu);
	k->prev = g->tail;
	if (g->tail != NULL)
		g->tail->next = k;
	else
		g->head = k;
	g->tail = k;
	enforce_cap(g, k, 1, g->cfg.max_per_client, DROP_CLIENT_FULL);
	if (!k->dropped)
		enforce_cap(g, k, 0, g->cfg.max_total, DROP_SERVER_FULL);
	pthread_mutex_unlock(&g->mu);
}

static void
conn_closed(struct guard_conn *k)
{
	struct http_guard *g = k->g;

	if (g != NULL) {
		pthread_mutex_lock(&g->mu);
		if (k->prev != NULL)
			k->prev->next = k->next;
		else
			g->head = k->next;
		if (k->next != NULL)
			k->next->prev = k->prev;
		else
			g->tail = k->prev;
		pthread_mutex_unlock(&g->mu);
	}
	free(k);
}

void
http_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe)
{
	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		conn_started(cls, c, socket_context);
	else if (*socket_context != NULL) {
		conn_closed(*socket_context);
		*socket_context = NULL;
	}
}

static struct guard_conn *
conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct guard_conn *k = ci != NULL ? ci->socket_context : NULL;

	return k != NULL && k->g != NULL ? k : NULL;
}

static void
set_phase(struct MHD_Connection *c, enum phase to)
{
	struct guard_conn *k = conn_of(c);

	if (k == NULL)
		return;
	pthread_mutex_lock(&k->g->mu);
	k->phase = to;
	k->since = now_s();
	k->body = 0;
	pthread_mutex_unlock(&k->g->mu);
}

void
http_guard_headers(struct MHD_Connection *c, int has_body)
{
	set_phase(c, has_body ? PHASE_BODY : PHASE_BUSY);
}

void
http_guard_body(struct MHD_Connection *c, size_t n)
{
	struct guard_conn *k = conn_of(c);

	if (k == NULL)
		return;
	pthread_mutex_lock(&k->g->mu);
	k->body += n;
	pthread_mutex_unlock(&k->g->mu);
}

void
http_guard_busy(struct MHD_Connection *c)
{
	set_phase(c, PHASE_BUSY);
}

void
http_guard_idle(struct MHD_Connection *c)
{
	set_phase(c, PHASE_HEADERS);
}

/* Under g->mu: the deadlines, checked a few times a second. */
static void
sweep(struct http_guard *g, double t)
{
	for (struct guard_conn *k = g->head; k != NULL; k = k->next) {
		double waited = t - k->since;

		if (k->dropped)
			continue;
		if (k->phase == PHASE_HEADERS && waited > g->cfg.header_timeout)
			drop(g, k, DROP_HEADER_TIMEOUT);
		else if (k->phase == PHASE_BODY && g->cfg.min_body_rate > 0 && waited > g->cfg.header_timeout &&
			 (double)k->body < g->cfg.min_body_rate * waited)
			drop(g, k, DROP_SLOW_BODY);
	}
}

static void *
watchdog_main(void *arg)
{
	struct http_guard *g = arg;

	pthread_mutex_lock(&g->mu);
	while (!g->stopping) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 250 * 1000 * 1000;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		(void)pthread_cond_timedwait(&g->wake, &g->mu, &until);
		if (!g->stopping)
			sweep(g, now_s());
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

struct http_guard *
http_guard_new(const struct http_guard_config *cfg)
{
	struct http_guard *g = calloc(1, sizeof(*g));

	if (g == NULL)
		return NULL;
	g->cfg = *cfg;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->wake, NULL);
	if (pthread_create(&g->watchdog, NULL, watchdog_main, g) != 0) {
		pthread_cond_destroy(&g->wake);
		pthread_mutex_destroy(&g->mu);
		free(g);
		return NULL;
	}
	return g;
}

void
http_guard_free(struct http_guard *g)
{
	if (g == NULL)
		return;
	pthread_mutex_lock(&g->mu);
	g->stopping = 1;
	pthread_cond_signal(&g->wake);
	pthread_mutex_unlock(&g->mu);
	pthread_join(g->watchdog, NULL);
	/* the daemon has stopped, so every connection has been reported
	 * closed; anything left is a leak of libmicrohttpd's, not ours */
	pthread_cond_destroy(&g->wake);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

void
http_guard_drops(struct http_guard *g, uint64_t ret_drops[DROP_REASONS])
{
	pthread_mutex_lock(&g->mu);
	memcpy(ret_drops, g->drops, sizeof(g->drops));
	pthread_mutex_unlock(&g->mu);
}
