/*
 * Tool calling (tool_calls.h): the request's tools, the schema that
 * forces a call, and the model's output parsed back into calls, in the
 * syntax each chat family's models are trained to write:
 *
 *	llama3    {"name": "f", "parameters": {...}}; {...}  (optionally after <|python_tag|>)
 *	chatml    <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>  (Hermes, Qwen2.5)
 *	mistral   [TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]
 *	deepseek3 <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>...
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tool_calls.h"

#define DS_CALLS_BEGIN                                                                                                 \
	"<\xef\xbd\x9ctool\xe2\x96\x81"                                                                                \
	"calls\xe2\x96\x81"                                                                                            \
	"begin\xef\xbd\x9c>"
#define DS_CALL_BEGIN                                                                                                  \
	"<\xef\xbd\x9ctool\xe2\x96\x81"                                                                                \
	"call\xe2\x96\x81"                                                                                             \
	"begin\xef\xbd\x9c>"
#define DS_CALL_END                                                                                                    \
	"<\xef\xbd\x9ctool\xe2\x96\x81"                                                                                \
	"call\xe2\x96\x81"                                                                                             \
	"end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

int
chat_family_has_tools(enum chat_family f)
{
	return f == CHAT_LLAMA3 || f == CHAT_CHATML || f == CHAT_MISTRAL || f == CHAT_DEEPSEEK3;
}

static int
valid_name(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= 64 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

static int
tool_error(char *err, size_t errlen, const char **ret_param, const char *param, const char *msg, const char *arg)
{
	snprintf(err, errlen, msg, arg);
	*ret_param = param;
	return -1;
}

static int
parse_one(const cJSON *tool, int i, struct tool_def *d, char *err, size_t errlen, const char **ret_param)
{
	const cJSON *type = cJSON_GetObjectItem(tool, "type"), *fn = cJSON_GetObjectItem(tool, "function");
	const cJSON *name = cJSON_GetObjectItem(fn, "name"), *params = cJSON_GetObjectItem(fn, "parameters");
	char what[32];

	snprintf(what, sizeof(what), "tools[%d]", i);
	if (!cJSON_IsObject(tool) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 ||
	    !cJSON_IsObject(fn))
		return tool_error(err, errlen, ret_param, "tools",
				  "%s must be {\"type\": \"function\", \"function\": {...}}", what);
	if (!cJSON_IsString(name) || !valid_name(name->valuestring))
		return tool_error(err, errlen, ret_param, "tools",
				  "%s.function.name must be 1-64 letters, digits, _ or -", what);
	if (params != NULL && !cJSON_IsNull(params) && !cJSON_IsObject(params))
		return tool_error(err, errlen, ret_param, "tools",
				  "%s.function.parameters must be a JSON Schema object", what);
	d->name = strdup(name->valuestring);
	d->function = cJSON_PrintUnformatted(fn);
	if (params != NULL && cJSON_IsObject(params))
		d->parameters = cJSON_Duplicate(params, 1);
	if (d->name == NULL || d->function == NULL ||
	    (params != NULL && cJSON_IsObject(params) && d->parameters == NULL))
		return tool_error(err, errlen, ret_param, "tools", "out of memory%s", "");
	/* a schema this server cannot enforce is refused now, not when a
	 * forced call would need it */
	if (d->parameters != NULL) {
		struct json_schema *s;
		char why[300];
		if (json_schema_compile(d->parameters, &s, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "%s.function.parameters %s", what, why);
			*ret_param = "tools";
			return -1;
		}
		json_schema_unref(s);
	}
	return 0;
}

