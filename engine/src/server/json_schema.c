/*
 * The JSON Schema compiler (json_schema.h has the subset).  It walks the
 * schema once, refusing any keyword it would not enforce, and builds a
 * graph of nodes; $ref targets are compiled once and shared, which is how
 * a recursive schema becomes a cycle in the graph.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_schema_int.h"

#define COMPILE_MAX_DEPTH 64
#define COMPILE_MAX_REFS 256

struct snode schema_any = { .kind = S_ANY };

struct compiler {
	const cJSON *root;
	struct json_schema *s;
	struct {
		const cJSON *target;
		struct snode *node;
	} refs[COMPILE_MAX_REFS];
	int n_refs;
	char *err;
	size_t errlen;
};

static const char *const annotations[] = { "title",   "description", "$schema",    "$id",      "$comment",
					   "default", "examples",    "deprecated", "readOnly", "writeOnly",
					   "$defs",   "definitions", "strict",     NULL };
static const char *const keywords[] = { "type",      "properties", "required", "additionalProperties",
					"items",     "minItems",   "maxItems", "enum",
					"const",     "anyOf",      "$ref",     "minLength",
					"maxLength", "pattern",    NULL };

static struct snode *fail(struct compiler *c, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static struct snode *
fail(struct compiler *c, const char *path, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (c->err[0] != '\0')
		return NULL; /* keep the first */
	n = snprintf(c->err, c->errlen, "%s: ", path);
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < c->errlen)
		vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return NULL;
}

static int
listed(const char *const *names, const char *name)
{
	for (int i = 0; names[i] != NULL; i++)
		if (strcmp(names[i], name) == 0)
			return 1;
	return 0;
}

static struct snode *
node_new(struct compiler *c, enum snode_kind kind)
{
	struct snode *n = calloc(1, sizeof(*n));

	if (n == NULL)
		return fail(c, "#", "out of memory");
	n->kind = kind;
	n->max_items = UINT32_MAX;
	n->max_len = UINT32_MAX;
	n->next_alloc = c->s->nodes;
	c->s->nodes = n;
	return n;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
subpath(char *out, size_t cap, const char *path, const char *key)
{
	snprintf(out, cap, "%s/%s", path, key);
}

static struct snode *compile(struct compiler *c, const cJSON *j, const char *path, int depth);

/* A JSON type name's kind; -1 when not one.  boolean and null are literals. */
static int
type_kind(const char *t)
{
	static const struct {
		const char *name;
		enum snode_kind kind;
	} types[] = { { "object", S_OBJECT }, { "array", S_ARRAY },     { "string", S_STRING },
		      { "number", S_NUMBER }, { "integer", S_INTEGER }, { "boolean", S_LITERALS },
		      { "null", S_LITERALS } };

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(t, types[i].name) == 0)
			return (int)types[i].kind;
	return -1;
}

/* Does literal v have JSON type t (NULL: any)? */
static int
literal_has_type(const cJSON *v, const char *t)
{
	if (t == NULL)
		return 1;
	if (strcmp(t, "integer") == 0)
		/* no cast: one of a double beyond long long is undefined */
		return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
	return (strcmp(t, "number") == 0 && cJSON_IsNumber(v)) || (strcmp(t, "string") == 0 && cJSON_IsString(v)) ||
	       (strcmp(t, "boolean") == 0 && cJSON_IsBool(v)) || (strcmp(t, "null") == 0 && cJSON_IsNull(v)) ||
	       (strcmp(t, "object") == 0 && cJSON_IsObject(v)) || (strcmp(t, "array") == 0 && cJSON_IsArray(v));
}

static struct snode *
literals(struct compiler *c, const cJSON *vals, int one, const char *type, const char *path)
{
	struct snode *n = node_new(c, S_LITERALS);
	int cap = one ? 1 : cJSON_GetArraySize(vals);
	const cJSON *v;

	if (n == NULL)
		return NULL;
	if ((n->lits = calloc((size_t)cap + 1, sizeof(char *))) == NULL)
		return fail(c, path, "out of memory");
	for (v = one ? vals : vals->child; v != NULL && n->n_lits < cap; v = one ? NULL : v->next) {
		if (!literal_has_type(v, type))
			continue;
		if ((n->lits[n->n_lits++] = cJSON_PrintUnformatted(v)) == NULL)
			return fail(c, path, "out of memory");
	}
	if (n->n_lits == 0)
		return fail(c, path, "no value of %s can satisfy the schema", one ? "const" : "enum");
	qsort(n->lits, (size_t)n->n_lits, sizeof(char *), cmp_str);
	int k = 0;
	for (int i = 0; i < n->n_lits; i++)
		if (k == 0 || strcmp(n->lits[k - 1], n->lits[i]) != 0)
			n->lits[k++] = n->lits[i];
		else
			free(n->lits[i]);
	n->n_lits = k;
	return n;
}

