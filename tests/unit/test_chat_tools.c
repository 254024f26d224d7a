/*
 * Tool calling: conversations with tools rendered as each family's
 * template writes them, and model output parsed back into calls,
 * including text that only looks like a call.
 */
#include "testlib.h"
#include "server/chat_template.h"
#include "server/tool_calls.h"

#define DS(x) "<\xef\xbd\x9c" x "\xef\xbd\x9c>"
#define U "\xe2\x96\x81"

static const char *const fns[] = {
	"{\"name\":\"get_weather\",\"description\":\"Weather now\",\"parameters\":{\"type\":\"object\",\"properties\":"
	"{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}",
};
static const struct chat_tool_call call = { "call_1", "get_weather", "{\"city\":\"Oslo\"}" };

static const struct chat_message conv[] = {
	{ ROLE_SYSTEM, "Be brief.", NULL, 0, NULL },
	{ ROLE_USER, "Weather in Oslo?", NULL, 0, NULL },
	{ ROLE_ASSISTANT, "", &call, 1, NULL },
	{ ROLE_TOOL, "{\"temp\": 3}", NULL, 0, "call_1" },
};

#define TOOL_JSON                                                                                                      \
	"{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather now\", "        \
	"\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "    \
	"[\"city\"]}}}"

static void
test_render(void)
{
	static const struct {
		enum chat_family f;
		const char *want;
	} cases[] = {
		{ CHAT_LLAMA3,
		  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
		  "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a "
		  "JSON "
		  "for a function call with its proper arguments that best answers the given prompt.\n\nRespond in the "
		  "format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not "
		  "use variables.\n\n" TOOL_JSON "\n\nWeather in Oslo?<|eot_id|>"
		  "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
		  "{\"city\": \"Oslo\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": "
		  "3}<|eot_id|>"
		  "<|start_header_id|>assistant<|end_header_id|>\n\n" },
		{ CHAT_CHATML,
		  "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the "
		  "user "
		  "query.\n\nYou are provided with function signatures within <tools></tools> XML "
		  "tags:\n<tools>\n" TOOL_JSON
		  "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
		  "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
		  "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
		  "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
		  "\"Oslo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{\"temp\": 3}\n"
		  "</tool_response><|im_end|>\n<|im_start|>assistant\n" },
		{ CHAT_MISTRAL,
		  "<s>[AVAILABLE_TOOLS] [" TOOL_JSON "][/AVAILABLE_TOOLS][INST] Be brief.\n\nWeather in Oslo?[/INST]"
		  "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}, \"id\": "
		  "\"call_1\"}]</s>"
		  "[TOOL_RESULTS] {\"content\": {\"temp\": 3}, \"call_id\": \"call_1\"}[/TOOL_RESULTS]" },
		{ CHAT_DEEPSEEK3,
		  DS("begin" U "of" U
		     "sentence") "Be brief.\n\n## Tools\n\nYou have access to the following functions:\n\n" TOOL_JSON
				 "\n\nTo call functions, write: " DS("tool" U "calls" U "begin") DS(
					 "tool" U "call" U
					 "begin") "function" DS("tool" U
								"sep") "NAME\n```json\nARGUMENTS\n```" DS("tool" U
													  "call" U
													  "end")
					 DS("tool" U "calls" U "end") DS("User") "Weather in Oslo?" DS("Assistant") DS(
						 "tool" U "calls" U "begin")
						 DS("tool" U "call" U "begin") "function" DS(
							 "tool" U
							 "sep") "get_weather\n```json\n{\"city\": "
								"\"Oslo\"}\n```" DS("tool" U "call" U "end") DS(
									"tool" U "calls" U
									"end") DS("end" U "of" U "sentence")
									DS("tool" U "outputs" U "begin") DS(
										"tool" U "output" U
										"begin") "{\"temp\": 3}" DS("tool" U
													    "output" U
													    "end")
										DS("tool" U "outputs" U "end")
											DS("Assistant") },
	};
	struct chat_tools t = { fns, 1 };
	char err[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct strbuf out;
		strbuf_init(&out);
		int rc = chat_render_tools(cases[i].f, conv, 4, &t, &out, err, sizeof(err));
		int same = rc == 0 && out.s != NULL && strcmp(out.s, cases[i].want) == 0;
		CHECK(same, "%s renders tools as its template does%s%s", chat_family_name(cases[i].f),
		      same ? "" : ":\n got ", same ? "" : (rc == 0 ? out.s : err));
		strbuf_free(&out);
	}
	struct strbuf out;
	strbuf_init(&out);
	CHECK(chat_render_tools(CHAT_LLAMA2, conv, 4, &t, &out, err, sizeof(err)) < 0 && strstr(err, "llama2"),
	      "llama2 has no tool format: refused by name (%s)", err);
	strbuf_free(&out);
}

