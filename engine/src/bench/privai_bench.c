/*
 * privai-bench: a load generator for any OpenAI-compatible server, in the
 * mould of GenAI-Perf.  Each of C client threads sends streaming requests
 * back to back with synthetic prompts of a chosen length; per request it
 * times the first and second streamed chunks and the end, and counts output
 * tokens from the usage the server reports.  For each concurrency of a
 * sweep it prints TTFT, time to second token, inter-token latency and
 * request latency (avg, min, max, p50, p90, p99), output tokens/s and
 * requests/s, as a table and optionally as JSON lines and CSV.
 *
 * Prompts on /v1/completions are token ids, so the input length is exact;
 * on /v1/chat/completions they are words, and the length is what the
 * server's usage says.
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "thread_sched.h"

struct opts {
	const char *url, *model, *api_key, *json_path, *csv_path, *endpoint;
	int in_mean, in_std, out_tokens, requests, levels[32], n_levels, warmup;
	unsigned seed;
	double temperature; /* < 0: not sent (the server's default) */
	double top_p;       /* < 0: not sent */
	int top_k;          /* < 0: not sent */
};

struct sample {
	double ttft, t2t, latency, itl;
	int out_tokens, in_tokens, ok;
	char error[160];
};

struct run {
	const struct opts *o;
	struct sample *s;
	atomic_int next;
	int total;
	char chat;
};

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Box-Muller, from a per-request seed so runs are repeatable. */
static int
input_len(const struct opts *o, unsigned *state)
{
	double u1 = (rand_r(state) + 1.0) / (RAND_MAX + 2.0), u2 = (rand_r(state) + 1.0) / (RAND_MAX + 2.0);
	double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
	int n = (int)lround(o->in_mean + o->in_std * z);

	return n < 1 ? 1 : n;
}

static const char *words[] = {
	"alpha", "river",  "stone",  "quiet",  "market", "engine", "garden", "silver", "window", "morning",
	"paper", "signal", "orange", "valley", "bridge", "winter", "copper", "forest", "planet", "harbor",
};

static char *
request_body(const struct opts *o, int chat, int idx)
{
	unsigned st = o->seed * 2654435761u + (unsigned)idx;
	int n = input_len(o, &st);
	cJSON *b = cJSON_CreateObject();

	if (o->model != NULL)
		cJSON_AddStringToObject(b, "model", o->model);
	if (chat) {
		size_t cap = (size_t)n * 8 + 1, len = 0;
		char *text = malloc(cap);
		for (int i = 0; text != NULL && i < n; i++)
			len += (size_t)snprintf(text + len, cap - len, "%s%s", i ? " " : "",
						words[rand_r(&st) % (sizeof(words) / sizeof(words[0]))]);
		cJSON *msgs = cJSON_AddArrayToObject(b, "messages"), *m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "role", "user");
		cJSON_AddStringToObject(m, "content", text ? text : "");
		cJSON_AddItemToArray(msgs, m);
		free(text);
	} else {
		cJSON *p = cJSON_AddArrayToObject(b, "prompt");
		for (int i = 0; i < n; i++)
			cJSON_AddItemToArray(p, cJSON_CreateNumber(100 + rand_r(&st) % 900));
	}
	cJSON_AddNumberToObject(b, "max_tokens", o->out_tokens);
	cJSON_AddNumberToObject(b, "min_tokens", o->out_tokens);
	cJSON_AddBoolToObject(b, "ignore_eos", 1);
	if (o->temperature >= 0)
		cJSON_AddNumberToObject(b, "temperature", o->temperature);
	if (o->top_p >= 0)
		cJSON_AddNumberToObject(b, "top_p", o->top_p);
	if (o->top_k >= 0)
		cJSON_AddNumberToObject(b, "top_k", o->top_k);
	cJSON_AddBoolToObject(b, "stream", 1);
	cJSON *so = cJSON_AddObjectToObject(b, "stream_options");
	cJSON_AddBoolToObject(so, "include_usage", 1);
	char *js = cJSON_PrintUnformatted(b);
	cJSON_Delete(b);
	return js;
}