static int
get_count(struct compiler *c, const cJSON *j, const char *key, const char *path, uint32_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);

	if (v == NULL)
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 ||
	    v->valuedouble != (double)(uint32_t)v->valuedouble) {
		fail(c, path, "%s must be a whole number from 0", key);
		return -1;
	}
	*out = (uint32_t)v->valuedouble;
	return 0;
}

static struct snode *
compile_object(struct compiler *c, const cJSON *j, const char *path, int depth)
{
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(j, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(j, "required");
	const cJSON *add = cJSON_GetObjectItemCaseSensitive(j, "additionalProperties");
	struct snode *n = node_new(c, S_OBJECT);
	char sub[512];
	const cJSON *p;

	if (n == NULL)
		return NULL;
	if (add != NULL && !cJSON_IsBool(add) && !(cJSON_IsObject(add) && add->child == NULL))
		return fail(c, path, "additionalProperties as a schema is not supported (true or false)");
	if (props != NULL && !cJSON_IsObject(props))
		return fail(c, path, "properties must be an object");
	n->n_props = props != NULL ? cJSON_GetArraySize(props) : 0;
	n->open = props == NULL;
	if (n->n_props > SCHEMA_MAX_PROPS)
		return fail(c, path, "more than %d properties are not supported", SCHEMA_MAX_PROPS);
	n->names = calloc((size_t)n->n_props + 1, sizeof(char *));
	n->props = calloc((size_t)n->n_props + 1, sizeof(struct snode *));
	if (n->names == NULL || n->props == NULL)
		return fail(c, path, "out of memory");
	int i = 0;
	cJSON_ArrayForEach (p, props) {
		for (const char *q = p->string; *q != '\0'; q++)
			if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
				return fail(c, path, "property name \"%.40s\" needs escaping, which is not supported",
					    p->string);
		if ((n->names[i++] = strdup(p->string)) == NULL)
			return fail(c, path, "out of memory");
	}
	qsort(n->names, (size_t)n->n_props, sizeof(char *), cmp_str);
	for (i = 0; i < n->n_props; i++) {
		if (i > 0 && strcmp(n->names[i - 1], n->names[i]) == 0)
			return fail(c, path, "property \"%.40s\" is declared twice", n->names[i]);
		snprintf(sub, sizeof(sub), "%s/properties/%.200s", path, n->names[i]);
		if ((n->props[i] = compile(c, cJSON_GetObjectItemCaseSensitive(props, n->names[i]), sub, depth + 1)) ==
		    NULL)
			return NULL;
	}
	if (req != NULL && !cJSON_IsArray(req))
		return fail(c, path, "required must be an array of property names");
	cJSON_ArrayForEach (p, req) {
		int k = -1;
		for (i = 0; cJSON_IsString(p) && i < n->n_props; i++)
			if (strcmp(n->names[i], p->valuestring) == 0)
				k = i;
		if (k < 0)
			return fail(c, path, "required names \"%.40s\", which is not in properties",
				    cJSON_IsString(p) ? p->valuestring : "(not a string)");
		n->required |= 1ull << k;
	}
	return n;
}

static struct snode *
compile_typed(struct compiler *c, const cJSON *j, enum snode_kind kind, const char *type, const char *path, int depth)
{
	struct snode *n;
	char sub[512];

	if (kind == S_OBJECT)
		return compile_object(c, j, path, depth);
	if (kind == S_LITERALS) {
		cJSON *vals = cJSON_CreateArray();
		if (vals == NULL)
			return fail(c, path, "out of memory");
		if (strcmp(type, "null") == 0) {
			cJSON_AddItemToArray(vals, cJSON_CreateNull());
		} else {
			cJSON_AddItemToArray(vals, cJSON_CreateFalse());
			cJSON_AddItemToArray(vals, cJSON_CreateTrue());
		}
		n = literals(c, vals, 0, NULL, path);
		cJSON_Delete(vals);
		return n;
	}
	if ((n = node_new(c, kind)) == NULL)
		return NULL;
	if (kind == S_ARRAY) {
		const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items");
		if (get_count(c, j, "minItems", path, &n->min_items) < 0 ||
		    get_count(c, j, "maxItems", path, &n->max_items) < 0)
			return NULL;
		if (n->min_items > n->max_items)
			return fail(c, path, "minItems is above maxItems");
		subpath(sub, sizeof(sub), path, "items");
		if (items != NULL && (n->items = compile(c, items, sub, depth + 1)) == NULL)
			return NULL;
	} else if (kind == S_STRING) {
		const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
		if (get_count(c, j, "minLength", path, &n->min_len) < 0 ||
		    get_count(c, j, "maxLength", path, &n->max_len) < 0)
			return NULL;
		if (n->min_len > n->max_len)
			return fail(c, path, "minLength is above maxLength");
		if (pat != NULL) {
			int ec;
			PCRE2_SIZE eo;
			if (!cJSON_IsString(pat))
				return fail(c, path, "pattern must be a string");
			n->pattern = pcre2_compile((PCRE2_SPTR)pat->valuestring, PCRE2_ZERO_TERMINATED,
						   PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
			if (n->pattern == NULL) {
				PCRE2_UCHAR msg[120];
				pcre2_get_error_message(ec, msg, sizeof(msg));
				return fail(c, path, "pattern is not a regular expression PCRE2 reads (%s at %zu)",
					    (const char *)msg, (size_t)eo);
			}
			/* matched per vocabulary token: machine code, where PCRE2 has it */
			(void)pcre2_jit_compile(n->pattern, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
			uint32_t opts = 0;
			pcre2_pattern_info(n->pattern, PCRE2_INFO_ALLOPTIONS, &opts);
			n->pattern_anchored = (opts & PCRE2_ANCHORED) != 0;
		}
	}
	return n;
}

static struct snode *
compile_ref(struct compiler *c, const cJSON *ref, const char *path, int depth)
{
	const cJSON *target = NULL;
	const char *r = cJSON_IsString(ref) ? ref->valuestring : "";

	if (strcmp(r, "#") == 0)
		target = c->root;
	else if (strncmp(r, "#/$defs/", 8) == 0)
		target = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->root, "$defs"), r + 8);
	else if (strncmp(r, "#/definitions/", 14) == 0)
		target = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->root, "definitions"),
							  r + 14);
	if (target == NULL)
		return fail(c, path, "$ref \"%.80s\" does not name #, #/$defs/NAME or #/definitions/NAME here", r);
	for (int i = 0; i < c->n_refs; i++)
		if (c->refs[i].target == target)
			return c->refs[i].node;
	if (c->n_refs == COMPILE_MAX_REFS)
		return fail(c, path, "more than %d distinct $ref targets", COMPILE_MAX_REFS);
	/* an indirection filled in below, so that a reference back to the
	 * target (recursion) gets this same node */
	struct snode *n = node_new(c, S_ANYOF), *body;
	if (n == NULL || (n->alts = calloc(1, sizeof(struct snode *))) == NULL)
		return fail(c, path, "out of memory");
	c->refs[c->n_refs].target = target;
	c->refs[c->n_refs++].node = n;
	if ((body = compile(c, target, r, depth + 1)) == NULL)
		return NULL;
	n->alts[0] = body;
	n->n_alts = 1;
	return n;
}

