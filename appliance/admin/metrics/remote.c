/* Metrics samples between a member and its leader (metrics/remote.h). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jsonnum.h"
#include "status.h"
#include "metrics/remote.h"

int
metrics_subject_ok(const char *s)
{
	static const char *const kinds[] = { "node:", "deployment:", "gpu:", "mig:" };
	size_t k = 0, n;

	while (k < sizeof(kinds) / sizeof(kinds[0]) && strncmp(s, kinds[k], strlen(kinds[k])) != 0)
		k++;
	if (k == sizeof(kinds) / sizeof(kinds[0]))
		return 0;
	s += strlen(kinds[k]);
	for (n = 0; s[n] != '\0'; n++)
		if (!isalnum((unsigned char)s[n]) && s[n] != '-')
			return 0;
	return n >= 1 && n <= 100;
}

cJSON *
metrics_since(sqlite3 *db, int64_t self_node_id, int64_t after, int64_t *last)
{
	sqlite3_stmt *st;
	cJSON *rows = cJSON_CreateArray();

	*last = after;
	/* a deployment goes under the leader's id; one without is not the
	 * leader's to chart */
	if (rows == NULL ||
	    sqlite3_prepare_v2(db,
			       "SELECT CASE WHEN s.subject = 'node:' || ?2 THEN 'node:self' "
			       "WHEN s.subject LIKE 'deployment:%' THEN (SELECT 'deployment:' || d.leader_id "
			       "FROM deployments d WHERE 'deployment:' || d.id = s.subject) "
			       "ELSE s.subject END AS subj, s.name, s.ts, s.value FROM metric_samples s "
			       "WHERE s.ts > ?1 AND (s.subject = 'node:' || ?2 OR s.subject NOT LIKE 'node:%') "
			       "AND subj IS NOT NULL ORDER BY s.ts LIMIT ?3",
			       -1, &st, NULL) != SQLITE_OK)
		return rows;
	sqlite3_bind_int64(st, 1, after);
	sqlite3_bind_int64(st, 2, self_node_id);
	sqlite3_bind_int(st, 3, METRICS_REMOTE_MAX);
	while (sqlite3_step(st) == SQLITE_ROW) {
		cJSON *row = cJSON_CreateArray();
		if (row == NULL || !cJSON_AddItemToArray(rows, row))
			break;
		cJSON_AddItemToArray(row, cJSON_CreateString((const char *)sqlite3_column_text(st, 0)));
		cJSON_AddItemToArray(row, cJSON_CreateString((const char *)sqlite3_column_text(st, 1)));
		cJSON_AddItemToArray(row, cJSON_CreateNumber((double)sqlite3_column_int64(st, 2)));
		cJSON_AddItemToArray(row, cJSON_CreateNumber(sqlite3_column_double(st, 3)));
		*last = sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	return rows;
}

static int
name_ok(const char *s)
{
	size_t n = 0;

	for (; s[n] != '\0'; n++)
		if (!islower((unsigned char)s[n]) && !isdigit((unsigned char)s[n]) && s[n] != '_')
			return 0;
	return n >= 1 && n <= 40;
}

/* Whether deployment `subject` is placed on node_id here. */
static int
placed_on(sqlite3 *db, const char *subject, int64_t node_id)
{
	sqlite3_stmt *st;
	int yes = 0;

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM deployments WHERE 'deployment:' || id = ?1 AND node_id = ?2", -1, &st,
			       NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, subject, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, node_id);
		yes = sqlite3_step(st) == SQLITE_ROW;
		sqlite3_finalize(st);
	}
	return yes;
}

int
metrics_store_remote(sqlite3 *db, int64_t node_id, const cJSON *rows, int64_t now, int keep_hours, char *err)
{
	const cJSON *row;
	sqlite3_stmt *st;
	char subject[128];
	int i = 0;

	if (rows == NULL)
		return APP_OK;
	if (!cJSON_IsArray(rows) || cJSON_GetArraySize(rows) > METRICS_REMOTE_MAX)
		return app_fail(err, APP_EINVAL, "metrics must be an array of at most %d rows", METRICS_REMOTE_MAX);
	if (sqlite3_prepare_v2(db,
			       "INSERT OR REPLACE INTO metric_samples (subject, name, ts, value) VALUES (?1, ?2, ?3, "
			       "?4)",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	cJSON_ArrayForEach (row, rows) {
		const char *subj = cJSON_GetStringValue(cJSON_GetArrayItem(row, 0));
		const char *name = cJSON_GetStringValue(cJSON_GetArrayItem(row, 1));
		const cJSON *ts = cJSON_GetArrayItem(row, 2), *v = cJSON_GetArrayItem(row, 3);
		int64_t t = 0;
		if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != 4 || subj == NULL || name == NULL ||
		    !cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !name_ok(name) ||
		    json_int_in(ts, -((int64_t)1 << 53), (int64_t)1 << 53, &t) != APP_OK) {
			sqlite3_finalize(st);
			return app_fail(err, APP_EINVAL,
					"metrics[%d] must be [subject, name of a-z0-9_, integer time, finite value]",
					i);
		}
		if (strcmp(subj, "node:self") == 0)
			snprintf(subject, sizeof(subject), "node:%lld", (long long)node_id);
		else
			snprintf(subject, sizeof(subject), "%s", subj);
		if (!metrics_subject_ok(subject) ||
		    (strncmp(subj, "node:", 5) == 0 && strcmp(subj, "node:self") != 0)) {
			sqlite3_finalize(st);
			return app_fail(err, APP_EINVAL,
					"metrics[%d]: subject '%.100s' is not node:self, deployment:, "
					"gpu: or mig:",
					i, subj);
		}
		i++;
		/* too old to keep, from the future, or not this node's deployment: left out */
		if (t < now - (int64_t)keep_hours * 3600 || t > now + 300 ||
		    (strncmp(subject, "deployment:", 11) == 0 && !placed_on(db, subject, node_id)))
			continue;
		sqlite3_bind_text(st, 1, subject, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, t);
		sqlite3_bind_double(st, 4, v->valuedouble);
		int rc = sqlite3_step(st);
		sqlite3_reset(st);
		if (rc != SQLITE_DONE) {
			sqlite3_finalize(st);
			return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
		}
	}
	sqlite3_finalize(st);
	return APP_OK;
}