/* SSE parsing state for one request. */
struct stream {
	struct sample *s;
	double t0;
	int chunks_with_text;
	char line[1 << 16];
	size_t len;
	int chat, done, overflow;
};

static void
on_event(struct stream *st, const char *data)
{
	if (strcmp(data, "[DONE]") == 0) {
		st->done = 1;
		return;
	}
	cJSON *j = cJSON_Parse(data);
	if (j == NULL)
		return;
	const cJSON *u = cJSON_GetObjectItem(j, "usage"), *ch = cJSON_GetObjectItem(j, "choices"), *c;
	if (cJSON_IsObject(u)) {
		st->s->out_tokens = cJSON_GetObjectItem(u, "completion_tokens")->valueint;
		st->s->in_tokens = cJSON_GetObjectItem(u, "prompt_tokens")->valueint;
	}
	cJSON_ArrayForEach (c, ch) {
		const cJSON *t = st->chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content")
					  : cJSON_GetObjectItem(c, "text");
		/* a chunk per step of new tokens: its text may be empty (half a
		 * UTF-8 character), so count chunks, not text */
		const cJSON *fin = cJSON_GetObjectItem(c, "finish_reason");
		int has_text = cJSON_IsString(t) && t->valuestring[0] != '\0';
		int role_only = st->chat && cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "role") != NULL;
		if (!role_only && (has_text || fin == NULL || cJSON_IsNull(fin))) {
			double dt = now() - st->t0;
			if (st->chunks_with_text == 0)
				st->s->ttft = dt;
			else if (st->chunks_with_text == 1)
				st->s->t2t = dt;
			st->chunks_with_text++;
		}
	}
	const cJSON *err = cJSON_GetObjectItem(j, "error");
	if (err != NULL)
		snprintf(st->s->error, sizeof(st->s->error), "%s",
			 cJSON_GetStringValue(cJSON_GetObjectItem(err, "message")) ?: "error event");
	cJSON_Delete(j);
}

static size_t
on_data(char *p, size_t size, size_t n, void *arg)
{
	struct stream *st = arg;
	size_t total = size * n;

	for (size_t i = 0; i < total; i++) {
		if (p[i] == '\n') {
			st->line[st->len] = '\0';
			if (strncmp(st->line, "data: ", 6) == 0)
				on_event(st, st->line + 6);
			else if (st->len > 0 && st->line[0] == '{') /* a JSON error body */
				snprintf(st->s->error, sizeof(st->s->error), "%.150s", st->line);
			st->len = 0;
		} else if (st->len + 1 < sizeof(st->line)) {
			st->line[st->len++] = p[i];
		} else {
			st->overflow = 1;
		}
	}
	return total;
}

static void
one_request(CURL *curl, const struct opts *o, int chat, int idx, struct sample *s)
{
	char url[1024], auth[600];
	struct curl_slist *h = NULL;
	struct stream *st = calloc(1, sizeof(*st));
	char *body = request_body(o, chat, idx);
	long code = 0;

	if (st == NULL || body == NULL) {
		snprintf(s->error, sizeof(s->error), "out of memory");
		free(st);
		free(body);
		return;
	}
	st->s = s;
	st->chat = chat;
	snprintf(url, sizeof(url), "%s%s", o->url, chat ? "/v1/chat/completions" : "/v1/completions");
	h = curl_slist_append(h, "Content-Type: application/json");
	if (o->api_key != NULL) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->api_key);
		h = curl_slist_append(h, auth);
	}
	curl_easy_reset(curl);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, st);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	st->t0 = now();
	CURLcode rc = curl_easy_perform(curl);
	s->latency = now() - st->t0;
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
	if (st->len > 0 && st->line[0] == '{' && s->error[0] == '\0') { /* an error body without a newline */
		st->line[st->len] = '\0';
		snprintf(s->error, sizeof(s->error), "HTTP %ld %.140s", code, st->line);
	}
	if (rc != CURLE_OK)
		snprintf(s->error, sizeof(s->error), "%s", curl_easy_strerror(rc));
	else if (code != 200 && s->error[0] == '\0')
		snprintf(s->error, sizeof(s->error), "HTTP %ld", code);
	else if (!st->done && s->error[0] == '\0')
		snprintf(s->error, sizeof(s->error), "the stream ended without [DONE]");
	s->ok = s->error[0] == '\0' && st->chunks_with_text > 0;
	if (s->ok && s->out_tokens > 1)
		s->itl = (s->latency - s->ttft) / (s->out_tokens - 1);
	curl_slist_free_all(h);
	free(body);
	free(st);
}

