/*
 * The appliance itself: liveness and readiness, Prometheus metrics, the
 * audit log and settings.  Backups are in api/backups.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "http/httpd.h"
#include "store/rows.h"
#include "backup/backups.h"
#include "store/settings.h"
#include "deploy/supervisor.h"
#include "hostfs.h"

#define PRIVAI_VERSION "0.4.0"

static void
h_health(struct req *r)
{
	cJSON *root = cJSON_CreateObject();

	cJSON_AddStringToObject(root, "status", "ok");
	cJSON_AddStringToObject(root, "version", PRIVAI_VERSION);
	cJSON_AddNumberToObject(root, "uptime_s", (double)(r->now - r->a->started_at));
	reply_json(r, 200, root);
}

static void
h_readyz(struct req *r)
{
	cJSON *root = cJSON_CreateObject();
	int db_ok = sqlite3_exec(r->a->db, "SELECT count(*) FROM settings", NULL, NULL, NULL) == SQLITE_OK;
	int sup_ok = r->a->sup != NULL && supervisor_alive(r->a->sup);

	cJSON_AddStringToObject(root, "database", db_ok ? "ok" : sqlite3_errmsg(r->a->db));
	cJSON_AddStringToObject(root, "supervisor", sup_ok ? "ok" : "not running");
	reply_json(r, db_ok && sup_ok ? 200 : 503, root);
}

/* "name{label="v"} n" for each row of a (label, count) query */
static void
metric_rows(FILE *b, sqlite3 *db, const char *metric, const char *label, const char *sql)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW)
		fprintf(b, "%s{%s=\"%s\"} %lld\n", metric, label, (const char *)sqlite3_column_text(st, 0),
			(long long)sqlite3_column_int64(st, 1));
	sqlite3_finalize(st);
}

static void
h_metrics(struct req *r)
{
	struct admin *a = r->a;
	char *text = NULL;
	size_t len = 0;
	/* the text grows as it is written (open_memstream), as long as it needs */
	FILE *b = open_memstream(&text, &len);

	if (b == NULL) {
		reply_error(r, 500, "internal", NULL, "out of memory");
		return;
	}
	fputs("# HELP privai_admin_up 1 while privai-admin serves.\n# TYPE privai_admin_up gauge\n"
	      "privai_admin_up 1\n",
	      b);
	fprintf(b,
		"# HELP privai_admin_start_time_seconds Start time, Unix seconds.\n"
		"# TYPE privai_admin_start_time_seconds gauge\nprivai_admin_start_time_seconds %lld\n",
		(long long)a->started_at);
	fputs("# HELP privai_admin_http_responses_total Responses sent, by status class.\n"
	      "# TYPE privai_admin_http_responses_total counter\n",
	      b);
	for (int c = 1; c <= 5; c++)
		fprintf(b, "privai_admin_http_responses_total{class=\"%dxx\"} %ld\n", c,
			atomic_load(&a->http_requests[c]));
	fprintf(b,
		"# HELP privai_admin_logins_total Login attempts, by result.\n"
		"# TYPE privai_admin_logins_total counter\n"
		"privai_admin_logins_total{result=\"ok\"} %ld\nprivai_admin_logins_total{result=\"failed\"} "
		"%ld\n",
		atomic_load(&a->logins_ok), atomic_load(&a->logins_failed));
	fprintf(b,
		"# HELP privai_admin_proxy_requests_total Requests passed to engines, by result "
		"(bad_gateway: no answer).\n# TYPE privai_admin_proxy_requests_total counter\n"
		"privai_admin_proxy_requests_total{result=\"answered\"} %ld\n"
		"privai_admin_proxy_requests_total{result=\"bad_gateway\"} %ld\n"
		"# HELP privai_admin_proxy_streams Answers being relayed from engines now.\n"
		"# TYPE privai_admin_proxy_streams gauge\nprivai_admin_proxy_streams %ld\n",
		atomic_load(&a->proxy_ok), atomic_load(&a->proxy_failed), atomic_load(&a->proxy_streams));
	fputs("# HELP privai_admin_uploads Resumable uploads under way, by state.\n"
	      "# TYPE privai_admin_uploads gauge\n",
	      b);
	metric_rows(b, a->db, "privai_admin_uploads", "state", "SELECT 'unfinished', count(*) FROM uploads");
	fputs("# HELP privai_admin_upload_bytes Bytes of the uploads under way: kept so far, and whole.\n"
	      "# TYPE privai_admin_upload_bytes gauge\n",
	      b);
	metric_rows(b, a->db, "privai_admin_upload_bytes", "of",
		    "SELECT 'received', coalesce(sum(received), 0) FROM uploads UNION ALL "
		    "SELECT 'size', coalesce(sum(size_bytes), 0) FROM uploads");
	fputs("# HELP privai_admin_deployments Deployments, by state.\n# TYPE privai_admin_deployments gauge\n", b);
	metric_rows(b, a->db, "privai_admin_deployments", "state",
		    "SELECT state, count(*) FROM deployments GROUP BY state ORDER BY state");
	fputs("# HELP privai_admin_models Registered models, by state.\n# TYPE privai_admin_models gauge\n", b);
	metric_rows(b, a->db, "privai_admin_models", "state",
		    "SELECT state, count(*) FROM models GROUP BY state ORDER BY state");
	fputs("# HELP privai_admin_nodes Cluster nodes, by state.\n# TYPE privai_admin_nodes gauge\n", b);
	metric_rows(b, a->db, "privai_admin_nodes", "state",
		    "SELECT state, count(*) FROM nodes GROUP BY state ORDER BY state");
	fputs("# HELP privai_admin_deployment_restarts_total Engine restarts by the supervisor.\n"
	      "# TYPE privai_admin_deployment_restarts_total counter\n",
	      b);
	metric_rows(b, a->db, "privai_admin_deployment_restarts_total", "deployment",
		    "SELECT name, restarts FROM deployments ORDER BY name");
	if (fclose(b) != 0) {
		free(text);
		reply_error(r, 500, "internal", NULL, "out of memory");
		return;
	}
	reply_text(r, 200, "text/plain; version=0.0.4", text);
}