static int
parse_choice(const cJSON *choice, struct tool_set *ts, char *err, size_t errlen, const char **ret_param)
{
	const cJSON *fn = cJSON_GetObjectItem(choice, "function"), *name = cJSON_GetObjectItem(fn, "name");

	ts->choice = ts->n > 0 ? TOOL_CHOICE_AUTO : TOOL_CHOICE_NONE;
	if (choice == NULL || cJSON_IsNull(choice))
		return 0;
	if (cJSON_IsString(choice)) {
		static const char *const names[] = { "none", "auto", "required" };
		for (int i = 0; i < 3; i++)
			if (strcmp(choice->valuestring, names[i]) == 0) {
				ts->choice = (enum tool_choice)i;
				if (ts->choice != TOOL_CHOICE_NONE && ts->n == 0)
					return tool_error(err, errlen, ret_param, "tool_choice",
							  "tool_choice \"%s\" needs tools", names[i]);
				return 0;
			}
		return tool_error(err, errlen, ret_param, "tool_choice",
				  "tool_choice \"%.40s\" is not none, auto, required or a function",
				  choice->valuestring);
	}
	if (!cJSON_IsObject(choice) || !cJSON_IsString(name))
		return tool_error(err, errlen, ret_param, "tool_choice",
				  "tool_choice must be a string or {\"type\": \"function\", \"function\": {\"name\": "
				  "...}}%s",
				  "");
	for (int i = 0; i < ts->n; i++)
		if (strcmp(ts->t[i].name, name->valuestring) == 0) {
			ts->choice = TOOL_CHOICE_NAMED;
			ts->named = i;
			return 0;
		}
	return tool_error(err, errlen, ret_param, "tool_choice", "tool_choice names \"%.64s\", which is not in tools",
			  name->valuestring);
}

int
tools_parse(const cJSON *tools, const cJSON *choice, const cJSON *parallel, struct tool_set *ret, char *err,
	    size_t errlen, const char **ret_param)
{
	struct tool_set ts = { .parallel = 1 };
	const cJSON *t;

	if (tools != NULL && !cJSON_IsNull(tools)) {
		if (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) > TOOLS_MAX)
			return tool_error(err, errlen, ret_param, "tools", "tools must be an array of at most %s tools",
					  "128");
		if ((ts.t = calloc((size_t)cJSON_GetArraySize(tools) + 1, sizeof(*ts.t))) == NULL)
			return tool_error(err, errlen, ret_param, "tools", "out of memory%s", "");
		cJSON_ArrayForEach (t, tools) {
			if (parse_one(t, ts.n, &ts.t[ts.n], err, errlen, ret_param) < 0) {
				ts.n++;
				tools_free(&ts);
				return -1;
			}
			for (int k = 0; k < ts.n; k++)
				if (strcmp(ts.t[k].name, ts.t[ts.n].name) == 0) {
					tool_error(err, errlen, ret_param, "tools", "two tools are named \"%s\"",
						   ts.t[k].name);
					ts.n++;
					tools_free(&ts);
					return -1;
				}
			ts.n++;
		}
	}
	if (parallel != NULL && !cJSON_IsNull(parallel)) {
		if (!cJSON_IsBool(parallel)) {
			tools_free(&ts);
			return tool_error(err, errlen, ret_param, "parallel_tool_calls",
					  "parallel_tool_calls must be a boolean%s", "");
		}
		ts.parallel = cJSON_IsTrue(parallel);
	}
	if (parse_choice(choice, &ts, err, errlen, ret_param) < 0) {
		tools_free(&ts);
		return -1;
	}
	*ret = ts;
	return 0;
}

void
tools_free(struct tool_set *ts)
{
	for (int i = 0; i < ts->n; i++) {
		free(ts->t[i].name);
		cJSON_free(ts->t[i].function);
		cJSON_Delete(ts->t[i].parameters);
	}
	free(ts->t);
	memset(ts, 0, sizeof(*ts));
}

static cJSON *
params_or_object(const struct tool_def *d)
{
	cJSON *o;

	if (d->parameters != NULL)
		return cJSON_Duplicate(d->parameters, 1);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", "object");
	return o;
}

/* A parameters schema's $ref points into its own $defs; wrapped in the
 * array of calls they would miss, so the definitions move to the root
 * (two tools defining one name differently cannot be forced together). */
