/*
 * deploy_forward(): pass one request on to an engine, or to the node that
 * runs it, and pass its answer back as it arrives.
 *
 * A streamed completion is a text/event-stream of small events spread
 * over seconds or minutes; gathering it first would turn tokens-as-they-
 * come into one late block.  So the answer is relayed chunk by chunk:
 * libcurl's multi interface is driven from libmicrohttpd's content
 * reader, which runs in the client connection's own thread (the daemon
 * is thread-per-connection), so it may block.  The reader asks for more
 * only when the client has taken what was read, so a slow client slows
 * the upstream read and at most RELAY_MAX_PENDING bytes wait here.  When
 * the client goes away the transfer is dropped, which closes the
 * upstream connection, and the engine cancels the sequence.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "api/deployments.h"
#include "http/httpd.h"
#include "thread_sched.h"

#define RELAY_MAX_PENDING (1 << 20)
#define RELAY_CHUNK (32 << 10)
/* Without a byte for this long the upstream is taken as stuck.  A long
 * prompt on a CPU can keep an engine quiet for minutes before the first
 * token; there is no limit on the whole answer. */
#define RELAY_SILENCE_S 600L

struct relay {
	atomic_long *streams; /* the admin's gauge, while this answer is relayed */
	CURLM *m;
	CURL *c;
	struct curl_slist *h;
	char *buf;
	size_t len, off, cap;
	int paused; /* the write callback said wait: buf is full */
	int done;
	CURLcode rc;
};

/* Finished transfers kept with their open connections: the next request
 * to the same engine skips the connect and the engine's new-connection
 * work (measured: the first token 2 ms sooner).  Process-wide, like
 * curl's own global state; emptied by deploy_forward_shutdown(). */
#define RELAY_POOL 16
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	CURLM *m;
	CURL *c;
} pool[RELAY_POOL];
static int pool_n;

static int
pool_take(CURLM **m, CURL **c)
{
	int got = 0;

	pthread_mutex_lock(&pool_mu);
	if (pool_n > 0) {
		pool_n--;
		*m = pool[pool_n].m;
		*c = pool[pool_n].c;
		got = 1;
	}
	pthread_mutex_unlock(&pool_mu);
	if (got)
		curl_easy_reset(*c);
	return got;
}

static int
pool_give(CURLM *m, CURL *c)
{
	int kept = 0;

	pthread_mutex_lock(&pool_mu);
	if (pool_n < RELAY_POOL) {
		pool[pool_n].m = m;
		pool[pool_n].c = c;
		pool_n++;
		kept = 1;
	}
	pthread_mutex_unlock(&pool_mu);
	return kept;
}

void
deploy_forward_shutdown(void)
{
	pthread_mutex_lock(&pool_mu);
	for (int i = 0; i < pool_n; i++) {
		curl_easy_cleanup(pool[i].c);
		curl_multi_cleanup(pool[i].m);
	}
	pool_n = 0;
	pthread_mutex_unlock(&pool_mu);
}

static size_t
relay_write(char *data, size_t size, size_t n, void *arg)
{
	struct relay *u = arg;
	size_t bytes = size * n;

	if (u->off == u->len)
		u->off = u->len = 0;
	if (u->len - u->off >= RELAY_MAX_PENDING) {
		u->paused = 1;
		return CURL_WRITEFUNC_PAUSE; /* curl keeps data and offers it again */
	}
	if (u->len + bytes > u->cap) {
		size_t cap = u->cap ? u->cap : RELAY_CHUNK;
		while (cap < u->len + bytes)
			cap *= 2;
		char *nb = realloc(u->buf, cap);
		if (nb == NULL)
			return 0; /* fails the transfer: CURLE_WRITE_ERROR */
		u->buf = nb;
		u->cap = cap;
	}
	memcpy(u->buf + u->len, data, bytes);
	u->len += bytes;
	return bytes;
}

static void
relay_free(void *arg)
{
	struct relay *u = arg;

	if (u == NULL)
		return;
	(void)thread_sched_defer(0); /* a relay that ended without a last read */
	if (u->streams != NULL)
		atomic_fetch_sub(u->streams, 1);
	if (u->m != NULL && u->c != NULL)
		curl_multi_remove_handle(u->m, u->c);
	/* only a transfer that ended well leaves a connection worth keeping */
	if (u->m == NULL || u->c == NULL || !u->done || u->rc != CURLE_OK || !pool_give(u->m, u->c)) {
		curl_easy_cleanup(u->c);
		curl_multi_cleanup(u->m);
	}
	curl_slist_free_all(u->h);
	free(u->buf);
	free(u);
}

/* Run the transfer until it has bytes waiting here or is over. */
static void
relay_fill(struct relay *u)
{
	while (!u->done && u->off == u->len) {
		int running = 0, left;
		CURLMsg *msg;

		if (u->paused) {
			u->paused = 0;
			curl_easy_pause(u->c, CURLPAUSE_CONT);
		}
		if (curl_multi_perform(u->m, &running) != CURLM_OK) {
			u->done = 1;
			u->rc = CURLE_OUT_OF_MEMORY;
			break;
		}
		while ((msg = curl_multi_info_read(u->m, &left)) != NULL)
			if (msg->msg == CURLMSG_DONE) {
				u->done = 1;
				u->rc = msg->data.result;
			}
		if (!u->done && u->off == u->len)
			curl_multi_poll(u->m, NULL, 0, 1000, NULL);
	}
}