static void
h_audit(struct req *r)
{
	const char *q_limit = query_arg(r, "limit"), *q_before = query_arg(r, "before");
	const char *actor = query_arg(r, "actor"), *action = query_arg(r, "action"), *result = query_arg(r, "result");
	char *end;
	long long limit = 100, before = INT64_MAX;
	sqlite3_stmt *st;

	if (q_limit != NULL && ((limit = strtoll(q_limit, &end, 10)) < 1 || limit > 1000 || *end != '\0')) {
		reply_error(r, 422, "invalid_field", "limit", "limit must be an integer in 1..1000");
		return;
	}
	if (q_before != NULL && ((before = strtoll(q_before, &end, 10)) < 1 || *end != '\0')) {
		reply_error(r, 422, "invalid_field", "before", "before must be a positive audit id");
		return;
	}
	if (result != NULL && strcmp(result, "ok") != 0 && strcmp(result, "refused") != 0) {
		reply_error(r, 422, "invalid_field", "result", "result must be ok or refused");
		return;
	}
	if (sqlite3_prepare_v2(r->a->db,
			       "SELECT id, at, actor, action, target, remote_addr, result, detail "
			       "FROM audit_log WHERE id < ?1 AND (?2 IS NULL OR actor = ?2) AND "
			       "(?3 IS NULL OR substr(action, 1, length(?3)) = ?3) AND "
			       "(?4 IS NULL OR result = ?4) ORDER BY id DESC LIMIT ?5",
			       -1, &st, NULL) != SQLITE_OK)
		st = NULL;
	sqlite3_bind_int64(st, 1, before);
	sqlite3_bind_text(st, 2, actor, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, action, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 4, result, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 5, limit);
	reply_stmt(r, 200, st, NULL, 0);
}

static void
h_settings(struct req *r)
{
	reply_json(r, 200, settings_json(r->a->db));
}

static void
h_setting_put(struct req *r)
{
	static const char *const known[] = { "value", NULL };
	char err[APP_ERR_LEN];
	const char *value;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (value = field_str(r, j, "value", 1, 1024, NULL)) == NULL) {
		cJSON_Delete(j);
		return;
	}
	int rc = settings_set(r->a->db, r->arg[0], value, err);
	if (rc != APP_OK) {
		reply_status(r, rc, "value", err);
	} else {
		cJSON *d = cJSON_CreateObject();
		cJSON_AddStringToObject(d, "value", value);
		req_audit(r, "settings.set", r->arg[0], "ok", d);
		if (strncmp(r->arg[0], "backup_", 7) == 0)
			backup_sched_kick(r->a); /* a new schedule or count takes effect now */
		reply_json(r, 200, settings_json(r->a->db));
	}
	cJSON_Delete(j);
}

/* What day-0 configuration did (privai-firstboot's record, STATE/firstboot.json):
 * {"firstboot": record or null, "note": why there is none}. */
static void
h_appliance(struct req *r)
{
	char path[4096 + 32];
	cJSON *root = cJSON_CreateObject(), *rec = NULL;
	size_t len = 0;

	cJSON_AddStringToObject(root, "version", PRIVAI_VERSION);
	char *text = str_fmt(path, sizeof(path), "%s/firstboot.json", r->a->cfg.state_dir) == APP_OK
			     ? hostfs_read_text("/", path, 1 << 20, &len)
			     : NULL;
	int present = text != NULL;
	if (text != NULL)
		rec = cJSON_ParseWithLength(text, len);
	free(text);
	if (rec != NULL && cJSON_IsObject(rec) && cJSON_IsArray(cJSON_GetObjectItem(rec, "steps"))) {
		cJSON_AddItemToObject(root, "firstboot", rec);
	} else {
		cJSON_Delete(rec);
		cJSON_AddNullToObject(root, "firstboot");
		cJSON_AddStringToObject(root, "note",
					!present ? "no day-0 record: this privai-admin was not "
						   "started on a privai image (privai-firstboot writes firstboot.json)"
						 : "firstboot.json is not a day-0 record (unreadable or not JSON)");
	}
	reply_json(r, 200, root);
}

const struct route api_system_routes[] = {
	{ "GET", "/api/v1/system/appliance", ROLE_VIEWER, 0, h_appliance, NULL, NULL },
	{ "GET", "/api/v1/health", 0, ROUTE_PUBLIC, h_health, NULL, NULL },
	{ "GET", "/readyz", 0, ROUTE_PUBLIC, h_readyz, NULL, NULL },
	{ "GET", "/metrics", ROLE_VIEWER, 0, h_metrics, NULL, NULL },
	{ "GET", "/api/v1/audit", ROLE_ADMIN, 0, h_audit, NULL, NULL },
	{ "GET", "/api/v1/settings", ROLE_VIEWER, 0, h_settings, NULL, NULL },
	{ "PUT", "/api/v1/settings/{key}", ROLE_ADMIN, 0, h_setting_put, NULL, "settings.set" },
	{ NULL, NULL, 0, 0, NULL, NULL, NULL },
};