static void
test_parse(void)
{
	static const struct {
		enum chat_family f;
		const char *raw;
		int calls;
		size_t content;
		const char *args0;
	} cases[] = {
		{ CHAT_LLAMA3, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", 1, 0,
		  "{\"city\":\"Oslo\"}" },
		{ CHAT_LLAMA3,
		  "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"A\"}}; "
		  "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"B\"}}",
		  2, 0, "{\"city\":\"A\"}" },
		{ CHAT_LLAMA3, "{\"name\": \"nope\", \"parameters\": {}}", 0, 0, NULL }, /* not a tool */
		{ CHAT_LLAMA3, "It is {cold}", 0, 0, NULL },
		{ CHAT_CHATML,
		  "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
		  "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}",
		  2, 12, "{\"city\":\"Oslo\"}" },
		{ CHAT_CHATML, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1]}\n</tool_call>", 0, 0,
		  NULL },
		{ CHAT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]", 1, 0,
		  "{\"city\":\"Oslo\"}" },
		{ CHAT_MISTRAL, "[TOOL_CALLS] [{\"name\": \"get_weather\"", 0, 0, NULL }, /* cut short */
		{ CHAT_DEEPSEEK3,
		  "Sure." DS("tool" U "calls" U "begin") DS("tool" U "call" U "begin") "function" DS(
			  "tool" U "sep") "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" DS("tool" U "call" U "end")
			  DS("tool" U "calls" U "end"),
		  1, 5, "{\"city\":\"Oslo\"}" },
	};
	struct tool_set ts = { 0 };
	cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
				   "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]");
	char err[256];
	const char *param = NULL;

	CHECK(tools_parse(tools, NULL, NULL, &ts, err, sizeof(err), &param) == 0 && ts.choice == TOOL_CHOICE_AUTO,
	      "tools parsed, choice auto by default");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tool_call *calls = NULL;
		size_t content = 0;
		int n = tools_parse_output(&ts, cases[i].f, cases[i].raw, &calls, &content);
		int ok = n == cases[i].calls &&
			 (n == 0 || (content == cases[i].content && strcmp(calls[0].arguments, cases[i].args0) == 0 &&
				     strcmp(calls[0].name, "get_weather") == 0 &&
				     strlen(calls[0].id) == (cases[i].f == CHAT_MISTRAL ? 9 : 29)));
		CHECK(ok, "%s parses %.50s: %d calls (want %d), content %zu", chat_family_name(cases[i].f),
		      cases[i].raw, n, cases[i].calls, content);
		tool_calls_free(calls, n > 0 ? n : 0);
	}
	/* streaming holds text from where a call may begin */
	CHECK(tools_hold_from(CHAT_CHATML, "Hi <tool_c", 10) == 3, "a tail that may grow into <tool_call> is held");
	CHECK(tools_hold_from(CHAT_CHATML, "Hi <tool_call>{", 15) == 3, "a call is held from its tag");
	CHECK(tools_hold_from(CHAT_CHATML, "Hi <b>", 6) == 6, "other text is not held");
	CHECK(tools_hold_from(CHAT_LLAMA3, "  {\"na", 6) == 2, "llama3: a reply opening with { is held");
	CHECK(tools_hold_from(CHAT_LLAMA3, "It {", 4) == 4, "llama3: text is not");
	tools_free(&ts);
	cJSON_Delete(tools);
}

static void
test_requests(void)
{
	static const struct {
		const char *tools, *choice, *says;
	} bad[] = {
		{ "[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", NULL, "name" },
		{ "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"integer\","
		  "\"minimum\":1}}}]",
		  NULL, "tools[0].function.parameters #: minimum is not supported" },
		{ "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{"
		  "\"name\":\"f\"}}]",
		  NULL, "two tools" },
		{ "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]",
		  "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}", "not in tools" },
		{ "[]", "\"required\"", "needs tools" },
		{ "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", "\"sometimes\"", "not none, auto" },
	};
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cJSON *t = cJSON_Parse(bad[i].tools), *c = bad[i].choice ? cJSON_Parse(bad[i].choice) : NULL;
		struct tool_set ts;
		const char *param = NULL;
		int rc = tools_parse(t, c, NULL, &ts, err, sizeof(err), &param);
		CHECK(rc < 0 && strstr(err, bad[i].says) != NULL && param != NULL, "refused: %s (%s)", bad[i].says,
		      rc < 0 ? err : "accepted");
		if (rc == 0)
			tools_free(&ts);
		cJSON_Delete(t);
		cJSON_Delete(c);
	}
	/* forced: required is an array of {name, parameters}; $defs are lifted */
	cJSON *t = cJSON_Parse(
		"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
		"\"properties\":"
		"{\"p\":{\"$ref\":\"#/$defs/P\"}},\"required\":[\"p\"],\"$defs\":{\"P\":{\"enum\":[1,2]}}}}},"
		"{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]");
	cJSON *c = cJSON_CreateString("required");
	struct tool_set ts;
	const char *param = NULL;
	struct json_schema *s = NULL;
	if (tools_parse(t, c, NULL, &ts, err, sizeof(err), &param) == 0) {
		s = tools_forced_schema(&ts, err, sizeof(err));
		tools_free(&ts);
	}
	CHECK(s != NULL, "required schema compiles (%s)", s ? "" : err);
	if (s != NULL) {
		const char *ok = "[{\"name\":\"f\",\"parameters\":{\"p\":2}},{\"name\":\"g\",\"parameters\":{}}]";
		const char *wrong = "[{\"name\":\"f\",\"parameters\":{\"p\":3}}]";
		CHECK(json_schema_check(s, ok, strlen(ok)) == 1 && json_schema_check(s, wrong, strlen(wrong)) < 0 &&
			      json_schema_check(s, "[]", 2) < 0,
		      "forced calls: valid calls pass, a wrong argument and no call fail");
		json_schema_unref(s);
	}
	cJSON_Delete(t);
	cJSON_Delete(c);
}

int
main(void)
{
	test_render();
	test_parse();
	test_requests();
	return test_summary();
}