static int
lift_defs(cJSON *root, cJSON *alts, char *err, size_t errlen)
{
	static const char *const keys[] = { "$defs", "definitions" };
	cJSON *call;

	cJSON_ArrayForEach (call, alts) {
		cJSON *params = cJSON_GetObjectItem(cJSON_GetObjectItem(call, "properties"), "parameters");
		for (int k = 0; k < 2; k++) {
			cJSON *defs = cJSON_DetachItemFromObjectCaseSensitive(params, keys[k]), *d;
			if (defs == NULL)
				continue;
			cJSON *into = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
			if (into == NULL)
				into = cJSON_AddObjectToObject(root, keys[k]);
			while ((d = defs->child) != NULL) {
				cJSON_DetachItemViaPointer(defs, d);
				cJSON *have = cJSON_GetObjectItemCaseSensitive(into, d->string);
				if (have != NULL && !cJSON_Compare(have, d, 1)) {
					snprintf(err, errlen, "two tools define %s/%.60s differently", keys[k],
						 d->string);
					cJSON_Delete(d);
					cJSON_Delete(defs);
					return -1;
				}
				if (have != NULL)
					cJSON_Delete(d);
				else
					cJSON_AddItemToObject(into, d->string, d);
			}
			cJSON_Delete(defs);
		}
	}
	return 0;
}

struct json_schema *
tools_forced_schema(const struct tool_set *ts, char *err, size_t errlen)
{
	struct json_schema *s = NULL;
	cJSON *root;

	if (ts->choice == TOOL_CHOICE_NAMED) {
		root = params_or_object(&ts->t[ts->named]);
	} else {
		/* an array of calls, each {"name": one of the tools, "parameters": its schema} */
		cJSON *items, *alts;
		root = cJSON_CreateObject();
		cJSON_AddStringToObject(root, "type", "array");
		cJSON_AddNumberToObject(root, "minItems", 1);
		if (!ts->parallel)
			cJSON_AddNumberToObject(root, "maxItems", 1);
		items = cJSON_AddObjectToObject(root, "items");
		alts = cJSON_AddArrayToObject(items, "anyOf");
		for (int i = 0; i < ts->n; i++) {
			cJSON *call = cJSON_CreateObject(), *props, *req;
			cJSON_AddStringToObject(call, "type", "object");
			props = cJSON_AddObjectToObject(call, "properties");
			cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "name"), "const", ts->t[i].name);
			cJSON_AddItemToObject(props, "parameters", params_or_object(&ts->t[i]));
			req = cJSON_AddArrayToObject(call, "required");
			cJSON_AddItemToArray(req, cJSON_CreateString("name"));
			cJSON_AddItemToArray(req, cJSON_CreateString("parameters"));
			cJSON_AddFalseToObject(call, "additionalProperties");
			cJSON_AddItemToArray(alts, call);
		}
		if (lift_defs(root, alts, err, errlen) < 0) {
			cJSON_Delete(root);
			return NULL;
		}
	}
	if (root == NULL || json_schema_compile(root, &s, err, errlen) < 0)
		s = NULL;
	cJSON_Delete(root);
	return s;
}

/* ------------------------------------------------------------ output */

char *
tool_call_new_id(enum chat_family f)
{
	static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	unsigned char r[24];
	char *id = malloc(32);

	if (id == NULL)
		return NULL;
	randombytes_buf(r, sizeof(r));
	if (f == CHAT_MISTRAL) { /* its template wants 9 letters and digits */
		for (int i = 0; i < 9; i++)
			id[i] = alnum[r[i] % 62];
		id[9] = '\0';
		return id;
	}
	memcpy(id, "call_", 5);
	for (int i = 0; i < 24; i++)
		id[5 + i] = alnum[r[i] % 62];
	id[29] = '\0';
	return id;
}

struct calls {
	struct tool_call *v;
	int n, cap, oom;
};

/* One call, if name is a tool and args an object; 0 added, -1 not a call. */
static int
add_call(struct calls *c, const struct tool_set *ts, enum chat_family f, const char *name, const cJSON *args)
{
	int known = 0;

	for (int i = 0; i < ts->n && name != NULL; i++)
		known |= strcmp(ts->t[i].name, name) == 0;
	if (!known || !cJSON_IsObject(args))
		return -1;
	if (c->n == c->cap) {
		int cap = c->cap ? c->cap * 2 : 4;
		struct tool_call *v = realloc(c->v, (size_t)cap * sizeof(*v));
		if (v == NULL) {
			c->oom = 1;
			return -1;
		}
		c->v = v;
		c->cap = cap;
	}
	struct tool_call *tc = &c->v[c->n];
	tc->id = tool_call_new_id(f);
	tc->name = strdup(name);
	tc->arguments = cJSON_PrintUnformatted(args);
	c->n++;
	if (tc->id == NULL || tc->name == NULL || tc->arguments == NULL)
		c->oom = 1;
	return c->oom ? -1 : 0;
}

