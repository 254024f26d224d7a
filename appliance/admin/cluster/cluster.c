/* Joining, heartbeats, and the unreachable watch. */
#include <curl/curl.h>
#include <sodium.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonnum.h"
#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "cluster/cluster.h"
#include "store/db.h"
#include "gpu/gpu_store.h"
#include "gpu/mig.h"
#include "gpu/mig_apply.h"
#include "cluster/nodes.h"
#include "cluster/remote.h"
#include "deploy/supervisor.h"
#include "metrics/remote.h"

#define MAX_REPLY (1 << 20)

struct cluster {
	struct admin *a;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stop;
	int64_t next_beat;
	int interval;         /* the joined console's heartbeat_s once it said */
	cJSON *mig_results;   /* to send with the next heartbeat */
	int64_t metrics_sent; /* the newest sample the leader took (metrics/remote.h) */
};

struct buf {
	char *p;
	size_t n;
};

static size_t
on_data(char *d, size_t size, size_t n, void *arg)
{
	struct buf *b = arg;
	size_t len = size * n;

	if (b->n + len > MAX_REPLY)
		return 0;
	char *p = realloc(b->p, b->n + len + 1);
	if (p == NULL)
		return 0;
	memcpy(p + b->n, d, len);
	b->p = p;
	b->n += len;
	b->p[b->n] = '\0';
	return len;
}

/* POST body as JSON to url; the status and the JSON reply (may be NULL). */
static int
post_json(const char *url, const char *pin, const char *secret, cJSON *body, long *status, cJSON **reply, char *err)
{
	struct curl_slist *h = NULL;
	struct buf b = { NULL, 0 };
	char hdr[160];
	char *text = cJSON_PrintUnformatted(body);
	CURL *c = curl_easy_init();
	CURLcode cc;

	*reply = NULL;
	*status = 0;
	if (text == NULL || c == NULL) {
		free(text);
		curl_easy_cleanup(c);
		return app_fail(err, APP_ENOMEM, "out of memory");
	}
	h = curl_slist_append(h, "Content-Type: application/json");
	if (secret != NULL) {
		snprintf(hdr, sizeof(hdr), "X-Privai-Node-Secret: %s", secret);
		h = curl_slist_append(h, hdr);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 15L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (pin != NULL && pin[0] != '\0') {
		/* the console's certificate is self-signed: its key pin is the trust */
		curl_easy_setopt(c, CURLOPT_PINNEDPUBLICKEY, pin);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	free(text);
	if (cc != CURLE_OK) {
		free(b.p);
		return app_fail(err, APP_EIO, "%s: %s", url, curl_easy_strerror(cc));
	}
	*reply = b.p != NULL ? cJSON_Parse(b.p) : NULL;
	if (*status >= 400) {
		const char *msg =
			cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(*reply, "error"), "message"));
		app_fail(err, APP_EIO, "%s: HTTP %ld: %s", url, *status, msg != NULL ? msg : "no message");
	}
	free(b.p);
	return APP_OK;
}

/* A heartbeat's outcome in the membership row; the caller holds the
 * store's mutex. */
static void
note_result(struct admin *a, const char *error, const char *state)
{
	sqlite3_stmt *st;
	char err[APP_ERR_LEN];

	if (db_prepare(a->db,
		       "UPDATE membership SET last_ok = CASE WHEN ?1 IS NULL THEN ?2 ELSE last_ok END, "
		       "last_error = ?1, state = coalesce(?3, state)",
		       &st, NULL) == APP_OK) {
		if (error != NULL)
			sqlite3_bind_text(st, 1, error, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, admin_now());
		if (state != NULL)
			sqlite3_bind_text(st, 3, state, -1, SQLITE_TRANSIENT);
	}
	if (db_write(a->db, st, err) != APP_OK)
		log_warn("the heartbeat's outcome was not recorded: %s", err);
}