static ssize_t
relay_read(void *arg, uint64_t pos, char *out, size_t max)
{
	struct relay *u = arg;

	/* past the first bytes, the engine's next ones wait for a free CPU
	 * here rather than preempt its threads (thread_sched.c; a hint) */
	if (pos > 0)
		(void)thread_sched_defer(1);
	relay_fill(u);
	if (u->off < u->len) {
		size_t n = u->len - u->off < max ? u->len - u->off : max;
		memcpy(out, u->buf + u->off, n);
		u->off += n;
		return (ssize_t)n;
	}
	(void)thread_sched_defer(0); /* the connection's next request preempts again */
	/* an upstream that broke off mid-answer ends the client's answer
	 * broken too (no last chunk), so it is not taken for a whole one */
	return u->rc == CURLE_OK ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static struct relay *
relay_open(struct req *r, const char *url, const char *auth, const char *pin, int post)
{
	struct relay *u = calloc(1, sizeof(*u));
	struct curl_slist *h;
	char hdr[300];

	if (u == NULL)
		return NULL;
	if (auth != NULL) {
		snprintf(hdr, sizeof(hdr), "Authorization: %s", auth);
		if ((h = curl_slist_append(u->h, hdr)) == NULL)
			goto fail;
		u->h = h;
	}
	if ((h = curl_slist_append(u->h, "Content-Type: application/json")) == NULL)
		goto fail;
	u->h = h;
	if (!pool_take(&u->m, &u->c) && ((u->c = curl_easy_init()) == NULL || (u->m = curl_multi_init()) == NULL))
		goto fail;
	curl_easy_setopt(u->c, CURLOPT_URL, url);
	curl_easy_setopt(u->c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(u->c, CURLOPT_HTTPHEADER, u->h);
	curl_easy_setopt(u->c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(u->c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(u->c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(u->c, CURLOPT_LOW_SPEED_TIME, RELAY_SILENCE_S);
	if (pin != NULL && pin[0] != '\0') {
		/* a node's console is self-signed: the pin its heartbeats sent is the trust */
		curl_easy_setopt(u->c, CURLOPT_PINNEDPUBLICKEY, pin);
		curl_easy_setopt(u->c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(u->c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (post) {
		/* copied: the request's body is freed with the request, which
		 * can end before the transfer does */
		curl_easy_setopt(u->c, CURLOPT_POSTFIELDSIZE, (long)r->len);
		if (curl_easy_setopt(u->c, CURLOPT_COPYPOSTFIELDS, r->body) != CURLE_OK)
			goto fail;
	}
	curl_easy_setopt(u->c, CURLOPT_WRITEFUNCTION, relay_write);
	curl_easy_setopt(u->c, CURLOPT_WRITEDATA, u);
	if (curl_multi_add_handle(u->m, u->c) != CURLM_OK)
		goto fail;
	return u;
fail:
	relay_free(u);
	return NULL;
}

void
deploy_forward(struct req *r, const char *url, const char *auth, const char *pin, int post, const char *who)
{
	struct relay *u = relay_open(r, url, auth, pin, post);
	long code = 0;
	char *ctype = NULL, ct[96];

	if (u == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
		return;
	}
	/* the status line and headers come before the first body byte */
	relay_fill(u);
	curl_easy_getinfo(u->c, CURLINFO_RESPONSE_CODE, &code);
	if (code < 100 || (u->done && u->rc != CURLE_OK && u->off == u->len)) {
		reply_error(r, 502, "bad_gateway", NULL, "%s did not answer: %s", who,
			    curl_easy_strerror(u->done ? u->rc : CURLE_GOT_NOTHING));
		relay_free(u);
		atomic_fetch_add(&r->a->proxy_failed, 1);
		return;
	}
	atomic_fetch_add(&r->a->proxy_ok, 1);
	curl_easy_getinfo(u->c, CURLINFO_CONTENT_TYPE, &ctype);
	snprintf(ct, sizeof(ct), "%s", ctype != NULL ? ctype : "application/json");
	if (u->done && u->rc == CURLE_OK) {
		/* all here already (metrics, errors, most whole completions):
		 * one reply with its length */
		char *text = malloc(u->len - u->off + 1);
		if (text != NULL) {
			memcpy(text, u->buf + u->off, u->len - u->off);
			text[u->len - u->off] = '\0';
		}
		relay_free(u);
		if (text == NULL)
			reply_error(r, 500, "internal", NULL, "out of memory");
		else
			reply_text(r, (unsigned)code, ct, text);
		return;
	}
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, RELAY_CHUNK, relay_read, u, relay_free);
	if (resp == NULL) {
		relay_free(u);
		reply_error(r, 500, "internal", NULL, "out of memory");
		return;
	}
	u->streams = &r->a->proxy_streams;
	atomic_fetch_add(u->streams, 1);
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	reply_response(r, (unsigned)code, resp, ct);
}