/* A JSON object {"name": ..., key: {...}} at p; the end of it, or NULL. */
static const char *
call_object(struct calls *c, const struct tool_set *ts, enum chat_family f, const char *p, const char *key)
{
	const char *end = NULL;
	cJSON *o = cJSON_ParseWithOpts(p, &end, 0);
	const cJSON *name = cJSON_GetObjectItem(o, "name"), *args = cJSON_GetObjectItem(o, key);

	if (args == NULL && strcmp(key, "parameters") == 0)
		args = cJSON_GetObjectItem(o, "arguments");
	int rc = cJSON_IsString(name) ? add_call(c, ts, f, name->valuestring, args) : -1;
	cJSON_Delete(o);
	return rc == 0 ? end : NULL;
}

static const char *
skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	return p;
}

/* The calls from start to the end of raw; 0, or -1 when any part is not
 * a call (the output is then plain text). */
static int
parse_calls(struct calls *c, const struct tool_set *ts, enum chat_family f, const char *p)
{
	switch (f) {
	case CHAT_LLAMA3:
		if (strncmp(p, "<|python_tag|>", 14) == 0)
			p += 14;
		for (;;) {
			if ((p = call_object(c, ts, f, skip_ws(p), "parameters")) == NULL)
				return -1;
			p = skip_ws(p);
			if (*p == '\0')
				return 0;
			if (*p++ != ';')
				return -1;
		}
	case CHAT_CHATML:
		while (*(p = skip_ws(p)) != '\0') {
			if (strncmp(p, "<tool_call>", 11) != 0 ||
			    (p = call_object(c, ts, f, skip_ws(p + 11), "arguments")) == NULL)
				return -1;
			p = skip_ws(p);
			if (strncmp(p, "</tool_call>", 12) == 0)
				p += 12;
			else if (*p != '\0') /* the model may stop before the closing tag */
				return -1;
		}
		return 0;
	case CHAT_MISTRAL: {
		const char *end = NULL;
		cJSON *arr = cJSON_ParseWithOpts(skip_ws(p + 12), &end, 0), *o;
		int rc = cJSON_IsArray(arr) && cJSON_GetArraySize(arr) > 0 ? 0 : -1;
		cJSON_ArrayForEach (o, arr) {
			const cJSON *name = cJSON_GetObjectItem(o, "name");
			if (rc == 0 && (!cJSON_IsString(name) ||
					add_call(c, ts, f, name->valuestring, cJSON_GetObjectItem(o, "arguments")) < 0))
				rc = -1;
		}
		cJSON_Delete(arr);
		return rc == 0 && *skip_ws(end != NULL ? end : "") == '\0' ? 0 : -1;
	}
	case CHAT_DEEPSEEK3:
		p += strlen(DS_CALLS_BEGIN);
		while (strncmp(p = skip_ws(p), DS_CALL_BEGIN, strlen(DS_CALL_BEGIN)) == 0) {
			const char *sep = strstr(p, DS_SEP), *nl, *args;
			if (sep == NULL || (nl = strchr(sep, '\n')) == NULL)
				return -1;
			char name[65];
			size_t nlen = (size_t)(nl - sep) - strlen(DS_SEP);
			if (nlen == 0 || nlen >= sizeof(name))
				return -1;
			memcpy(name, sep + strlen(DS_SEP), nlen);
			name[nlen] = '\0';
			args = skip_ws(nl);
			if (strncmp(args, "```json", 7) == 0)
				args += 7;
			const char *end = NULL;
			cJSON *o = cJSON_ParseWithOpts(args, &end, 0);
			int rc = add_call(c, ts, f, name, o);
			cJSON_Delete(o);
			if (rc < 0)
				return -1;
			p = skip_ws(end);
			if (strncmp(p, "```", 3) == 0)
				p = skip_ws(p + 3);
			if (strncmp(p, DS_CALL_END, strlen(DS_CALL_END)) == 0)
				p += strlen(DS_CALL_END);
		}
		return 0; /* the calls-end marker, or the end, follows */
	default:
		return -1;
	}
}

