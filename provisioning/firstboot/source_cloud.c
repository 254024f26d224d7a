/*
 * Source 2: the `privai:` mapping of the instance's cloud-config, as
 * cloud-init leaves it merged on disk (cloud-init itself applies users,
 * SSH keys, write_files and the rest).  Read with libyaml's event parser:
 * a scalar value is taken as it is, a list of scalars is joined with
 * commas (dns, ntp, models), anything deeper is refused for that key.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "firstboot.h"
#include "hostfs.h"

#define CLOUD_MAX (1 << 20)

struct walk {
	struct fb_config *c;
	const char *source;
	yaml_parser_t p;
};

static int
next(struct walk *w, yaml_event_t *e)
{
	if (!yaml_parser_parse(&w->p, e)) {
		fb_warn(w->c, "%s: YAML error at line %zu: %s; its privai: keys are not used", w->source,
			w->p.problem_mark.line + 1, w->p.problem ? w->p.problem : "?");
		return -1;
	}
	return 0;
}

/* Skip the node whose first event is e (already read). */
static int
skip(struct walk *w, yaml_event_t *e)
{
	int depth = e->type == YAML_MAPPING_START_EVENT || e->type == YAML_SEQUENCE_START_EVENT;

	yaml_event_delete(e);
	while (depth > 0) {
		yaml_event_t x;
		if (next(w, &x) < 0)
			return -1;
		if (x.type == YAML_MAPPING_START_EVENT || x.type == YAML_SEQUENCE_START_EVENT)
			depth++;
		else if (x.type == YAML_MAPPING_END_EVENT || x.type == YAML_SEQUENCE_END_EVENT)
			depth--;
		yaml_event_delete(&x);
	}
	return 0;
}

/* A list of scalars joined with commas into a new string, or NULL
 * (problem set) when an item is not a scalar. */
static char *
join_list(struct walk *w, char *problem, size_t size)
{
	size_t len = 0;
	char *out = calloc(1, 1);
	int bad = 0;

	for (;;) {
		yaml_event_t e;
		if (out == NULL || next(w, &e) < 0) {
			free(out);
			return NULL;
		}
		if (e.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&e);
			break;
		}
		if (e.type != YAML_SCALAR_EVENT) {
			bad = 1;
			if (skip(w, &e) < 0) {
				free(out);
				return NULL;
			}
			continue;
		}
		size_t n = e.data.scalar.length;
		char *grown = realloc(out, len + n + 2);
		if (grown == NULL) {
			yaml_event_delete(&e);
			free(out);
			return NULL;
		}
		out = grown;
		if (len > 0)
			out[len++] = ',';
		memcpy(out + len, e.data.scalar.value, n);
		len += n;
		out[len] = '\0';
		yaml_event_delete(&e);
	}
	if (bad) {
		snprintf(problem, size, "a list of plain values only");
		free(out);
		return NULL;
	}
	return out;
}

/* The privai: mapping's body, its MAPPING_START read. */
static int
take_mapping(struct walk *w)
{
	for (;;) {
		yaml_event_t key, val;
		if (next(w, &key) < 0)
			return -1;
		if (key.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&key);
			return 0;
		}
		char name[80] = "?";
		if (key.type == YAML_SCALAR_EVENT)
			snprintf(name, sizeof(name), "%.*s", (int)key.data.scalar.length,
				 (const char *)key.data.scalar.value);
		yaml_event_delete(&key);
		if (next(w, &val) < 0)
			return -1;
		int k = fb_key_find(name);
		if (k < 0) {
			fb_warn(w->c, "%s: privai.%s is not a key; ignored", w->source, name);
			if (skip(w, &val) < 0)
				return -1;
			continue;
		}
		if (val.type == YAML_SCALAR_EVENT) {
			fb_config_set(w->c, (enum fb_key)k, (const char *)val.data.scalar.value, w->source);
			yaml_event_delete(&val);
		} else if (val.type == YAML_SEQUENCE_START_EVENT) {
			char problem[200] = "";
			yaml_event_delete(&val);
			char *joined = join_list(w, problem, sizeof(problem));
			if (joined == NULL && problem[0] == '\0')
				return -1;
			fb_config_set(w->c, (enum fb_key)k, joined != NULL ? joined : "", w->source);
			if (joined == NULL)
				snprintf(w->c->v[k].problem, sizeof(w->c->v[k].problem), "%s", problem);
			free(joined);
		} else {
			fb_config_set(w->c, (enum fb_key)k, "", w->source);
			snprintf(w->c->v[k].problem, sizeof(w->c->v[k].problem),
				 "a plain value or a list, not a mapping");
			if (skip(w, &val) < 0)
				return -1;
		}
	}
}

static int
walk_document(struct walk *w)
{
	yaml_event_t e;
	int depth = 0, rc = 0;

	for (;;) {
		if (next(w, &e) < 0)
			return -1;
		if (e.type == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&e);
			return rc;
		}
		if (e.type == YAML_MAPPING_START_EVENT && depth == 0) {
			depth = 1;
			yaml_event_delete(&e);
			continue;
		}
		/* a top-level key: privai, or anything else to skip */
		if (depth == 1 && e.type == YAML_SCALAR_EVENT) {
			int ours = e.data.scalar.length == 6 && memcmp(e.data.scalar.value, "privai", 6) == 0;
			yaml_event_delete(&e);
			yaml_event_t val;
			if (next(w, &val) < 0)
				return -1;
			if (!ours) {
				if (skip(w, &val) < 0)
					return -1;
				continue;
			}
			if (val.type != YAML_MAPPING_START_EVENT) {
				fb_warn(w->c, "%s: privai: is not a mapping of keys; ignored", w->source);
				if (skip(w, &val) < 0)
					return -1;
				continue;
			}
			yaml_event_delete(&val);
			if (take_mapping(w) < 0)
				return -1;
			continue;
		}
		if (e.type == YAML_MAPPING_END_EVENT && depth == 1)
			depth = 0;
		yaml_event_delete(&e);
	}
}

int
fb_read_cloud_config(struct fb_config *c, const char *root, const char *path)
{
	struct fb_config t;
	struct walk w = { .c = &t };
	char source[80];
	size_t len;
	char *text;
	int rc;

	if (!hostfs_exists(root, path))
		return 0;
	if ((text = hostfs_read_text(root, path, CLOUD_MAX, &len)) == NULL) {
		fb_warn(c, "%s cannot be read (or is larger than 1 MiB); cloud-init's privai: keys are not used", path);
		return -1;
	}
	snprintf(source, sizeof(source), "cloud-init (%s)", path);
	w.source = source;
	if (!yaml_parser_initialize(&w.p)) {
		free(text);
		fb_warn(c, "out of memory reading %s", path);
		return -1;
	}
	/* into a scratch config: a file that breaks half-way gives nothing */
	fb_config_init(&t);
	yaml_parser_set_input_string(&w.p, (const unsigned char *)text, len);
	rc = walk_document(&w);
	yaml_parser_delete(&w.p);
	fb_config_merge(c, &t, rc == 0);
	fb_config_free(&t);
	sodium_memzero(text, strlen(text)); /* an admin password may be in it */
	free(text);
	return rc;
}
