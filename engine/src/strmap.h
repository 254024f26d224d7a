/*
 * A string -> int32 hash map (open addressing, FNV-1a) for vocabularies
 * and merge ranks.  Keys are borrowed: they must outlive the map.
 */
#ifndef PRIVAI_STRMAP_H
#define PRIVAI_STRMAP_H

#include <stddef.h>
#include <stdint.h>

struct strmap {
	const char **keys;
	uint32_t *key_lens;
	int32_t *vals;
	size_t cap; /* power of two */
	size_t n;
};

/* Size for up to n entries.  0 or PRIVAI_ENOMEM. */
int strmap_init(struct strmap *m, size_t n);
void strmap_free(struct strmap *m);
/* Insert key (len bytes); an existing key keeps its first value. */
void strmap_put(struct strmap *m, const char *key, size_t len, int32_t val);
/* Value for key, or -1. */
int32_t strmap_get(const struct strmap *m, const char *key, size_t len);

#endif