static void *
client(void *arg)
{
	struct run *r = arg;
	CURL *curl = curl_easy_init();
	int i;

	/* a client beside the server on the same CPUs: a short slice, so
	 * that a chunk's arrival runs it at once rather than after an
	 * engine thread's slice, which is not the server's time (a hint;
	 * thread_sched.h) */
	(void)thread_sched_set(SCHED_OTHER, THREAD_SLICE_SHORT_NS);
	while (curl != NULL && (i = atomic_fetch_add(&r->next, 1)) < r->total)
		one_request(curl, r->o, r->chat, i, &r->s[i]);
	if (curl != NULL)
		curl_easy_cleanup(curl);
	return NULL;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

struct stat_row {
	double avg, min, max, p50, p90, p99;
};

/* Percentiles by linear interpolation between closest ranks. */
static struct stat_row
stats(double *v, int n)
{
	struct stat_row r = { 0 };

	if (n == 0)
		return r;
	qsort(v, (size_t)n, sizeof(double), cmp_double);
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += v[i];
	r.avg = sum / n;
	r.min = v[0];
	r.max = v[n - 1];
	double q[3] = { 0.5, 0.9, 0.99 }, *out[3] = { &r.p50, &r.p90, &r.p99 };
	for (int k = 0; k < 3; k++) {
		double pos = q[k] * (n - 1);
		int lo = (int)floor(pos);
		int hi = lo + 1 < n ? lo + 1 : lo;
		*out[k] = v[lo] + (v[hi] - v[lo]) * (pos - lo);
	}
	return r;
}

static int
parse_levels(const char *s, struct opts *o)
{
	char *copy = strdup(s), *save = NULL;

	o->n_levels = 0;
	for (char *t = strtok_r(copy, ",", &save); t != NULL && o->n_levels < 32; t = strtok_r(NULL, ",", &save)) {
		char *end;
		long v = strtol(t, &end, 10);
		if (*end != '\0' || v < 1 || v > 4096) {
			free(copy);
			return -1;
		}
		o->levels[o->n_levels++] = (int)v;
	}
	free(copy);
	return o->n_levels > 0 ? 0 : -1;
}

static void
usage(FILE *fp)
{
	fputs("usage: privai-bench [options]\n"
	      "  --url URL              server base (default http://127.0.0.1:8000)\n"
	      "  --model NAME           model field to send (default: none)\n"
	      "  --api-key KEY          bearer key\n"
	      "  --endpoint completions|chat   (default completions: token-id prompts, exact lengths)\n"
	      "  --input-tokens N       mean prompt length (default 128)\n"
	      "  --input-stddev N       prompt length standard deviation (default 0)\n"
	      "  --output-tokens N      tokens per response (max_tokens = min_tokens, ignore_eos; default 64)\n"
	      "  --concurrency LIST     e.g. 1,2,4,8,16 (default 1)\n"
	      "  --requests N           requests per concurrency level (default 4 x concurrency, at least 8)\n"
	      "  --warmup N             unmeasured requests before each level (default 1)\n"
	      "  --seed N               prompt seed (default 1)\n"
	      "  --temperature F        sampling temperature to send, 0 to 2 (default: none sent, the\n"
	      "                         server's own; OpenAI servers use 1)\n"
	      "  --top-p F              top_p to send, above 0 and at most 1 (default: none sent)\n"
	      "  --top-k N              top_k to send, 0 for none (default: none sent)\n"
	      "  --json FILE            append one JSON object per level\n"
	      "  --csv FILE             write one CSV row per level\n",
	      fp);
}

static int
parse_int_opt(const char *name, const char *v, int lo, int hi, int *out)
{
	char *end;
	long x;

	if (v == NULL) {
		fprintf(stderr, "privai-bench: %s needs a value\n", name);
		return -1;
	}
	errno = 0;
	x = strtol(v, &end, 10);
	if (errno != 0 || *end != '\0' || x < lo || x > hi) {
		fprintf(stderr, "privai-bench: %s must be an integer from %d to %d, got '%s'\n", name, lo, hi, v);
		return -1;
	}
	*out = (int)x;
	return 0;
}

/* A number in [lo, hi], or in (lo, hi] when open_lo. */
static int
parse_float_opt(const char *name, const char *v, double lo, double hi, int open_lo, double *out)
{
	char *end;
	double x = strtod(v, &end);

	if (*end != '\0' || end == v || !(open_lo ? x > lo : x >= lo) || !(x <= hi)) {
		fprintf(stderr, "privai-bench: %s must be a number from %g%s to %g, got '%s'\n", name, lo,
			open_lo ? " (not included)" : "", hi, v);
		return -1;
	}
	*out = x;
	return 0;
}

static int
parse_args(int argc, char **argv, struct opts *o)
{
	int seed = 1;

	*o = (struct opts){ .url = "http://127.0.0.1:8000",
			    .endpoint = "completions",
			    .in_mean = 128,
			    .out_tokens = 64,
			    .levels = { 1 },
			    .n_levels = 1,
			    .warmup = 1,
			    .temperature = -1,
			    .top_p = -1,
			    .top_k = -1 };
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc = 0;
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		}
		if (v == NULL) {
			fprintf(stderr, "privai-bench: %s needs a value\n", a);
			return -1;
		}
		if (strcmp(a, "--url") == 0)
			o->url = v;
		else if (strcmp(a, "--model") == 0)
			o->model = v;
		else if (strcmp(a, "--api-key") == 0)
			o->api_key = v;
		else if (strcmp(a, "--json") == 0)
			o->json_path = v;
		else if (strcmp(a, "--csv") == 0)
			o->csv_path = v;
		else if (strcmp(a, "--endpoint") == 0)
			o->endpoint = v;
		else if (strcmp(a, "--input-tokens") == 0)
			rc = parse_int_opt(a, v, 1, 1 << 20, &o->in_mean);
		else if (strcmp(a, "--input-stddev") == 0)
			rc = parse_int_opt(a, v, 0, 1 << 20, &o->in_std);
		else if (strcmp(a, "--output-tokens") == 0)
			rc = parse_int_opt(a, v, 1, 1 << 20, &o->out_tokens);
		else if (strcmp(a, "--requests") == 0)
			rc = parse_int_opt(a, v, 1, 1 << 20, &o->requests);
		else if (strcmp(a, "--warmup") == 0)
			rc = parse_int_opt(a, v, 0, 1000, &o->warmup);
		else if (strcmp(a, "--seed") == 0)
			rc = parse_int_opt(a, v, 0, 1 << 30, &seed);
		else if (strcmp(a, "--temperature") == 0)
			rc = parse_float_opt(a, v, 0, 2, 0, &o->temperature);
		else if (strcmp(a, "--top-p") == 0)
			rc = parse_float_opt(a, v, 0, 1, 1, &o->top_p);
		else if (strcmp(a, "--top-k") == 0)
			rc = parse_int_opt(a, v, 0, 1 << 20, &o->top_k);
		else if (strcmp(a, "--concurrency") == 0) {
			if ((rc = parse_levels(v, o)) < 0)
				fprintf(stderr, "privai-bench: --concurrency must list integers 1..4096, got '%s'\n",
					v);
		} else {
			usage(stderr);
			fprintf(stderr, "privai-bench: unknown option '%s'\n", a);
			return -1;
		}
		if (rc < 0)
			return -1;
		i++;
	}
	if (strcmp(o->endpoint, "completions") != 0 && strcmp(o->endpoint, "chat") != 0) {
		fprintf(stderr, "privai-bench: --endpoint must be completions or chat\n");
		return -1;
	}
	o->seed = (unsigned)seed;
	return 0;
}