/* Join once, with the token given at start. */
static void
join(struct cluster *c)
{
	struct admin *a = c->a;
	char url[512], err[APP_ERR_LEN];
	cJSON *body = cJSON_CreateObject(), *reply = NULL;
	long status;

	if (str_fmt(url, sizeof(url), "%s/api/v1/nodes/join", a->cfg.join_url) != APP_OK) {
		cJSON_Delete(body);
		log_error("joining %s failed: the URL is too long", a->cfg.join_url);
		return;
	}
	cJSON_AddStringToObject(body, "token", a->cfg.join_token);
	cJSON_AddStringToObject(body, "name", a->cfg.node_name);
	cJSON_AddStringToObject(body, "url", a->cfg.advertise_url);
	cJSON_AddItemToObject(body, "report", node_report_json(a));
	int rc = post_json(url, a->cfg.join_pin, NULL, body, &status, &reply, err);
	cJSON_Delete(body);
	const char *secret = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "secret"));
	double node_id = cJSON_GetNumberValue(cJSON_GetObjectItem(reply, "node_id"));
	pthread_mutex_lock(&a->db_mu);
	int joined = rc == APP_OK && status == 201 && secret != NULL && node_id > 0;
	if (joined) {
		/* the leader took us: a membership not stored here is a failed join */
		sqlite3_stmt *st;
		if ((rc = db_prepare(a->db,
				     "INSERT INTO membership (id, leader_url, leader_pin, node_id, secret, "
				     "joined_at, last_ok, state) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?5, 'ready')",
				     &st, err)) == APP_OK) {
			sqlite3_bind_text(st, 1, a->cfg.join_url, -1, SQLITE_STATIC);
			if (a->cfg.join_pin != NULL)
				sqlite3_bind_text(st, 2, a->cfg.join_pin, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 3, (int64_t)node_id);
			sqlite3_bind_text(st, 4, secret, -1, SQLITE_TRANSIENT);
			sqlite3_bind_int64(st, 5, admin_now());
			rc = db_write(a->db, st, err);
		}
		joined = rc == APP_OK;
	}
	if (joined) {
		admin_audit(a->db, admin_now(), "system", "cluster.join", a->cfg.join_url, NULL, "ok", NULL);
	} else {
		if (rc == APP_OK && status != 201 && err[0] == '\0')
			msg_fmt(err, sizeof(err), "%s: HTTP %ld", url, status);
		char d[APP_ERR_LEN + 32];
		cJSON *detail = cJSON_CreateObject();
		cJSON_AddStringToObject(detail, "error", err);
		char *dt = cJSON_PrintUnformatted(detail);
		cJSON_Delete(detail);
		snprintf(d, sizeof(d), "%s", dt != NULL ? dt : "{}");
		free(dt);
		admin_audit(a->db, admin_now(), "system", "cluster.join", a->cfg.join_url, NULL, "refused", d);
		log_error("joining %s failed: %s", a->cfg.join_url, err);
	}
	pthread_mutex_unlock(&a->db_mu);
	cJSON_Delete(reply);
}

/* Store and apply a layout the other console planned for one of our
 * GPUs; the result goes back with the next heartbeat. */
static void
apply_planned(struct cluster *c, const cJSON *item)
{
	struct admin *a = c->a;
	const char *uuid = cJSON_GetStringValue(cJSON_GetObjectItem(item, "uuid"));
	const cJSON *list = cJSON_GetObjectItem(item, "instances"), *e;
	struct mig_instance in[MIG_MAX_INSTANCES];
	char err[APP_ERR_LEN] = "", table[32] = "";
	sqlite3_stmt *st;
	int64_t gpu_id = 0;
	int n = 0;

	if (uuid == NULL || !cJSON_IsArray(list))
		return;
	if (sqlite3_prepare_v2(a->db, "SELECT id, coalesce(mig_table, '') FROM gpus WHERE uuid = ?1 AND node_id = ?2",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, uuid, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 2, a->self_node_id);
		if (sqlite3_step(st) == SQLITE_ROW) {
			gpu_id = sqlite3_column_int64(st, 0);
			snprintf(table, sizeof(table), "%s", (const char *)sqlite3_column_text(st, 1));
		}
		sqlite3_finalize(st);
	}
	const struct mig_gpu *t = mig_gpu_find(table);
	if (gpu_id == 0 || t == NULL) {
		snprintf(err, sizeof(err), "GPU %s is not a MIG GPU of this node", uuid);
	} else {
		cJSON_ArrayForEach (e, list) {
			if (n == MIG_MAX_INSTANCES)
				break;
			int64_t start;
			in[n].profile = mig_profile_find(t, cJSON_GetStringValue(cJSON_GetObjectItem(e, "profile")));
			if (in[n].profile == NULL) {
				snprintf(err, sizeof(err), "unknown profile for %s", t->name);
				break;
			}
			/* another node's number: checked before the cast (a missing
			 * one reads as NaN, a cast of which is undefined) */
			if (json_int_in(cJSON_GetObjectItem(e, "start"), 0, 64, &start) != APP_OK) {
				snprintf(err, sizeof(err), "instance %d's start must be a whole number from 0 to 64",
					 n);
				break;
			}
			in[n].start = (int)start;
			n++;
		}
	}
	if (err[0] == '\0' && mig_layout_check(t, in, n, err, sizeof(err)) == 0) {
		if (mig_layout_store(a->db, gpu_id, in, n) == 0) {
			if (mig_apply_gpu(a, gpu_id, err) == APP_OK)
				err[0] = '\0';
		} else {
			snprintf(err, sizeof(err), "store: %s", sqlite3_errmsg(a->db));
		}
	}
	cJSON *r = cJSON_CreateObject();
	cJSON_AddStringToObject(r, "uuid", uuid);
	if (err[0] != '\0')
		cJSON_AddStringToObject(r, "error", err);
	else
		cJSON_AddNullToObject(r, "error");
	cJSON_AddItemToArray(c->mig_results, r);
	admin_audit(a->db, admin_now(), "system", "gpu.mig", uuid, NULL, err[0] ? "refused" : "ok", NULL);
}