/* Where the family's calls begin in raw; NULL when they do not. */
static const char *
calls_start(enum chat_family f, const char *raw)
{
	const char *p = skip_ws(raw);

	switch (f) {
	case CHAT_LLAMA3:
		return *p == '{' || strncmp(p, "<|python_tag|>", 14) == 0 ? p : NULL;
	case CHAT_CHATML:
		return strstr(raw, "<tool_call>");
	case CHAT_MISTRAL:
		return strstr(raw, "[TOOL_CALLS]");
	case CHAT_DEEPSEEK3:
		return strstr(raw, DS_CALLS_BEGIN);
	default:
		return NULL;
	}
}

int
tools_parse_output(const struct tool_set *ts, enum chat_family f, const char *raw, struct tool_call **ret_calls,
		   size_t *ret_content_len)
{
	struct calls c = { 0 };
	const char *start;

	*ret_calls = NULL;
	*ret_content_len = strlen(raw);
	if (ts->choice == TOOL_CHOICE_NAMED) {
		cJSON *args = cJSON_Parse(raw);
		int rc = add_call(&c, ts, f, ts->t[ts->named].name, args);
		cJSON_Delete(args);
		if (rc < 0 && !c.oom)
			return 0;
	} else if (ts->choice == TOOL_CHOICE_REQUIRED) {
		cJSON *arr = cJSON_Parse(raw), *o;
		cJSON_ArrayForEach (o, arr)
			if (add_call(&c, ts, f, cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")),
				     cJSON_GetObjectItem(o, "parameters")) < 0)
				break;
		cJSON_Delete(arr);
	} else if ((start = calls_start(f, raw)) != NULL) {
		if (parse_calls(&c, ts, f, start) < 0 && !c.oom) {
			tool_calls_free(c.v, c.n);
			return 0; /* not calls after all: plain text */
		}
		*ret_content_len = (size_t)(start - raw);
		while (*ret_content_len > 0 && strchr(" \n\r\t", raw[*ret_content_len - 1]) != NULL)
			(*ret_content_len)--;
	}
	if (c.oom) {
		tool_calls_free(c.v, c.n);
		return -1;
	}
	if (c.n > 0 && ts->choice != TOOL_CHOICE_AUTO)
		*ret_content_len = 0;
	*ret_calls = c.v;
	return c.n;
}

void
tool_calls_free(struct tool_call *calls, int n)
{
	for (int i = 0; i < n; i++) {
		free(calls[i].id);
		free(calls[i].name);
		cJSON_free(calls[i].arguments);
	}
	free(calls);
}

size_t
tools_hold_from(enum chat_family f, const char *text, size_t len)
{
	static const char *const markers[] = {
		[CHAT_CHATML] = "<tool_call>", [CHAT_MISTRAL] = "[TOOL_CALLS]", [CHAT_DEEPSEEK3] = DS_CALLS_BEGIN
	};
	const char *m = (size_t)f < sizeof(markers) / sizeof(markers[0]) ? markers[f] : NULL;

	if (f == CHAT_LLAMA3) {
		const char *p = skip_ws(text);
		/* the whole reply is a call or it is text: its first byte says */
		return (size_t)(p - text) < len && (*p == '{' || *p == '<') ? (size_t)(p - text) : len;
	}
	if (m == NULL)
		return len;
	size_t ml = strlen(m);
	const char *hit = memmem(text, len, m, ml);
	if (hit != NULL)
		return (size_t)(hit - text);
	/* a tail that could still grow into the marker */
	for (size_t k = ml - 1; k > 0; k--)
		if (k <= len && memcmp(text + len - k, m, k) == 0)
			return len - k;
	return len;
}
