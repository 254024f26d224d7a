/*
 * The JSON-mode recogniser: complete objects, proper prefixes, and texts
 * that can never become a JSON object.
 */
#include "testlib.h"
#include "server/json_constraint.h"

int
main(void)
{
	static const char *complete[] = {
		"{}",
		"{\"a\":1}",
		" {\"a\": [1, 2.5, -3e+2, true, false, null, {}]}",
		"{\"k\": \"caf\xc3\xa9 \\u00e9 \\n \\\"q\\\"\"}",
		"{\"a\":{\"b\":{\"c\":[[],[0]]}}} ",
		"{\"x\": -0.0E-1}",
	};
	static const char *prefix[] = {
		"",
		"  ",
		"{",
		"{\"a",
		"{\"a\"",
		"{\"a\":",
		"{\"a\": [1,",
		"{\"a\": tr",
		"{\"a\": 12",
		"{\"a\": \"\\u00",
		"{\"a\": 1.",
		"{\"a\": 1e",
		"{\"a\": \"\xc3",
	};
	static const char *never[] = {
		"[1]",
		"\"s\"",
		"x",
		"{a:1}",
		"{\"a\" 1}",
		"{\"a\":1,}",
		"{\"a\":01}",
		"{\"a\":1]",
		"{}}",
		"{\"a\":tru3}",
		"{\"a\":\"\x01\"}",
		"{\"a\":\"\\x\"}",
		"{\"a\": 1.e5}",
		"{\"a\":\"\xff\"}",
		"{\"a\":1}     x",
		"{\"a\":       1}",
	};

	for (size_t i = 0; i < sizeof(complete) / sizeof(complete[0]); i++)
		CHECK(json_prefix_check(complete[i], strlen(complete[i])) == 1, "complete: %s", complete[i]);
	for (size_t i = 0; i < sizeof(prefix) / sizeof(prefix[0]); i++)
		CHECK(json_prefix_check(prefix[i], strlen(prefix[i])) == 0, "prefix: %s", prefix[i]);
	for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
		CHECK(json_prefix_check(never[i], strlen(never[i])) == -1, "never: %s", never[i]);
	/* nesting beyond the depth limit is refused rather than overflowing */
	char deep[200];
	deep[0] = '{';
	memcpy(deep + 1, "\"a\":", 4);
	for (int i = 5; i < 199; i++)
		deep[i] = '[';
	CHECK(json_prefix_check(deep, 199) == -1, "nesting is bounded");
	return test_summary();
}