static void
report_header(FILE *out, FILE *csv)
{
	fprintf(out, "%5s %5s %7s %9s | %-29s | %-29s | %-29s | %-29s\n", "conc", "reqs", "out t/s", "req/s",
		"TTFT ms avg/p50/p90/p99", "2nd token ms avg/p50/p99", "ITL ms avg/p50/p90/p99",
		"latency s avg/p50/p90/p99");
	if (csv != NULL)
		fputs("concurrency,requests,failed,input_tokens_avg,output_tokens_avg,output_tokens_per_s,"
		      "requests_per_s,ttft_avg_ms,ttft_min_ms,ttft_max_ms,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,"
		      "t2t_avg_ms,t2t_p50_ms,t2t_p99_ms,itl_avg_ms,itl_min_ms,itl_max_ms,itl_p50_ms,itl_p90_ms,"
		      "itl_p99_ms,latency_avg_s,latency_min_s,latency_max_s,latency_p50_s,latency_p90_s,"
		      "latency_p99_s\n",
		      csv);
}

static void
json_stat(cJSON *o, const char *name, struct stat_row r, double scale)
{
	cJSON *s = cJSON_AddObjectToObject(o, name);

	cJSON_AddNumberToObject(s, "avg", r.avg * scale);
	cJSON_AddNumberToObject(s, "min", r.min * scale);
	cJSON_AddNumberToObject(s, "max", r.max * scale);
	cJSON_AddNumberToObject(s, "p50", r.p50 * scale);
	cJSON_AddNumberToObject(s, "p90", r.p90 * scale);
	cJSON_AddNumberToObject(s, "p99", r.p99 * scale);
}

