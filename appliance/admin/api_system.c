/*
 * The appliance itself: liveness and readiness, Prometheus metrics, the
 * audit log, settings, and backups of the store (online, with the sqlite
 * backup API) with restore from one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "privai/status.h"
#include "admin.h"
#include "db.h"
#include "httpd.h"
#include "rows.h"
#include "settings.h"
#include "server/strbuf.h"
#include "supervisor.h"

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
metric_rows(struct strbuf *b, sqlite3 *db, const char *metric, const char *label, const char *sql)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return;
	while (sqlite3_step(st) == SQLITE_ROW)
		strbuf_printf(b, "%s{%s=\"%s\"} %lld\n", metric, label, (const char *)sqlite3_column_text(st, 0),
			      (long long)sqlite3_column_int64(st, 1));
	sqlite3_finalize(st);
}

static void
h_metrics(struct req *r)
{
	struct admin *a = r->a;
	struct strbuf b;

	strbuf_init(&b);
	strbuf_puts(&b, "# HELP privai_admin_up 1 while privai-admin serves.\n# TYPE privai_admin_up gauge\n"
			"privai_admin_up 1\n");
	strbuf_printf(&b, "# HELP privai_admin_start_time_seconds Start time, Unix seconds.\n"
			  "# TYPE privai_admin_start_time_seconds gauge\nprivai_admin_start_time_seconds %lld\n",
		      (long long)a->started_at);
	strbuf_puts(&b, "# HELP privai_admin_http_responses_total Responses sent, by status class.\n"
			"# TYPE privai_admin_http_responses_total counter\n");
	for (int c = 1; c <= 5; c++)
		strbuf_printf(&b, "privai_admin_http_responses_total{class=\"%dxx\"} %ld\n", c,
			      atomic_load(&a->http_requests[c]));
	strbuf_printf(&b, "# HELP privai_admin_logins_total Login attempts, by result.\n"
			  "# TYPE privai_admin_logins_total counter\n"
			  "privai_admin_logins_total{result=\"ok\"} %ld\nprivai_admin_logins_total{result=\"failed\"} %ld\n",
		      atomic_load(&a->logins_ok), atomic_load(&a->logins_failed));
	strbuf_puts(&b, "# HELP privai_admin_deployments Deployments, by state.\n# TYPE privai_admin_deployments gauge\n");
	metric_rows(&b, a->db, "privai_admin_deployments", "state",
		    "SELECT state, count(*) FROM deployments GROUP BY state ORDER BY state");
	strbuf_puts(&b, "# HELP privai_admin_models Registered models, by state.\n# TYPE privai_admin_models gauge\n");
	metric_rows(&b, a->db, "privai_admin_models", "state",
		    "SELECT state, count(*) FROM models GROUP BY state ORDER BY state");
	strbuf_puts(&b, "# HELP privai_admin_nodes Cluster nodes, by state.\n# TYPE privai_admin_nodes gauge\n");
	metric_rows(&b, a->db, "privai_admin_nodes", "state",
		    "SELECT state, count(*) FROM nodes GROUP BY state ORDER BY state");
	strbuf_puts(&b, "# HELP privai_admin_deployment_restarts_total Engine restarts by the supervisor.\n"
			"# TYPE privai_admin_deployment_restarts_total counter\n");
	metric_rows(&b, a->db, "privai_admin_deployment_restarts_total", "deployment",
		    "SELECT name, restarts FROM deployments ORDER BY name");
	reply_text(r, 200, "text/plain; version=0.0.4", strbuf_take(&b));
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
	if (sqlite3_prepare_v2(r->a->db, "SELECT id, at, actor, action, target, remote_addr, result, detail "
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
	char err[PRIVAI_ERR_LEN];
	const char *value;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (value = field_str(r, j, "value", 1, 1024, NULL)) == NULL) {
		cJSON_Delete(j);
		return;
	}
	int rc = settings_set(r->a->db, r->arg[0], value, err);
	if (rc != PRIVAI_OK) {
		reply_status(r, rc, "value", err);
	} else {
		cJSON *d = cJSON_CreateObject();
		cJSON_AddStringToObject(d, "value", value);
		req_audit(r, "settings.set", r->arg[0], "ok", d);
		reply_json(r, 200, settings_json(r->a->db));
	}
	cJSON_Delete(j);
}

/* Backups live in STATE/backups under names this code chose or checked:
 * letters, digits, '.', '_', '-', ending in .db, never starting with '.'. */
static int
backup_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 4 || n > 100 || s[0] == '.' || strcmp(s + n - 3, ".db") != 0)
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static void
backups_dir(struct admin *a, char *out, size_t size)
{
	snprintf(out, size, "%s/backups", a->cfg.state_dir);
}

static void
h_backup_create(struct req *r)
{
	char dir[4096], path[4300], name[64], err[PRIVAI_ERR_LEN];
	struct tm tm;
	time_t t = (time_t)r->now;
	struct stat sb;

	backups_dir(r->a, dir, sizeof(dir));
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		reply_error(r, 500, "internal", NULL, "cannot create %s: %s", dir, strerror(errno));
		return;
	}
	gmtime_r(&t, &tm);
	strftime(name, sizeof(name), "privai-%Y%m%d-%H%M%S.db", &tm);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	for (int i = 1; stat(path, &sb) == 0 && i < 100; i++) { /* two in one second */
		strftime(name, sizeof(name), "privai-%Y%m%d-%H%M%S", &tm);
		snprintf(name + strlen(name), sizeof(name) - strlen(name), "-%d.db", i);
		snprintf(path, sizeof(path), "%s/%s", dir, name);
	}
	int rc = db_backup(r->a->db, path, err);
	if (rc != PRIVAI_OK) {
		reply_status(r, rc, NULL, err);
		return;
	}
	req_audit(r, "backup.create", name, "ok", NULL);
	stat(path, &sb);
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "name", name);
	cJSON_AddNumberToObject(root, "size_bytes", (double)sb.st_size);
	cJSON_AddNumberToObject(root, "created_at", (double)r->now);
	reply_json(r, 201, root);
}