static void
heartbeat(struct cluster *c, const struct membership *m)
{
	struct admin *a = c->a;
	char url[512], err[APP_ERR_LEN] = "";
	cJSON *body = cJSON_CreateObject(), *reply = NULL;
	long status;

	if (str_fmt(url, sizeof(url), "%s/api/v1/nodes/%lld/heartbeat", m->leader, (long long)m->node_id) != APP_OK) {
		cJSON_Delete(body);
		pthread_mutex_lock(&a->db_mu);
		note_result(a, "the leader's URL is too long", NULL);
		pthread_mutex_unlock(&a->db_mu);
		return;
	}
	cJSON_AddItemToObject(body, "report", node_report_json(a));
	cJSON_AddItemToObject(body, "mig_results", c->mig_results);
	c->mig_results = cJSON_CreateArray();
	if (a->tls_pin[0] != '\0')
		cJSON_AddStringToObject(body, "tls_pin", a->tls_pin);
	int64_t metrics_last;
	pthread_mutex_lock(&a->db_mu);
	cJSON_AddItemToObject(body, "deployments", member_reports(a));
	cJSON_AddItemToObject(body, "metrics", metrics_since(a->db, a->self_node_id, c->metrics_sent, &metrics_last));
	pthread_mutex_unlock(&a->db_mu);
	int rc = post_json(url, m->pin, m->secret, body, &status, &reply, err);
	cJSON_Delete(body);
	const char *state = cJSON_GetStringValue(cJSON_GetObjectItem(reply, "state"));
	pthread_mutex_lock(&a->db_mu);
	if (rc == APP_OK && status == 410) {
		note_result(a, err, "removed");
		admin_audit(a->db, admin_now(), "system", "cluster.removed", m->leader, NULL, "ok", NULL);
	} else if (rc != APP_OK || status != 200 || state == NULL) {
		note_result(a, err[0] ? err : "no state in the heartbeat's answer", NULL);
	} else {
		/* follow a drain or resume ordered on the other console */
		if (strcmp(state, m->state) != 0 &&
		    (strcmp(state, "draining") == 0 || strcmp(m->state, "draining") == 0)) {
			node_self_drain(a->db, strcmp(state, "draining") == 0);
			admin_audit(a->db, admin_now(), "system",
				    strcmp(state, "draining") == 0 ? "node.drain" : "node.resume", a->cfg.node_name,
				    NULL, "ok", NULL);
			supervisor_kick(a->sup);
		}
		note_result(a, NULL, state);
		c->metrics_sent = metrics_last; /* else sent again: the leader keeps one of each */
		double hb = cJSON_GetNumberValue(cJSON_GetObjectItem(reply, "heartbeat_s"));
		if (hb >= 1 && hb <= 3600)
			c->interval = (int)hb; /* it judges reachability by its own */
		const cJSON *item;
		cJSON_ArrayForEach (item, cJSON_GetObjectItem(reply, "mig"))
			apply_planned(c, item);
		member_sync(a, m, reply);
	}
	pthread_mutex_unlock(&a->db_mu);
	cJSON_Delete(reply);
}