/* Print one level; returns the number of failed requests. */
static int
report_level(const struct opts *o, int conc, struct sample *s, int n, double wall, FILE *out, FILE *csv)
{
	double *ttft = calloc((size_t)n, sizeof(double)), *t2t = calloc((size_t)n, sizeof(double));
	double *itl = calloc((size_t)n, sizeof(double)), *lat = calloc((size_t)n, sizeof(double));
	int ok = 0, n_t2t = 0, n_itl = 0, failed = 0;
	long out_tok = 0, in_tok = 0;

	for (int i = 0; ttft && t2t && itl && lat && i < n; i++) {
		if (!s[i].ok) {
			if (failed++ < 3)
				fprintf(stderr, "privai-bench: request %d failed: %s\n", i, s[i].error);
			continue;
		}
		ttft[ok] = s[i].ttft;
		lat[ok] = s[i].latency;
		ok++;
		if (s[i].t2t > 0)
			t2t[n_t2t++] = s[i].t2t;
		if (s[i].out_tokens > 1)
			itl[n_itl++] = s[i].itl;
		out_tok += s[i].out_tokens;
		in_tok += s[i].in_tokens;
	}
	struct stat_row T = stats(ttft, ok), S = stats(t2t, n_t2t), I = stats(itl, n_itl), L = stats(lat, ok);
	double tps = out_tok / wall, rps = ok / wall;
	fprintf(out,
		"%5d %5d %7.1f %9.3f | %6.0f %6.0f %6.0f %7.0f | %8.0f %8.0f %9.0f | %6.1f %6.1f %6.1f %7.1f | "
		"%6.2f %6.2f %6.2f %7.2f%s\n",
		conc, ok, tps, rps, T.avg * 1e3, T.p50 * 1e3, T.p90 * 1e3, T.p99 * 1e3, S.avg * 1e3, S.p50 * 1e3,
		S.p99 * 1e3, I.avg * 1e3, I.p50 * 1e3, I.p90 * 1e3, I.p99 * 1e3, L.avg, L.p50, L.p90, L.p99,
		failed ? "  (failures)" : "");
	if (csv != NULL)
		fprintf(csv,
			"%d,%d,%d,%.1f,%.1f,%.3f,%.4f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,"
			"%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n",
			conc, ok, failed, ok ? (double)in_tok / ok : 0, ok ? (double)out_tok / ok : 0, tps, rps,
			T.avg * 1e3, T.min * 1e3, T.max * 1e3, T.p50 * 1e3, T.p90 * 1e3, T.p99 * 1e3, S.avg * 1e3,
			S.p50 * 1e3, S.p99 * 1e3, I.avg * 1e3, I.min * 1e3, I.max * 1e3, I.p50 * 1e3, I.p90 * 1e3,
			I.p99 * 1e3, L.avg, L.min, L.max, L.p50, L.p90, L.p99);
	if (o->json_path != NULL) {
		FILE *f = fopen(o->json_path, "a");
		cJSON *j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "endpoint", o->endpoint);
		cJSON_AddNumberToObject(j, "concurrency", conc);
		cJSON_AddNumberToObject(j, "requests", ok);
		cJSON_AddNumberToObject(j, "failed", failed);
		cJSON_AddNumberToObject(j, "input_tokens_avg", ok ? (double)in_tok / ok : 0);
		cJSON_AddNumberToObject(j, "output_tokens_avg", ok ? (double)out_tok / ok : 0);
		cJSON_AddNumberToObject(j, "output_tokens_per_s", tps);
		cJSON_AddNumberToObject(j, "requests_per_s", rps);
		json_stat(j, "ttft_ms", T, 1e3);
		json_stat(j, "time_to_second_token_ms", S, 1e3);
		json_stat(j, "inter_token_latency_ms", I, 1e3);
		json_stat(j, "request_latency_s", L, 1);
		char *js = cJSON_PrintUnformatted(j);
		if (f != NULL && js != NULL)
			fprintf(f, "%s\n", js);
		else
			fprintf(stderr, "privai-bench: cannot append to %s\n", o->json_path);
		free(js);
		cJSON_Delete(j);
		if (f != NULL)
			fclose(f);
	}
	free(ttft);
	free(t2t);
	free(itl);
	free(lat);
	return failed;
}

