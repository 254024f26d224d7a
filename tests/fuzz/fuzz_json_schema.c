/*
 * libFuzzer harness for structured outputs (json_schema*.c): the input is
 * a schema, a NUL byte, and a text.  The schema is compiled (refusals are
 * fine); when it compiles, the recogniser reads the text, and every
 * prefix of a text it calls complete or a prefix must read as a prefix
 * (one cut inside a UTF-8 character aside: under a pattern that counts as
 * invalid, since PCRE2 cannot match a cut character).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	char err[400];
	struct json_schema *s;

	if (nul == NULL)
		return 0;
	cJSON *j = cJSON_ParseWithLength((const char *)data, (size_t)(nul - data));
	if (j == NULL)
		return 0;
	if (json_schema_compile(j, &s, err, sizeof(err)) == 0) {
		const char *text = (const char *)nul + 1;
		size_t len = size - (size_t)(nul - data) - 1;
		int whole = json_schema_check(s, text, len);
		/* the recogniser is prefix-closed: what can still become valid
		 * was a valid prefix at every byte before */
		if (whole >= 0)
			for (size_t n = 0; n < len; n++)
				if (((unsigned char)text[n] & 0xC0) != 0x80 && json_schema_check(s, text, n) < 0)
					abort();
		json_schema_unref(s);
	}
	cJSON_Delete(j);
	return 0;
}
