/* The settings table: known keys, defaults, checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "store/settings.h"

struct setting {
	const char *key, *def, *what;
	int (*ok)(const char *v);
};

static int
is_label(const char *v)
{
	return strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._-") == strlen(v) &&
	       strlen(v) <= 64;
}

/* space-separated host names (letters, digits, '.', '-', optional :port), or "none" */
static int
is_host_list(const char *v)
{
	return strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .-:") == strlen(v);
}

static int
is_threads(const char *v)
{
	char *end;
	long n = strtol(v, &end, 10);

	return *end == '\0' && end != v && n >= 0 && n <= 1024;
}

static int
int_in(const char *v, long lo, long hi)
{
	char *end;
	long n = strtol(v, &end, 10);

	return *end == '\0' && end != v && n >= lo && n <= hi;
}

static int
is_backup_hours(const char *v)
{
	return int_in(v, 0, 8760);
}

static int
is_backup_keep(const char *v)
{
	return int_in(v, 1, 1000);
}

static const struct setting known[] = {
	{ "cluster_name", "privai", "1-64 letters, digits, spaces, '.', '_' or '-'", is_label },
	{ "model_url_hosts", "none",
	  "space-separated host names (host or host:port) models may be downloaded from, or none", is_host_list },
	{ "default_cpu_threads", "0", "an integer 0..1024 (0: every core)", is_threads },
	{ "backup_every_hours", "24", "an integer 0..8760: hours between scheduled backups (0: none)",
	  is_backup_hours },
	{ "backup_keep", "7", "an integer 1..1000: scheduled backups kept (the oldest go)", is_backup_keep },
};

static const struct setting *
find(const char *key)
{
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(known[i].key, key) == 0)
			return &known[i];
	return NULL;
}

int
settings_get(sqlite3 *db, const char *key, char *out, size_t size)
{
	const struct setting *s = find(key);
	sqlite3_stmt *st;

	if (s == NULL)
		return APP_ENOTFOUND;
	snprintf(out, size, "%s", s->def);
	if (sqlite3_prepare_v2(db, "SELECT value FROM settings WHERE key = ?", -1, &st, NULL) != SQLITE_OK)
		return 0;
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		snprintf(out, size, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	return 0;
}

int
settings_set(sqlite3 *db, const char *key, const char *value, char *err)
{
	const struct setting *s = find(key);
	sqlite3_stmt *st;

	if (s == NULL)
		return app_fail(err, APP_ENOTFOUND, "no setting named '%.64s'", key);
	if (!s->ok(value))
		return app_fail(err, APP_EINVAL, "%s must be %s", key, s->what);
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO settings (key, value) VALUES (?, ?) "
			       "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? APP_OK : app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
}

cJSON *
settings_json(sqlite3 *db)
{
	cJSON *o = cJSON_CreateObject();
	char v[1100];

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		settings_get(db, known[i].key, v, sizeof(v));
		cJSON_AddStringToObject(o, known[i].key, v);
	}
	return o;
}
