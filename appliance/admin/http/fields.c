/*
 * Reading request input: the JSON body, typed fields with limits, path
 * ids and query arguments.  Each reader replies 400/404/422 naming the
 * problem and returns a failure value, so a handler's checks read as one
 * line each.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "jsonnum.h"
#include "admin.h"
#include "http/httpd.h"
#include "store/rows.h"

/*
 * 1 when a string of the JSON text holds an escaped NUL, with *ret_key
 * the key it is (or whose value it is in), as sent and cut to size; else
 * 0.  cJSON keeps strings NUL-terminated, so without this "ab\u0000cd"
 * would be read as "ab".  The text is known to be free of raw NULs.
 */
static int
json_find_nul(const char *js, size_t len, char *ret_key, size_t size)
{
	char key[2][96] = { "", "" }; /* the last key read, and the string being read */
	size_t n = 0, i = 0;
	int in_str = 0, has_nul = 0;

	while (i < len) {
		char c = js[i];
		if (!in_str) {
			if (c == '"') {
				in_str = 1;
				has_nul = 0;
				n = 0;
			}
			i++;
			continue;
		}
		if (c == '"') {
			key[1][n] = '\0';
			/* a key when the next non-blank is ':' */
			size_t k = i + 1;
			while (k < len && (js[k] == ' ' || js[k] == '\t' || js[k] == '\n' || js[k] == '\r'))
				k++;
			int is_key = k < len && js[k] == ':';
			if (is_key)
				memcpy(key[0], key[1], sizeof(key[0]));
			if (has_nul) {
				snprintf(ret_key, size, "%s", is_key ? key[1] : key[0]);
				return 1;
			}
			in_str = 0;
			i++;
			continue;
		}
		if (c == '\\' && i + 1 < len) {
			if (js[i + 1] == 'u' && i + 5 < len && strncmp(js + i + 2, "0000", 4) == 0)
				has_nul = 1;
			/* shown as sent: "name\u0000x" */
			size_t esc = js[i + 1] == 'u' ? 6 : 2;
			for (size_t e = js[i + 1] == 'u' ? 0 : 1; e < esc && i + e < len; e++)
				if (n + 1 < sizeof(key[1]))
					key[1][n++] = js[i + e];
			i += esc;
			continue;
		}
		if (n + 1 < sizeof(key[1]))
			key[1][n++] = c;
		i++;
	}
	return 0;
}

cJSON *
body_object(struct req *r)
{
	char field[96];
	cJSON *j;

	if (r->len == 0) {
		reply_error(r, 400, "bad_json", NULL, "a JSON object body is required");
		return NULL;
	}
	if (memchr(r->body, '\0', r->len) != NULL) {
		reply_error(r, 400, "bad_json", NULL, "the body contains a NUL byte");
		return NULL;
	}
	j = cJSON_ParseWithLength(r->body, r->len);
	if (j == NULL) {
		reply_error(r, 400, "bad_json", NULL, "the body is not valid JSON");
		return NULL;
	}
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		reply_error(r, 422, "bad_json", NULL, "the body must be a JSON object");
		return NULL;
	}
	if (json_find_nul(r->body, r->len, field, sizeof(field))) {
		body_wipe(j);
		reply_error(r, 422, "invalid_field", field, "%s contains a NUL character (\\u0000)", field);
		return NULL;
	}
	return j;
}

static void
wipe_strings(cJSON *j)
{
	cJSON *it;

	cJSON_ArrayForEach (it, j) {
		if (cJSON_IsString(it) && it->valuestring != NULL)
			sodium_memzero(it->valuestring, strlen(it->valuestring));
		else if (cJSON_IsObject(it) || cJSON_IsArray(it))
			wipe_strings(it);
	}
}

void
body_wipe(cJSON *j)
{
	if (j == NULL)
		return;
	wipe_strings(j);
	cJSON_Delete(j);
}

int
fields_known(struct req *r, const cJSON *o, const char *const *names)
{
	const cJSON *it;

	cJSON_ArrayForEach (it, o) {
		int ok = 0;
		for (const char *const *n = names; *n != NULL && !ok; n++)
			ok = it->string != NULL && strcmp(it->string, *n) == 0;
		if (!ok) {
			reply_error(r, 422, "unknown_field", it->string, "unknown field '%.64s'",
				    it->string ? it->string : "");
			return APP_EINVAL;
		}
	}
	return 0;
}

/* Printable text without control characters: names, paths and URLs are
 * shown in the console and written to logs.  Multi-line text (PEM) may
 * also hold line breaks and tabs. */
