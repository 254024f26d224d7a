/* API keys file: load, hash, and constant-time check. */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/status.h"
#include "server/api_keys.h"

#define HASH_LEN crypto_hash_sha256_BYTES

struct api_keys {
	int n;
	unsigned char (*hash)[HASH_LEN];
};

static int
parse_hex_hash(const char *hex, size_t len, unsigned char *out)
{
	size_t bin_len = 0;

	if (len != 2 * HASH_LEN)
		return -1;
	return sodium_hex2bin(out, HASH_LEN, hex, len, NULL, &bin_len, NULL) == 0 && bin_len == HASH_LEN ? 0 : -1;
}

static int
add_line(struct api_keys *k, char *line, int lineno, const char *path, char *err)
{
	size_t len = strlen(line);

	while (len > 0 &&
	       (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		line[--len] = '\0';
	while (*line == ' ' || *line == '\t') {
		line++;
		len--;
	}
	if (len == 0 || line[0] == '#')
		return PRIVAI_OK;
	unsigned char(*nh)[HASH_LEN] = realloc(k->hash, (size_t)(k->n + 1) * sizeof(*k->hash));
	if (nh == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory reading %s", path);
	k->hash = nh;
	if (strncmp(line, "sha256:", 7) == 0) {
		if (parse_hex_hash(line + 7, len - 7, k->hash[k->n]) < 0)
			return privai_fail(err, PRIVAI_EFORMAT, "%s:%d: sha256: must be followed by 64 hex digits",
					   path, lineno);
	} else {
		if (len < 8)
			return privai_fail(err, PRIVAI_EFORMAT, "%s:%d: an API key must be at least 8 characters", path,
					   lineno);
		crypto_hash_sha256(k->hash[k->n], (const unsigned char *)line, len);
	}
	k->n++;
	return PRIVAI_OK;
}

int
api_keys_load(const char *path, struct api_keys **ret, char *err)
{
	struct api_keys *k;
	char *line = NULL;
	size_t cap = 0;
	int lineno = 0, rc = PRIVAI_OK;
	FILE *f;

	if (sodium_init() < 0)
		return privai_fail(err, PRIVAI_EIO, "libsodium failed to initialise");
	if ((f = fopen(path, "r")) == NULL)
		return privai_fail(err, PRIVAI_EIO, "%s: %s", path, strerror(errno));
	if ((k = calloc(1, sizeof(*k))) == NULL) {
		fclose(f);
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	}
	while (rc == PRIVAI_OK && getline(&line, &cap, f) >= 0)
		rc = add_line(k, line, ++lineno, path, err);
	if (rc == PRIVAI_OK && ferror(f))
		rc = privai_fail(err, PRIVAI_EIO, "%s: read error", path);
	if (rc == PRIVAI_OK && k->n == 0)
		rc = privai_fail(err, PRIVAI_EFORMAT, "%s: no API keys in the file", path);
	free(line);
	fclose(f);
	if (rc < 0) {
		api_keys_free(k);
		return rc;
	}
	*ret = k;
	return PRIVAI_OK;
}

void
api_keys_free(struct api_keys *k)
{
	if (k == NULL)
		return;
	sodium_memzero(k->hash, (size_t)k->n * HASH_LEN);
	free(k->hash);
	free(k);
}

int
api_keys_count(const struct api_keys *k)
{
	return k != NULL ? k->n : 0;
}

int
api_keys_check(const struct api_keys *k, const char *token, size_t len)
{
	unsigned char h[HASH_LEN];
	int found = 0;

	crypto_hash_sha256(h, (const unsigned char *)token, len);
	/* look at every key, so the time says nothing about which matched */
	for (int i = 0; i < k->n; i++)
		found |= sodium_memcmp(h, k->hash[i], HASH_LEN) == 0;
	return found;
}

void
api_key_hash_text(const char *key, size_t len, char *out)
{
	unsigned char h[HASH_LEN];

	crypto_hash_sha256(h, (const unsigned char *)key, len);
	memcpy(out, "sha256:", 7);
	sodium_bin2hex(out + 7, 2 * HASH_LEN + 1, h, HASH_LEN);
}
