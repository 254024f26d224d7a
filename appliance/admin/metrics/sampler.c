/* The metrics sampler (metrics/sampler.h). */
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "log.h"
#include "deploy/supervisor.h"
#include "gpu/nvml.h"
#include "metrics/host_stats.h"
#include "metrics/prom.h"
#include "metrics/sampler.h"
#include "worker.h"

#define MAX_ENGINES 64
#define MAX_SAMPLES 2048
#define SCRAPE_MAX (4 << 20)

/* What an engine's counters were at the last scrape, for rates. */
struct engine_prev {
	int64_t id;
	int64_t t_ms;
	double gen, prompt, finished;
	struct prom_hist ttft, itl;
};

struct sample {
	char subject[112];
	const char *name;
	double value;
};

struct metrics {
	struct admin *a;
	struct worker w;
	struct host_counters host;
	int64_t host_ms;
	struct engine_prev prev[MAX_ENGINES];
	int n_prev;
	struct sample *batch;
	int n;
	struct nvml_reading gpus[NVML_MAX_GPUS * (NVML_MAX_INSTANCES + 1)];
	int warned_nvml;
};

static void
add(struct metrics *m, const char *subject, const char *name, double v)
{
	if (!isfinite(v) || m->n == MAX_SAMPLES)
		return;
	struct sample *s = &m->batch[m->n++];
	snprintf(s->subject, sizeof(s->subject), "%s", subject);
	s->name = name;
	s->value = v;
}

struct body {
	char *text;
	size_t len;
};

static size_t
keep_body(char *p, size_t size, size_t n, void *arg)
{
	struct body *b = arg;
	size_t take = size * n;

	if (b->len + take > SCRAPE_MAX)
		return 0;
	char *grown = realloc(b->text, b->len + take + 1);
	if (grown == NULL)
		return 0;
	memcpy(grown + b->len, p, take);
	b->len += take;
	grown[b->len] = '\0';
	b->text = grown;
	return take;
}

/* GET the engine's /metrics (it needs no key); malloc'd text or NULL. */
static char *
scrape(int port)
{
	char url[64];
	long code = 0;
	struct body b = { NULL, 0 };
	CURL *c = curl_easy_init();

	if (c == NULL)
		return NULL;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", port);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	if (code != 200) {
		free(b.text);
		return NULL;
	}
	return b.text;
}

static struct engine_prev *
prev_of(struct metrics *m, int64_t id)
{
	for (int i = 0; i < m->n_prev; i++)
		if (m->prev[i].id == id)
			return &m->prev[i];
	if (m->n_prev == MAX_ENGINES)
		return NULL;
	struct engine_prev *p = &m->prev[m->n_prev++];
	memset(p, 0, sizeof(*p));
	p->id = id;
	return p;
}

static void
sample_engine(struct metrics *m, int64_t id, int port, int64_t now_ms)
{
	char subject[64], *text = scrape(port);
	struct engine_prev *p = prev_of(m, id), cur;
	double v;

	if (text == NULL || p == NULL) {
		free(text);
		return;
	}
	snprintf(subject, sizeof(subject), "deployment:%lld", (long long)id);
	memset(&cur, 0, sizeof(cur));
	cur.id = id;
	cur.t_ms = now_ms;
	prom_value(text, "vllm:generation_tokens_total", &cur.gen);
	prom_value(text, "vllm:prompt_tokens_total", &cur.prompt);
	prom_value(text, "vllm:request_success_total", &cur.finished);
	prom_histogram(text, "vllm:time_to_first_token_seconds", &cur.ttft);
	prom_histogram(text, "vllm:inter_token_latency_seconds", &cur.itl);
	if (prom_value(text, "vllm:num_requests_running", &v) == 0)
		add(m, subject, "running", v);
	if (prom_value(text, "vllm:num_requests_waiting", &v) == 0)
		add(m, subject, "waiting", v);
	if (prom_value(text, "vllm:kv_cache_usage_perc", &v) == 0)
		add(m, subject, "kv_pct", 100 * v);
	/* rates need the scrape before, of the same engine: a restarted one's
	 * counters went back to 0 */
	double dt = (double)(now_ms - p->t_ms) / 1000.0;
	if (p->t_ms > 0 && dt > 0 && cur.gen >= p->gen && cur.finished >= p->finished) {
		add(m, subject, "tokens_per_s", (cur.gen - p->gen) / dt);
		add(m, subject, "prompt_tokens_per_s", (cur.prompt - p->prompt) / dt);
		add(m, subject, "requests_per_min", (cur.finished - p->finished) * 60 / dt);
		/* the seconds those rates are over: a late tick makes the
		 * interval longer than --metrics-interval-s, and rate x interval
		 * gives back the count */
		add(m, subject, "rate_interval_s", dt);
		add(m, subject, "ttft_p50_s", prom_quantile(&cur.ttft, &p->ttft, 0.5));
		add(m, subject, "ttft_p95_s", prom_quantile(&cur.ttft, &p->ttft, 0.95));
		add(m, subject, "itl_p50_s", prom_quantile(&cur.itl, &p->itl, 0.5));
		add(m, subject, "itl_p95_s", prom_quantile(&cur.itl, &p->itl, 0.95));
	}
	*p = cur;
	free(text);
}

