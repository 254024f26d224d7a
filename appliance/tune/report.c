/* The preflight report: checks in the order they ran, as text or JSON. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

/* A check that could not be stored still has somewhere to be written. */
static struct check dropped;

struct check *
report_add(struct report *r, const char *id, const char *title, enum check_status st)
{
	struct check *c;

	if (r->n == r->cap) {
		int cap = r->cap ? r->cap * 2 : 64;
		struct check *grown = realloc(r->c, (size_t)cap * sizeof(*grown));
		if (grown == NULL) {
			r->oom = 1;
			memset(&dropped, 0, sizeof(dropped));
			return &dropped;
		}
		r->c = grown;
		r->cap = cap;
	}
	c = &r->c[r->n++];
	memset(c, 0, sizeof(*c));
	snprintf(c->id, sizeof(c->id), "%s", id);
	snprintf(c->title, sizeof(c->title), "%s", title);
	c->status = st;
	return c;
}

#define SETTER(name, field)                                                                                            \
	void name(struct check *c, const char *fmt, ...)                                                               \
	{                                                                                                              \
		va_list ap;                                                                                            \
		va_start(ap, fmt);                                                                                     \
		vsnprintf(c->field, sizeof(c->field), fmt, ap);                                                        \
		va_end(ap);                                                                                            \
	}
SETTER(report_found, found)
SETTER(report_expected, expected)
SETTER(report_fix, fix)

const char *
check_status_name(enum check_status st)
{
	static const char *const names[] = { "pass", "warn", "fail", "skip" };

	return (unsigned)st < 4 ? names[st] : "?";
}

int
report_count(const struct report *r, enum check_status st)
{
	int n = 0;

	for (int i = 0; i < r->n; i++)
		n += r->c[i].status == st;
	return n;
}

const struct check *
report_get(const struct report *r, const char *id)
{
	for (int i = 0; i < r->n; i++)
		if (strcmp(r->c[i].id, id) == 0)
			return &r->c[i];
	return NULL;
}

cJSON *
report_json(const struct report *r, const char *root, const char *profile)
{
	cJSON *o = cJSON_CreateObject(), *sum, *list;

	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "root", root);
	cJSON_AddStringToObject(o, "profile", profile);
	if ((sum = cJSON_AddObjectToObject(o, "summary")) != NULL)
		for (int st = CHECK_PASS; st <= CHECK_SKIP; st++)
			cJSON_AddNumberToObject(sum, check_status_name(st), report_count(r, st));
	if ((list = cJSON_AddArrayToObject(o, "checks")) == NULL) {
		cJSON_Delete(o);
		return NULL;
	}
	for (int i = 0; i < r->n; i++) {
		const struct check *c = &r->c[i];
		cJSON *j = cJSON_CreateObject();
		if (j == NULL || !cJSON_AddItemToArray(list, j)) {
			cJSON_Delete(j);
			cJSON_Delete(o);
			return NULL;
		}
		cJSON_AddStringToObject(j, "id", c->id);
		cJSON_AddStringToObject(j, "title", c->title);
		cJSON_AddStringToObject(j, "status", check_status_name(c->status));
		cJSON_AddStringToObject(j, "found", c->found);
		cJSON_AddStringToObject(j, "expected", c->expected);
		cJSON_AddStringToObject(j, "fix", c->fix);
	}
	return o;
}

void
report_free(struct report *r)
{
	free(r->c);
	memset(r, 0, sizeof(*r));
}
