/* Open-addressing string map; see strmap.h. */
#include <stdlib.h>
#include <string.h>

#include "privai/status.h"
#include "strmap.h"

static uint64_t
hash(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

int
strmap_init(struct strmap *m, size_t n)
{
	size_t cap = 16;

	while (cap < 2 * n + 1)
		cap <<= 1;
	memset(m, 0, sizeof(*m));
	m->keys = calloc(cap, sizeof(*m->keys));
	m->key_lens = calloc(cap, sizeof(*m->key_lens));
	m->vals = calloc(cap, sizeof(*m->vals));
	if (m->keys == NULL || m->key_lens == NULL || m->vals == NULL) {
		strmap_free(m);
		return PRIVAI_ENOMEM;
	}
	m->cap = cap;
	return PRIVAI_OK;
}

void
strmap_free(struct strmap *m)
{
	free(m->keys);
	free(m->key_lens);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

void
strmap_put(struct strmap *m, const char *key, size_t len, int32_t val)
{
	size_t i = hash(key, len) & (m->cap - 1);

	/* strmap_init sized the table for every key; it never fills */
	while (m->keys[i] != NULL) {
		if (m->key_lens[i] == len && memcmp(m->keys[i], key, len) == 0)
			return;
		i = (i + 1) & (m->cap - 1);
	}
	m->keys[i] = key;
	m->key_lens[i] = (uint32_t)len;
	m->vals[i] = val;
	m->n++;
}

int32_t
strmap_get(const struct strmap *m, const char *key, size_t len)
{
	if (m->cap == 0)
		return -1;
	size_t i = hash(key, len) & (m->cap - 1);

	while (m->keys[i] != NULL) {
		if (m->key_lens[i] == len && memcmp(m->keys[i], key, len) == 0)
			return m->vals[i];
		i = (i + 1) & (m->cap - 1);
	}
	return -1;
}