static void
h_backup_list(struct req *r)
{
	char dir[4096], path[4400];
	cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "data");
	DIR *d;
	struct dirent *e;
	struct stat sb;

	backups_dir(r->a, dir, sizeof(dir));
	if ((d = opendir(dir)) != NULL) {
		while ((e = readdir(d)) != NULL) {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			if (!backup_name_ok(e->d_name) || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
				continue;
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "name", e->d_name);
			cJSON_AddNumberToObject(o, "size_bytes", (double)sb.st_size);
			cJSON_AddNumberToObject(o, "created_at", (double)sb.st_mtime);
			cJSON_AddItemToArray(arr, o);
		}
		closedir(d);
	}
	reply_json(r, 200, root);
}

/* The backup named in the path, or -1 after a 404. */
static int
backup_path(struct req *r, const char *name, char *path, size_t size)
{
	char dir[4096];
	struct stat sb;

	backups_dir(r->a, dir, sizeof(dir));
	snprintf(path, size, "%s/%s", dir, name);
	if (!backup_name_ok(name) || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		reply_error(r, 404, "not_found", "name", "no backup named '%.100s'", name);
		return -1;
	}
	return 0;
}

static void
h_backup_download(struct req *r)
{
	char path[4300], disp[200];
	struct stat sb;

	if (backup_path(r, r->arg[0], path, sizeof(path)) < 0)
		return;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		if (fd >= 0)
			close(fd);
		reply_error(r, 500, "internal", NULL, "cannot read %s", r->arg[0]);
		return;
	}
	struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
	if (resp == NULL) {
		close(fd);
		reply_error(r, 500, "internal", NULL, "out of memory");
		return;
	}
	snprintf(disp, sizeof(disp), "attachment; filename=\"%s\"", r->arg[0]);
	MHD_add_response_header(resp, "Content-Disposition", disp);
	req_audit(r, "backup.download", r->arg[0], "ok", NULL);
	reply_response(r, 200, resp, "application/vnd.sqlite3");
}

static void
h_backup_delete(struct req *r)
{
	char path[4300];

	if (backup_path(r, r->arg[0], path, sizeof(path)) < 0)
		return;
	if (unlink(path) != 0) {
		reply_error(r, 500, "internal", NULL, "cannot remove %s: %s", r->arg[0], strerror(errno));
		return;
	}
	req_audit(r, "backup.delete", r->arg[0], "ok", NULL);
	reply_empty(r, 204);
}

static void
h_restore(struct req *r)
{
	static const char *const known[] = { "name", NULL };
	char path[4300], err[PRIVAI_ERR_LEN];
	const char *name;
	cJSON *j;

	if ((j = body_object(r)) == NULL)
		return;
	if (fields_known(r, j, known) < 0 || (name = field_str(r, j, "name", 1, 100, NULL)) == NULL ||
	    backup_path(r, name, path, sizeof(path)) < 0) {
		cJSON_Delete(j);
		return;
	}
	int rc = db_restore(r->a->db, path, err);
	if (rc != PRIVAI_OK) {
		reply_status(r, rc, "name", err);
	} else {
		/* the audit row goes into the restored database, so the log
		 * says when it was replaced and by whom */
		req_audit(r, "backup.restore", name, "ok", NULL);
		if (r->a->sup != NULL)
			supervisor_kick(r->a->sup);
		reply_empty(r, 204);
	}
	cJSON_Delete(j);
}

const struct route api_system_routes[] = {
	{ "GET", "/api/v1/health", 0, ROUTE_PUBLIC, h_health, NULL },
	{ "GET", "/readyz", 0, ROUTE_PUBLIC, h_readyz, NULL },
	{ "GET", "/metrics", ROLE_VIEWER, 0, h_metrics, NULL },
	{ "GET", "/api/v1/audit", ROLE_ADMIN, 0, h_audit, NULL },
	{ "GET", "/api/v1/settings", ROLE_VIEWER, 0, h_settings, NULL },
	{ "PUT", "/api/v1/settings/{key}", ROLE_ADMIN, 0, h_setting_put, NULL },
	{ "GET", "/api/v1/system/backups", ROLE_ADMIN, 0, h_backup_list, NULL },
	{ "POST", "/api/v1/system/backups", ROLE_ADMIN, 0, h_backup_create, NULL },
	{ "GET", "/api/v1/system/backups/{name}", ROLE_ADMIN, 0, h_backup_download, NULL },
	{ "DELETE", "/api/v1/system/backups/{name}", ROLE_ADMIN, 0, h_backup_delete, NULL },
	{ "POST", "/api/v1/system/restore", ROLE_ADMIN, 0, h_restore, NULL },
	{ NULL, NULL, 0, 0, NULL, NULL },
};
