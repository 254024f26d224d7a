/*
 * A request body as one JSON object, checked beyond what cJSON checks:
 * nothing may follow the object (a body with two objects, or a truncated
 * copy-paste with junk after it, is not silently half-read), and no
 * string may hold U+0000, which cJSON decodes into a C string that ends
 * there: the model would see a shorter prompt than the one sent.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "server/server.h"

static int
json_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

/* Whether a string of the (already parsed, so well-formed) JSON text
 * holds the escape \u0000; key gets the top-level field it is in. */
static int
nul_escape_field(const char *s, size_t n, char *key, size_t keylen)
{
	int depth = 0, in_str = 0;
	size_t str_start = 0;

	key[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (in_str) {
			if (ch == '\\') {
				if (i + 5 < n && s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0)
					return 1;
				i++; /* the escaped character */
			} else if (ch == '"') {
				in_str = 0;
				size_t j = i + 1;
				while (j < n && json_space(s[j]))
					j++;
				/* a string at depth 1 followed by ':' names a top-level field */
				if (depth == 1 && j < n && s[j] == ':') {
					size_t len = i - str_start < keylen - 1 ? i - str_start : keylen - 1;
					memcpy(key, s + str_start, len);
					key[len] = '\0';
				}
			}
		} else if (ch == '"') {
			in_str = 1;
			str_start = i + 1;
		} else if (ch == '{' || ch == '[') {
			depth++;
		} else if (ch == '}' || ch == ']') {
			depth--;
		}
	}
	return 0;
}

cJSON *
http_body_object(struct MHD_Connection *c, const char *body, size_t len, int *rc)
{
	const char *end = NULL;
	char key[64];
	cJSON *j;

	if (memchr(body, '\0', len) != NULL) {
		*rc = http_send_error(c, 400, "invalid_request_error", "invalid_json", NULL,
				      "the body holds a NUL byte, which JSON text cannot");
		return NULL;
	}
	j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
	if (j == NULL || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		*rc = http_send_error(c, 400, "invalid_request_error", "invalid_json", NULL,
				      "the body is not a JSON object (%zu bytes)", len);
		return NULL;
	}
	while (end != NULL && end < body + len && json_space(*end))
		end++;
	if (end == NULL || end != body + len) {
		cJSON_Delete(j);
		*rc = http_send_error(c, 400, "invalid_request_error", "invalid_json", NULL,
				      "the body has bytes after its JSON object (from byte %zu of %zu)",
				      end != NULL ? (size_t)(end - body) : (size_t)0, len);
		return NULL;
	}
	if (nul_escape_field(body, len, key, sizeof(key))) {
		cJSON_Delete(j);
		*rc = http_send_error(c, 400, "invalid_request_error", NULL, key[0] ? key : NULL,
				      "%s%s holds U+0000 (\\u0000), which a prompt cannot carry",
				      key[0] ? key : "a string", key[0] ? "" : " of the body");
		return NULL;
	}
	return j;
}