static int
plain_text(const char *s, int lines)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p < 0x20 || *p == 0x7f) && !(lines && (*p == '\n' || *p == '\r' || *p == '\t')))
			return 0;
	return 1;
}

static const char *
field_string(struct req *r, const cJSON *o, const char *name, int required, size_t max_len, const char *def, int lines)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (v == NULL || cJSON_IsNull(v)) {
		if (required)
			reply_error(r, 422, "missing_field", name, "%s is required", name);
		return required ? NULL : def;
	}
	if (!cJSON_IsString(v)) {
		reply_error(r, 422, "invalid_field", name, "%s must be a string", name);
		return NULL;
	}
	size_t n = strlen(v->valuestring);
	if (n == 0 || n > max_len) {
		reply_error(r, 422, "invalid_field", name, "%s must have 1-%zu characters (got %zu)", name, max_len, n);
		return NULL;
	}
	if (!plain_text(v->valuestring, lines)) {
		reply_error(r, 422, "invalid_field", name, "%s contains control characters", name);
		return NULL;
	}
	return v->valuestring;
}

const char *
field_str(struct req *r, const cJSON *o, const char *name, int required, size_t max_len, const char *def)
{
	return field_string(r, o, name, required, max_len, def, 0);
}

const char *
field_text(struct req *r, const cJSON *o, const char *name, int required, size_t max_len, const char *def)
{
	return field_string(r, o, name, required, max_len, def, 1);
}

int
field_int(struct req *r, const cJSON *o, const char *name, int required, int64_t lo, int64_t hi, int64_t def,
	  int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (v == NULL || cJSON_IsNull(v)) {
		if (required) {
			reply_error(r, 422, "missing_field", name, "%s is required", name);
			return APP_EINVAL;
		}
		*out = def;
		return 0;
	}
	if (!cJSON_IsNumber(v) || !json_is_whole(v->valuedouble)) {
		reply_error(r, 422, "invalid_field", name, "%s must be an integer", name);
		return APP_EINVAL;
	}
	if (json_int_in(v, lo, hi, out) != APP_OK) {
		reply_error(r, 422, "invalid_field", name, "%s must be in %lld..%lld (got %.0f)", name, (long long)lo,
			    (long long)hi, v->valuedouble);
		return APP_EINVAL;
	}
	return 0;
}

int
field_bool(struct req *r, const cJSON *o, const char *name, int def, int *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (v == NULL || cJSON_IsNull(v)) {
		*out = def;
		return 0;
	}
	if (!cJSON_IsBool(v)) {
		reply_error(r, 422, "invalid_field", name, "%s must be true or false", name);
		return APP_EINVAL;
	}
	*out = cJSON_IsTrue(v);
	return 0;
}

int64_t
arg_id(struct req *r, int i, const char *what)
{
	char *end;

	errno = 0;
	long long v = strtoll(r->arg[i], &end, 10);
	if (errno != 0 || *end != '\0' || v <= 0 || r->arg[i][0] == '+' || r->arg[i][0] == '0') {
		reply_error(r, 404, "not_found", NULL, "no %s '%.64s' (ids are positive integers)", what, r->arg[i]);
		return APP_EINVAL;
	}
	return v;
}

const char *
query_arg(struct req *r, const char *name)
{
	return MHD_lookup_connection_value(r->c, MHD_GET_ARGUMENT_KIND, name);
}

void
reply_stmt(struct req *r, unsigned status, sqlite3_stmt *st, const char *single, int64_t id)
{
	int found;

	if (st == NULL) {
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
		return;
	}
	if (single == NULL) {
		cJSON *rows = rows_json(st), *root = cJSON_CreateObject();
		if (rows == NULL) {
			cJSON_Delete(root);
			reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
			return;
		}
		cJSON_AddItemToObject(root, "data", rows);
		reply_json(r, status, root);
		return;
	}
	cJSON *o = row_json(st, &found);
	if (o == NULL)
		reply_error(r, 500, "internal", NULL, "database: %s", sqlite3_errmsg(r->a->db));
	else if (!found) {
		cJSON_Delete(o);
		reply_error(r, 404, "not_found", NULL, "no %s %lld", single, (long long)id);
	} else
		reply_json(r, status, o);
}

void
reply_query(struct req *r, unsigned status, const char *sql, int n, const int64_t *args, const char *single)
{
	reply_stmt(r, status, rows_prepare(r->a->db, sql, n, args), single, n > 0 ? args[0] : 0);
}
