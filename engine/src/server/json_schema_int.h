/*
 * The compiled form of a JSON Schema, shared by the compiler
 * (json_schema.c) and the recogniser (json_schema_run.c).
 */
#ifndef PRIVAI_JSON_SCHEMA_INT_H
#define PRIVAI_JSON_SCHEMA_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdatomic.h>
#include <stdint.h>

#include "server/json_schema.h"

#define SCHEMA_MAX_PROPS 64 /* an object's seen-set is a 64-bit mask */
#define SCHEMA_MAX_ALTS 16  /* anyOf alternatives, after flattening */

enum snode_kind {
	S_ANY,    /* any JSON value */
	S_OBJECT, /* declared properties (none: any object) */
	S_ARRAY,
	S_STRING,
	S_NUMBER,
	S_INTEGER,
	S_LITERALS, /* enum, const, boolean, null: one of fixed texts */
	S_ANYOF,
};

struct snode {
	enum snode_kind kind;
	/* S_OBJECT: names sorted bytewise, with their schemas */
	int n_props;
	char **names;
	struct snode **props;
	uint64_t required; /* bit i: names[i] is required */
	int open;          /* no properties declared: any keys, any values */
	/* S_ARRAY */
	struct snode *items; /* NULL: any value */
	uint32_t min_items, max_items;
	/* S_STRING */
	uint32_t min_len, max_len; /* in characters */
	pcre2_code *pattern;
	int pattern_anchored; /* unanchored: any text can still grow a match */
	/* S_LITERALS: JSON texts without whitespace, sorted bytewise */
	int n_lits;
	char **lits;
	/* S_ANYOF */
	int n_alts;
	struct snode **alts;
	struct snode *next_alloc; /* every node, for freeing */
};

struct json_schema {
	atomic_int refs;
	struct snode *root;
	struct snode *nodes; /* allocation list */
};

/* The node that accepts any value (static, never freed). */
extern struct snode schema_any;

#endif