int
main(int argc, char **argv)
{
	struct opts o;

	if (parse_args(argc, argv, &o) < 0)
		return 2;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		fprintf(stderr, "privai-bench: libcurl failed to initialise\n");
		return 1;
	}
	int chat = strcmp(o.endpoint, "chat") == 0, failures = 0;
	FILE *csv = NULL;
	if (o.csv_path != NULL && (csv = fopen(o.csv_path, "w")) == NULL) {
		fprintf(stderr, "privai-bench: %s: %s\n", o.csv_path, strerror(errno));
		return 1;
	}
	report_header(stdout, csv);
	for (int l = 0; l < o.n_levels; l++) {
		int conc = o.levels[l], total = o.requests > 0 ? o.requests : (4 * conc < 8 ? 8 : 4 * conc);
		struct run r = { .o = &o, .total = total, .chat = (char)chat };
		pthread_t th[4096];
		r.s = calloc((size_t)total, sizeof(*r.s));
		if (r.s == NULL)
			return 1;
		/* warm up: a few requests, unmeasured, so the first level does not pay for cold caches */
		struct run w = { .o = &o, .total = o.warmup, .chat = (char)chat };
		w.s = calloc((size_t)(o.warmup > 0 ? o.warmup : 1), sizeof(*w.s));
		if (w.s != NULL && o.warmup > 0)
			client(&w);
		free(w.s);
		double t0 = now();
		int started = 0;
		for (int i = 0; i < conc; i++)
			started += pthread_create(&th[i], NULL, client, &r) == 0;
		for (int i = 0; i < started; i++)
			pthread_join(th[i], NULL);
		double wall = now() - t0;
		failures += report_level(&o, conc, r.s, total, wall, stdout, csv);
		free(r.s);
	}
	if (csv != NULL)
		fclose(csv);
	curl_global_cleanup();
	return failures > 0 ? 1 : 0;
}