static struct snode *
compile(struct compiler *c, const cJSON *j, const char *path, int depth)
{
	const cJSON *type, *k;
	char sub[512];

	if (depth > COMPILE_MAX_DEPTH)
		return fail(c, path, "nested deeper than %d", COMPILE_MAX_DEPTH);
	if (cJSON_IsBool(j))
		return cJSON_IsTrue(j) ? &schema_any : fail(c, path, "the schema false accepts nothing");
	if (!cJSON_IsObject(j))
		return fail(c, path, "a schema must be an object");
	cJSON_ArrayForEach (k, j)
		if (!listed(annotations, k->string) && !listed(keywords, k->string))
			return fail(c, path, "%.60s is not supported", k->string);
	if ((k = cJSON_GetObjectItemCaseSensitive(j, "$ref")) != NULL) {
		cJSON_ArrayForEach (type, j)
			if (strcmp(type->string, "$ref") != 0 && !listed(annotations, type->string))
				return fail(c, path, "%.60s beside $ref is not supported", type->string);
		return compile_ref(c, k, path, depth);
	}
	if ((k = cJSON_GetObjectItemCaseSensitive(j, "anyOf")) != NULL) {
		struct snode *n;
		if (!cJSON_IsArray(k) || cJSON_GetArraySize(k) < 1 || cJSON_GetArraySize(k) > SCHEMA_MAX_ALTS)
			return fail(c, path, "anyOf must be an array of 1 to %d schemas", SCHEMA_MAX_ALTS);
		cJSON_ArrayForEach (type, j)
			if (strcmp(type->string, "anyOf") != 0 && !listed(annotations, type->string))
				return fail(c, path, "%.60s beside anyOf is not supported", type->string);
		if ((n = node_new(c, S_ANYOF)) == NULL)
			return NULL;
		if ((n->alts = calloc((size_t)cJSON_GetArraySize(k), sizeof(struct snode *))) == NULL)
			return fail(c, path, "out of memory");
		for (const cJSON *a = k->child; a != NULL; a = a->next) {
			snprintf(sub, sizeof(sub), "%s/anyOf/%d", path, n->n_alts);
			if ((n->alts[n->n_alts++] = compile(c, a, sub, depth + 1)) == NULL)
				return NULL;
		}
		return n;
	}
	type = cJSON_GetObjectItemCaseSensitive(j, "type");
	const char *t1 = type != NULL && cJSON_IsString(type) ? type->valuestring : NULL;
	if ((k = cJSON_GetObjectItemCaseSensitive(j, "const")) != NULL)
		return literals(c, k, 1, t1, path);
	if ((k = cJSON_GetObjectItemCaseSensitive(j, "enum")) != NULL) {
		if (!cJSON_IsArray(k) || k->child == NULL)
			return fail(c, path, "enum must be a non-empty array");
		return literals(c, k, 0, t1, path);
	}
	if (type == NULL) {
		/* the structure says the type */
		if (cJSON_GetObjectItemCaseSensitive(j, "properties") != NULL)
			return compile_object(c, j, path, depth);
		if (cJSON_GetObjectItemCaseSensitive(j, "items") != NULL)
			return compile_typed(c, j, S_ARRAY, "array", path, depth);
		return &schema_any;
	}
	if (t1 != NULL) {
		int kind = type_kind(t1);
		if (kind < 0)
			return fail(c, path, "type \"%.40s\" is not a JSON Schema type", t1);
		return compile_typed(c, j, (enum snode_kind)kind, t1, path, depth);
	}
	if (!cJSON_IsArray(type) || type->child == NULL || cJSON_GetArraySize(type) > 7)
		return fail(c, path, "type must be a type name or a non-empty list of them");
	struct snode *n = node_new(c, S_ANYOF);
	if (n == NULL || (n->alts = calloc(7, sizeof(struct snode *))) == NULL)
		return fail(c, path, "out of memory");
	cJSON_ArrayForEach (k, type) {
		int kind = cJSON_IsString(k) ? type_kind(k->valuestring) : -1;
		if (kind < 0)
			return fail(c, path, "type lists a name that is not a JSON Schema type");
		if ((n->alts[n->n_alts++] = compile_typed(c, j, (enum snode_kind)kind, k->valuestring, path, depth)) ==
		    NULL)
			return NULL;
	}
	return n;
}

