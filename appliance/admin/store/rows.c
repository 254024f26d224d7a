/* Turning sqlite rows into cJSON objects. */
#include <string.h>

#include "store/rows.h"

/* columns that hold JSON text, returned as JSON rather than as a string */
static int
json_column(const char *name)
{
	return strcmp(name, "placement") == 0 || strcmp(name, "options") == 0 || strcmp(name, "detail") == 0 ||
	       strcmp(name, "inventory") == 0 || strcmp(name, "instances") == 0 || strcmp(name, "ranks") == 0 ||
	       strcmp(name, "devices") == 0;
}

static cJSON *
one_row(sqlite3_stmt *st)
{
	cJSON *o = cJSON_CreateObject();

	if (o == NULL)
		return NULL;
	for (int i = 0; i < sqlite3_column_count(st); i++) {
		const char *name = sqlite3_column_name(st, i);
		switch (sqlite3_column_type(st, i)) {
		case SQLITE_INTEGER:
			cJSON_AddNumberToObject(o, name, (double)sqlite3_column_int64(st, i));
			break;
		case SQLITE_FLOAT:
			cJSON_AddNumberToObject(o, name, sqlite3_column_double(st, i));
			break;
		case SQLITE_TEXT: {
			const char *text = (const char *)sqlite3_column_text(st, i);
			cJSON *parsed = json_column(name) ? cJSON_Parse(text) : NULL;
			if (parsed != NULL)
				cJSON_AddItemToObject(o, name, parsed);
			else
				cJSON_AddStringToObject(o, name, text);
			break;
		}
		case SQLITE_NULL:
			cJSON_AddNullToObject(o, name);
			break;
		default:
			break;
		}
	}
	return o;
}

cJSON *
rows_json(sqlite3_stmt *st)
{
	cJSON *arr = cJSON_CreateArray();
	int rc;

	if (st == NULL) {
		cJSON_Delete(arr);
		return NULL;
	}
	while (arr != NULL && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		cJSON *o = one_row(st);
		if (o == NULL) {
			cJSON_Delete(arr);
			arr = NULL;
			break;
		}
		cJSON_AddItemToArray(arr, o);
	}
	if (arr != NULL && rc != SQLITE_DONE) {
		cJSON_Delete(arr);
		arr = NULL;
	}
	sqlite3_finalize(st);
	return arr;
}

cJSON *
row_json(sqlite3_stmt *st, int *found)
{
	cJSON *o = NULL;

	*found = 0;
	if (st == NULL)
		return NULL;
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*found = 1;
		o = one_row(st);
	} else if (rc == SQLITE_DONE) {
		o = cJSON_CreateObject();
	}
	sqlite3_finalize(st);
	return o;
}

sqlite3_stmt *
rows_prepare(sqlite3 *db, const char *sql, int n, const int64_t *args)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return NULL;
	for (int i = 0; i < n; i++)
		sqlite3_bind_int64(st, i + 1, args[i]);
	return st;
}