/* Nodes that missed three heartbeats become unreachable. */
static void
watch(struct admin *a)
{
	sqlite3_stmt *st;
	int64_t now = admin_now();

	pthread_mutex_lock(&a->db_mu);
	int64_t lost[64];
	char why[300], names[64][130], err[APP_ERR_LEN];
	int n = 0;
	if (sqlite3_prepare_v2(a->db,
			       "UPDATE nodes SET state = 'unreachable', state_reason = 'no heartbeat for ' || "
			       "(?1 - last_heartbeat) || ' s' WHERE is_self = 0 AND state = 'ready' "
			       "AND last_heartbeat < ?1 - ?2 RETURNING name, id",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, now);
		sqlite3_bind_int64(st, 2, 3 * (int64_t)a->cfg.heartbeat_s);
		while (sqlite3_step(st) == SQLITE_ROW) {
			admin_audit(a->db, now, "system", "node.unreachable", (const char *)sqlite3_column_text(st, 0),
				    NULL, "ok", NULL);
			if (n < 64) {
				snprintf(names[n], sizeof(names[n]), "%s", (const char *)sqlite3_column_text(st, 0));
				lost[n++] = sqlite3_column_int64(st, 1);
			}
		}
		sqlite3_finalize(st);
	}
	for (int i = 0; i < n; i++) {
		msg_fmt(why, sizeof(why), "node %s is unreachable; what its engine does is not known", names[i]);
		if (remote_node_lost(a->db, lost[i], why, err) != APP_OK)
			log_warn("node %s's deployments not marked unreachable: %s", names[i], err);
	}
	pthread_mutex_unlock(&a->db_mu);
}

struct own_report {
	struct admin *a;
	cJSON *report;
	uint64_t epoch; /* a->gpu_epoch when the report was read */
};

static int
store_own_report(sqlite3 *db, void *arg, char *err)
{
	const struct own_report *o = arg;

	(void)db;
	return node_store_own_report(o->a, o->report, o->epoch, err);
}

/* This node's own report, into its own store.  It is read without the
 * store's mutex (host health may wait on the fabric's socket), so a MIG
 * change may come between the read and the store. */
static void
report_self(struct admin *a)
{
	char err[APP_ERR_LEN];
	uint64_t epoch = atomic_load(&a->gpu_epoch);
	cJSON *r = node_report_json(a);

	struct own_report o = { a, r, epoch };

	pthread_mutex_lock(&a->db_mu);
	if (r != NULL && db_transaction(a->db, store_own_report, &o, err) != APP_OK)
		log_warn("this node's report was not stored: %s", err);
	pthread_mutex_unlock(&a->db_mu);
	cJSON_Delete(r);
}

static void *
run(void *arg)
{
	struct cluster *c = arg;
	struct admin *a = c->a;
	struct membership m;

	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		pthread_mutex_unlock(&c->mu);
		int64_t now = admin_now();
		watch(a);
		if (now >= c->next_beat) {
			c->next_beat = now + (c->interval > 0 ? c->interval : a->cfg.heartbeat_s);
			report_self(a);
			pthread_mutex_lock(&a->db_mu);
			int member = load_membership(a, &m);
			pthread_mutex_unlock(&a->db_mu);
			if (!member && a->cfg.join_url != NULL)
				join(c);
			else if (member && strcmp(m.state, "removed") != 0)
				heartbeat(c, &m);
		}
		pthread_mutex_lock(&c->mu);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		if (!c->stop)
			pthread_cond_timedwait(&c->cv, &c->mu, &ts);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int
cluster_start(struct admin *a, char *err)
{
	struct cluster *c = calloc(1, sizeof(*c));

	if (c == NULL || (c->mig_results = cJSON_CreateArray()) == NULL) {
		free(c);
		return app_fail(err, APP_ENOMEM, "out of memory");
	}
	c->a = a;
	/* the key this node relays to other nodes' engines with; a new one
	 * each start, its hash sent in every heartbeat answer */
	unsigned char raw[32], h[crypto_hash_sha256_BYTES];
	if (sodium_init() < 0) {
		cJSON_Delete(c->mig_results);
		free(c);
		return app_fail(err, APP_EIO, "libsodium failed to initialise");
	}
	randombytes_buf(raw, sizeof(raw));
	memcpy(a->relay_key, "rk-", 3);
	sodium_bin2base64(a->relay_key + 3, sizeof(a->relay_key) - 3, raw, sizeof(raw),
			  sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	crypto_hash_sha256(h, (const unsigned char *)a->relay_key, strlen(a->relay_key));
	sodium_bin2hex(a->relay_key_sha256, sizeof(a->relay_key_sha256), h, sizeof(h));
	c->next_beat = admin_now() + a->cfg.heartbeat_s; /* registration just reported */
	if (a->cfg.join_url != NULL)
		c->next_beat = 0;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	if (pthread_create(&c->thread, NULL, run, c) != 0) {
		cJSON_Delete(c->mig_results);
		free(c);
		return app_fail(err, APP_EIO, "cannot start the cluster thread: %s", strerror(errno));
	}
	a->cluster = c;
	return APP_OK;
}

void
cluster_stop(struct admin *a)
{
	struct cluster *c = a->cluster;

	if (c == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	cJSON_Delete(c->mig_results);
	cJSON_Delete(a->member_errors);
	a->member_errors = NULL;
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
	a->cluster = NULL;
}