/* The deployments this node runs, sampled through their engines. */
static void
sample_engines(struct metrics *m, int64_t now_ms)
{
	struct admin *a = m->a;
	int64_t ids[MAX_ENGINES];
	int n = 0;
	sqlite3_stmt *st;

	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "SELECT id FROM deployments WHERE node_id IS NULL AND desired = 'running' ORDER BY id",
			       -1, &st, NULL) == SQLITE_OK) {
		while (n < MAX_ENGINES && sqlite3_step(st) == SQLITE_ROW)
			ids[n++] = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&a->db_mu);
	/* forget the engines of deployments stopped or gone, so their slots
	 * serve new ones */
	int kept = 0;
	for (int i = 0; i < m->n_prev; i++) {
		int live = 0;
		for (int k = 0; k < n && !live; k++)
			live = ids[k] == m->prev[i].id;
		if (live)
			m->prev[kept++] = m->prev[i];
	}
	m->n_prev = kept;
	for (int i = 0; i < n; i++) {
		char key[80];
		int port;
		if (supervisor_endpoint(a->sup, ids[i], &port, key, sizeof(key)) == 0)
			sample_engine(m, ids[i], port, now_ms);
	}
}

static void
sample_host(struct metrics *m, int64_t now_ms)
{
	struct host_counters now;
	char subject[64];

	host_counters_read(m->a->cfg.sys_root, &now);
	snprintf(subject, sizeof(subject), "node:%lld", (long long)m->a->self_node_id);
	double dt = (double)(now_ms - m->host_ms) / 1000.0;
	if (m->host_ms > 0 && dt > 0) {
		add(m, subject, "cpu_pct", host_cpu_pct(&now, &m->host));
		if (now.ok_net && m->host.ok_net && now.rx_bytes >= m->host.rx_bytes &&
		    now.tx_bytes >= m->host.tx_bytes) {
			add(m, subject, "net_rx_bytes_per_s", (double)(now.rx_bytes - m->host.rx_bytes) / dt);
			add(m, subject, "net_tx_bytes_per_s", (double)(now.tx_bytes - m->host.tx_bytes) / dt);
		}
	}
	if (now.ok_mem) {
		add(m, subject, "mem_used_bytes", now.mem_total - now.mem_avail);
		add(m, subject, "mem_total_bytes", now.mem_total);
	}
	if (now.load1 >= 0)
		add(m, subject, "load1", now.load1);
	m->host = now;
	m->host_ms = now_ms;
}

