/*
 * The metrics history over HTTP (metrics/sampler.h keeps it):
 *   GET /api/v1/metrics/subjects   what was sampled lately
 *   GET /api/v1/metrics/history?subject=S&range=1h|6h|24h|48h
 * A history answers columns, the shape charting libraries take: "t" the
 * sample times, and under "series" one array per value with null where a
 * sample lacks it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "status.h"
#include "admin.h"
#include "http/httpd.h"
#include "metrics/remote.h"

#define MAX_NAMES 24
#define MAX_POINTS 200000

static const struct {
	const char *name;
	int64_t seconds;
} ranges[] = { { "1h", 3600 }, { "6h", 6 * 3600 }, { "24h", 24 * 3600 }, { "48h", 48 * 3600 }, { "7d", 7 * 86400 } };

static void
h_subjects(struct req *r)
{
	int64_t since = admin_now() - (r->a->cfg.metrics_interval_s * 3 > 600 ? r->a->cfg.metrics_interval_s * 3 : 600);

	reply_query(r, 200,
		    "SELECT subject, max(ts) AS last, json_group_array(DISTINCT name) AS names FROM metric_samples "
		    "WHERE ts >= ?1 GROUP BY subject ORDER BY subject",
		    1, &since, NULL);
}

/* A column of the answer: its array and how many entries it has, kept
 * here because cJSON counts an array by walking it. */
struct column {
	cJSON *values;
	int len;
};

static struct column *
column_of(cJSON *series, struct column *cols, int *n, const char *name)
{
	for (int i = 0; i < *n; i++)
		if (strcmp(cols[i].values->string, name) == 0)
			return &cols[i];
	if (*n == MAX_NAMES || (cols[*n].values = cJSON_AddArrayToObject(series, name)) == NULL)
		return NULL;
	cols[*n].len = 0;
	return &cols[(*n)++];
}

/* c padded with nulls to len entries */
static int
pad(struct column *c, int len)
{
	for (; c->len < len; c->len++)
		if (!cJSON_AddItemToArray(c->values, cJSON_CreateNull()))
			return -1;
	return 0;
}

static cJSON *
history(sqlite3 *db, const char *subject, int64_t from)
{
	sqlite3_stmt *st;
	struct column cols[MAX_NAMES];
	int n_cols = 0, len = 0, points = 0, rc, ok = 1;
	int64_t last_ts = -1;
	cJSON *o = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(o, "t"),
	      *series = cJSON_AddObjectToObject(o, "series");

	if (t == NULL || series == NULL ||
	    sqlite3_prepare_v2(db,
			       "SELECT ts, name, value FROM metric_samples WHERE subject = ?1 AND ts >= ?2 "
			       "ORDER BY ts, name",
			       -1, &st, NULL) != SQLITE_OK) {
		cJSON_Delete(o);
		return NULL;
	}
	sqlite3_bind_text(st, 1, subject, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, from);
	while (ok && (rc = sqlite3_step(st)) == SQLITE_ROW && points++ < MAX_POINTS) {
		int64_t ts = sqlite3_column_int64(st, 0);
		if (ts != last_ts) {
			ok = cJSON_AddItemToArray(t, cJSON_CreateNumber((double)ts));
			len++;
			last_ts = ts;
		}
		struct column *c = column_of(series, cols, &n_cols, (const char *)sqlite3_column_text(st, 1));
		if (c == NULL)
			continue;
		double v = sqlite3_column_double(st, 2);
		ok = ok && pad(c, len - 1) == 0 &&
		     cJSON_AddItemToArray(c->values, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
		c->len++;
	}
	sqlite3_finalize(st);
	for (int i = 0; ok && i < n_cols; i++)
		ok = pad(&cols[i], len) == 0;
	if (!ok || (rc != SQLITE_DONE && rc != SQLITE_ROW)) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static void
h_history(struct req *r)
{
	const char *subject = query_arg(r, "subject"), *range = query_arg(r, "range");
	int64_t seconds = 0, now = admin_now();

	if (subject == NULL || !metrics_subject_ok(subject)) {
		reply_error(r, 422, "invalid_field", "subject",
			    "subject must be node:ID, deployment:ID, gpu:UUID or mig:UUID");
		return;
	}
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
		if (strcmp(range != NULL ? range : "1h", ranges[i].name) == 0)
			seconds = ranges[i].seconds;
	if (seconds == 0) {
		reply_error(r, 422, "invalid_field", "range", "range must be 1h, 6h, 24h, 48h or 7d");
		return;
	}
	cJSON *o = history(r->a->db, subject, now - seconds);
	if (o == NULL) {
		reply_error(r, 500, "internal", NULL, "cannot read the metrics history: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	cJSON_AddStringToObject(o, "subject", subject);
	cJSON_AddNumberToObject(o, "from", (double)(now - seconds));
	cJSON_AddNumberToObject(o, "to", (double)now);
	cJSON_AddNumberToObject(o, "interval_s", r->a->cfg.metrics_interval_s);
	cJSON_AddNumberToObject(o, "keep_hours", r->a->cfg.metrics_keep_hours);
	reply_json(r, 200, o);
}

const struct route api_metrics_routes[] = {
	{ "GET", "/api/v1/metrics/subjects", ROLE_VIEWER, 0, h_subjects, NULL, NULL },
	{ "GET", "/api/v1/metrics/history", ROLE_VIEWER, 0, h_history, NULL, NULL },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
