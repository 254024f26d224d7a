/*
 * API keys: bearer tokens read from a file, one per line, either in plain
 * text or as "sha256:" and 64 hex digits (what `privai-engine hash-key`
 * prints), so the file need not hold the secrets themselves.  Blank lines
 * and lines starting with # are ignored.  Only hashes are kept in memory,
 * and a presented token is compared with every one in constant time.
 */
#ifndef PRIVAI_API_KEYS_H
#define PRIVAI_API_KEYS_H

#include <stddef.h>

struct api_keys;

/* PRIVAI_OK, or an error naming the file and line. */
int api_keys_load(const char *path, struct api_keys **ret, char *err);
void api_keys_free(struct api_keys *k);
int api_keys_count(const struct api_keys *k);
/* 1 when token (len bytes) is one of the keys. */
int api_keys_check(const struct api_keys *k, const char *token, size_t len);
/* "sha256:<hex>" of key into out (at least 72 bytes). */
void api_key_hash_text(const char *key, size_t len, char *out);

#endif