static void
sample_gpus(struct metrics *m)
{
	struct nvml_reading *r = m->gpus;
	char err[APP_ERR_LEN], subject[112];
	int n, rc = nvml_read_all(r, (int)(sizeof(m->gpus) / sizeof(m->gpus[0])), &n, err);

	if (rc != APP_OK) {
		if (rc != APP_ENOTFOUND && !m->warned_nvml)
			log_warn("GPU telemetry: %s (said once)", err);
		m->warned_nvml = rc != APP_ENOTFOUND;
		return;
	}
	for (int i = 0; i < n; i++) {
		snprintf(subject, sizeof(subject), "%s:%.100s", r[i].parent[0] ? "mig" : "gpu", r[i].uuid);
		add(m, subject, "util_pct", r[i].util_pct);
		add(m, subject, "mem_util_pct", r[i].mem_util_pct);
		add(m, subject, "mem_used_bytes", r[i].mem_used_bytes);
		add(m, subject, "mem_total_bytes", r[i].mem_total_bytes);
		add(m, subject, "temp_c", r[i].temp_c);
		add(m, subject, "power_w", r[i].power_w);
		add(m, subject, "ecc_corrected", r[i].ecc_corrected);
		add(m, subject, "ecc_uncorrected", r[i].ecc_uncorrected);
	}
}

/* The batch into the store at ts, and what is past keeping out of it. */
static void
store_batch(struct metrics *m, int64_t ts)
{
	struct admin *a = m->a;
	sqlite3_stmt *st = NULL;
	int ok = 1;

	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_exec(a->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(a->db,
			       "INSERT OR REPLACE INTO metric_samples (subject, name, ts, value) VALUES (?, ?, ?, ?)",
			       -1, &st, NULL) != SQLITE_OK)
		ok = 0;
	for (int i = 0; ok && i < m->n; i++) {
		sqlite3_bind_text(st, 1, m->batch[i].subject, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, m->batch[i].name, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, ts);
		sqlite3_bind_double(st, 4, m->batch[i].value);
		ok = sqlite3_step(st) == SQLITE_DONE;
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	if (ok) {
		sqlite3_stmt *del;
		if (sqlite3_prepare_v2(a->db, "DELETE FROM metric_samples WHERE ts < ?", -1, &del, NULL) == SQLITE_OK) {
			sqlite3_bind_int64(del, 1, ts - (int64_t)a->cfg.metrics_keep_hours * 3600);
			ok = sqlite3_step(del) == SQLITE_DONE;
			sqlite3_finalize(del);
		}
	}
	if (!ok)
		log_error("metrics history: cannot store %d samples: %s", m->n, sqlite3_errmsg(a->db));
	sqlite3_exec(a->db, ok ? "COMMIT" : "ROLLBACK", NULL, NULL, NULL);
	pthread_mutex_unlock(&a->db_mu);
}

/* One sample of everything; seconds until the next interval begins. */
static int64_t
tick(struct metrics *m)
{
	int64_t every = m->a->cfg.metrics_interval_s, now = admin_now(), now_ms = admin_mono_ms();

	m->n = 0;
	sample_host(m, now_ms);
	sample_gpus(m);
	sample_engines(m, now_ms);
	store_batch(m, now - now % every);
	int64_t wait = every - admin_now() % every;
	return wait < 1 ? 1 : wait;
}

static void *
metrics_main(void *arg)
{
	struct metrics *m = arg;

	while (worker_wait(&m->w, tick(m)))
		;
	return NULL;
}

int
metrics_start(struct admin *a, char *err)
{
	struct metrics *m = calloc(1, sizeof(*m));

	if (m == NULL || (m->batch = calloc(MAX_SAMPLES, sizeof(*m->batch))) == NULL) {
		free(m);
		return app_fail(err, APP_ENOMEM, "out of memory");
	}
	m->a = a;
	if (worker_start(&m->w, metrics_main, m) != 0) {
		free(m->batch);
		free(m);
		return app_fail(err, APP_EIO, "cannot start the metrics sampler thread");
	}
	a->metrics = m;
	return APP_OK;
}

void
metrics_stop(struct admin *a)
{
	struct metrics *m = a->metrics;

	if (m == NULL)
		return;
	worker_stop(&m->w);
	free(m->batch);
	free(m);
	a->metrics = NULL;
}