static void
node_free(struct snode *n)
{
	for (int i = 0; i < n->n_props; i++)
		free(n->names[i]);
	free(n->names);
	free(n->props);
	for (int i = 0; i < n->n_lits; i++)
		free(n->lits[i]);
	free(n->lits);
	free(n->alts);
	pcre2_code_free(n->pattern);
	free(n);
}

static void
schema_free(struct json_schema *s)
{
	struct snode *n = s->nodes, *next;

	for (; n != NULL; n = next) {
		next = n->next_alloc;
		node_free(n);
	}
	free(s);
}

int
json_schema_compile(const cJSON *schema, struct json_schema **ret, char *err, size_t errlen)
{
	struct compiler *c = calloc(1, sizeof(*c));
	struct json_schema *s = calloc(1, sizeof(*s));

	if (c == NULL || s == NULL) {
		free(c);
		free(s);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	err[0] = '\0';
	c->root = schema;
	c->s = s;
	c->err = err;
	c->errlen = errlen;
	atomic_init(&s->refs, 1);
	s->root = compile(c, schema, "#", 0);
	free(c);
	if (s->root == NULL) {
		schema_free(s);
		return -1;
	}
	*ret = s;
	return 0;
}

struct json_schema *
json_schema_ref(struct json_schema *s)
{
	atomic_fetch_add(&s->refs, 1);
	return s;
}

void
json_schema_unref(struct json_schema *s)
{
	if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1)
		schema_free(s);
}
