/*
 * Parameters of /v1/completions and /v1/chat/completions: every field is
 * checked for type and range, and a bad one is named in the error, so bad
 * input gets a 400 and never reaches the scheduler.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/status.h"
#include "server/json_schema.h"
#include "server/openai.h"
#include "server/regex_constraint.h"
#include "server/tool_calls.h"

static int bad(struct gen_params *g, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int
bad(struct gen_params *g, const char *param, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g->err, sizeof(g->err), fmt, ap);
	va_end(ap);
	g->err_param = param;
	return -1;
}

/* An optional integer field in [lo, hi]; absent or null keeps *out. */
static int
get_int(struct gen_params *g, const cJSON *j, const char *name, long lo, long hi, int *out)
{
	const cJSON *v = cJSON_GetObjectItem(j, name);

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
		return bad(g, name, "%s must be an integer", name);
	if (v->valuedouble < (double)lo || v->valuedouble > (double)hi)
		return bad(g, name, "%s must be between %ld and %ld, got %.17g", name, lo, hi, v->valuedouble);
	*out = (int)v->valuedouble;
	return 0;
}

static int
get_float(struct gen_params *g, const cJSON *j, const char *name, double lo, double hi, float *out)
{
	const cJSON *v = cJSON_GetObjectItem(j, name);

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return bad(g, name, "%s must be a number", name);
	if (v->valuedouble < lo || v->valuedouble > hi)
		return bad(g, name, "%s must be between %g and %g, got %.17g", name, lo, hi, v->valuedouble);
	*out = (float)v->valuedouble;
	return 0;
}

static int
get_bool(struct gen_params *g, const cJSON *j, const char *name, int *out)
{
	const cJSON *v = cJSON_GetObjectItem(j, name);

	if (v == NULL || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsBool(v))
		return bad(g, name, "%s must be true or false", name);
	*out = cJSON_IsTrue(v);
	return 0;
}

static int
add_prompt(struct gen_params *g, int32_t *ids, int n)
{
	if (g->n_prompts >= GEN_MAX_PROMPTS) {
		free(ids);
		return bad(g, "prompt", "at most %d prompts per request", GEN_MAX_PROMPTS);
	}
	g->prompts[g->n_prompts] = ids;
	g->plen[g->n_prompts++] = n;
	return 0;
}

static int
token_array(struct gen_params *g, const cJSON *arr, int32_t **ret, int *ret_n)
{
	int n = cJSON_GetArraySize(arr), i = 0;
	int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
	const cJSON *it;

	if (ids == NULL)
		return bad(g, "prompt", "out of memory");
	cJSON_ArrayForEach (it, arr) {
		double v = it->valuedouble;
		if (!cJSON_IsNumber(it) || v != floor(v) || v < 0 || v > 2147483647.0) {
			free(ids);
			return bad(g, "prompt", "prompt token ids must be non-negative integers");
		}
		ids[i++] = (int32_t)v;
	}
	*ret = ids;
	*ret_n = n;
	return 0;
}

/* Fill in the middle, as llama.cpp's server lays it out (PSM):
 * [BOS] PRE prompt SUF suffix MID, the model then writes the middle. */
static int
encode_fim(struct gen_params *g, const struct tokenizer *tok, const char *text, int add_bos)
{
	char err[PRIVAI_ERR_LEN];
	int32_t fim[3], *pre = NULL, *suf = NULL, *ids;
	int np = 0, ns = 0, n = 0;

	if (tokenizer_fim(tok, fim) < 0)
		return bad(g, "suffix",
			   "suffix (fill in the middle) needs a model whose vocabulary has fill-in-the-middle tokens "
			   "(tokenizer.ggml.fim_pre_token_id and its kin, or a code model's <|fim_prefix|>, "
			   "<fim_prefix>, <PRE>); this one has none");
	if (tokenizer_encode(tok, text, strlen(text), 0, 1, &pre, &np, err) < 0 ||
	    tokenizer_encode(tok, g->suffix, strlen(g->suffix), 0, 1, &suf, &ns, err) < 0) {
		free(pre);
		return bad(g, pre == NULL ? "prompt" : "suffix", "%s", err);
	}
	if ((ids = malloc((size_t)(np + ns + 4) * sizeof(int32_t))) == NULL) {
		free(pre);
		free(suf);
		return bad(g, "prompt", "out of memory");
	}
	if (add_bos && tokenizer_bos(tok) >= 0)
		ids[n++] = tokenizer_bos(tok);
	ids[n++] = fim[0];
	memcpy(ids + n, pre, (size_t)np * sizeof(int32_t));
	n += np;
	ids[n++] = fim[1];
	memcpy(ids + n, suf, (size_t)ns * sizeof(int32_t));
	n += ns;
	ids[n++] = fim[2];
	free(pre);
	free(suf);
	return add_prompt(g, ids, n);
}

static int
encode(struct gen_params *g, const struct tokenizer *tok, const char *text, int add_bos)
{
	char err[PRIVAI_ERR_LEN];
	int32_t *ids = NULL;
	int n = 0;

	if (g->suffix != NULL)
		return encode_fim(g, tok, text, add_bos);
	if (tokenizer_encode(tok, text, strlen(text), add_bos, 1, &ids, &n, err) < 0)
		return bad(g, "prompt", "%s", err);
	return add_prompt(g, ids, n);
}

/* string | [string] | [int] | [[int]] */
static int
parse_prompt(struct gen_params *g, const cJSON *p, const struct tokenizer *tok)
{
	int add_bos = tokenizer_adds_bos(tok);
	const cJSON *it;

	if (cJSON_IsString(p))
		return encode(g, tok, p->valuestring, add_bos);
	if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
		return bad(g, "prompt", "prompt must be a string, an array of strings, or token ids");
	if (g->suffix != NULL && !cJSON_IsString(p->child))
		return bad(g, "suffix", "suffix (fill in the middle) takes a text prompt, not token ids");
	if (cJSON_IsNumber(p->child)) {
		int32_t *ids;
		int n;
		if (token_array(g, p, &ids, &n) < 0)
			return -1;
		return add_prompt(g, ids, n);
	}
	cJSON_ArrayForEach (it, p) {
		int32_t *ids;
		int n;
		if (cJSON_IsString(it)) {
			if (encode(g, tok, it->valuestring, add_bos) < 0)
				return -1;
		} else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) > 0) {
			if (g->suffix != NULL)
				return bad(g, "suffix",
					   "suffix (fill in the middle) takes text prompts, not token ids");
			if (token_array(g, it, &ids, &n) < 0 || add_prompt(g, ids, n) < 0)
				return -1;
		} else {
			return bad(g, "prompt", "each prompt must be a string or a non-empty array of token ids");
		}
	}
	return 0;
}

static int
message_text(struct gen_params *g, const cJSON *content, struct strbuf *out)
{
	const cJSON *part;

	if (cJSON_IsString(content)) {
		strbuf_puts(out, content->valuestring);
		return 0;
	}
	if (!cJSON_IsArray(content))
		return bad(g, "messages", "message content must be a string or an array of text parts");
	cJSON_ArrayForEach (part, content) {
		const cJSON *type = cJSON_GetObjectItem(part, "type"), *text = cJSON_GetObjectItem(part, "text");
		if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text))
			return bad(g, "messages", "only content parts of type \"text\" are supported");
		strbuf_puts(out, text->valuestring);
	}
	return 0;
}

/* An assistant message's tool_calls into calls[]; 0 or -1. */
static int
message_calls(struct gen_params *g, const cJSON *tc, int i, struct chat_message *cm)
{
	const cJSON *c;
	int k = 0, n = cJSON_GetArraySize(tc);
	struct chat_tool_call *calls;

	if (!cJSON_IsArray(tc) || n > TOOLS_MAX)
		return bad(g, "messages", "messages[%d].tool_calls must be an array of at most %d calls", i, TOOLS_MAX);
	if (n == 0)
		return 0;
	if ((calls = calloc((size_t)n, sizeof(*calls))) == NULL)
		return bad(g, "messages", "out of memory");
	cm->calls = calls;
	cJSON_ArrayForEach (c, tc) {
		const cJSON *id = cJSON_GetObjectItem(c, "id"), *fn = cJSON_GetObjectItem(c, "function");
		const cJSON *name = cJSON_GetObjectItem(fn, "name"), *args = cJSON_GetObjectItem(fn, "arguments");
		if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !cJSON_IsString(args) ||
		    (id != NULL && !cJSON_IsString(id)))
			return bad(g, "messages",
				   "messages[%d].tool_calls[%d] needs function.name and function.arguments as strings",
				   i, k);
		calls[k].id = id != NULL ? id->valuestring : NULL;
		calls[k].name = name->valuestring;
		calls[k++].arguments = args->valuestring;
		cm->n_calls = k;
	}
	return 0;
}

static int
parse_role(struct gen_params *g, const cJSON *m, int i, enum chat_role *ret)
{
	const cJSON *role = cJSON_GetObjectItem(m, "role");
	static const struct {
		const char *name;
		enum chat_role role;
	} roles[] = { { "system", ROLE_SYSTEM },
		      { "developer", ROLE_SYSTEM },
		      { "user", ROLE_USER },
		      { "assistant", ROLE_ASSISTANT },
		      { "tool", ROLE_TOOL } };

	if (!cJSON_IsObject(m) || !cJSON_IsString(role))
		return bad(g, "messages", "messages[%d] needs a string role", i);
	for (size_t k = 0; k < sizeof(roles) / sizeof(roles[0]); k++)
		if (strcmp(role->valuestring, roles[k].name) == 0) {
			*ret = roles[k].role;
			return 0;
		}
	return bad(g, "messages", "messages[%d] has role \"%.40s\"; use system, user, assistant or tool", i,
		   role->valuestring);
}

/* One message: its role, text, tool calls or the call it answers. */
static int
parse_message(struct gen_params *g, const cJSON *m, int i, struct chat_message *cm, struct strbuf *text)
{
	const cJSON *content = cJSON_GetObjectItem(m, "content"), *tc = cJSON_GetObjectItem(m, "tool_calls");
	const cJSON *tcid = cJSON_GetObjectItem(m, "tool_call_id");

	if (parse_role(g, m, i, &cm->role) < 0)
		return -1;
	if (tc != NULL && !cJSON_IsNull(tc)) {
		if (cm->role != ROLE_ASSISTANT)
			return bad(g, "messages", "messages[%d]: only an assistant message has tool_calls", i);
		if (message_calls(g, tc, i, cm) < 0)
			return -1;
	}
	if (cm->role == ROLE_TOOL) {
		if (!cJSON_IsString(tcid))
			return bad(g, "messages", "messages[%d]: a tool message needs tool_call_id", i);
		cm->tool_call_id = tcid->valuestring;
	}
	/* an assistant that only calls tools sends content null or none */
	if (!(cm->n_calls > 0 && (content == NULL || cJSON_IsNull(content))) && message_text(g, content, text) < 0)
		return -1;
	if (strbuf_failed(text))
		return bad(g, "messages", "out of memory");
	cm->content = text->s ? text->s : "";
	return 0;
}

static int
render_messages(struct gen_params *g, const struct chat_message *cm, int n, int with_tools, enum chat_family fam,
		const struct tokenizer *tok)
{
	struct strbuf prompt;
	char err[256];
	int rc;
	const char **fns = NULL;
	int offered = g->tools.choice != TOOL_CHOICE_NONE ? g->tools.n : 0;

	strbuf_init(&prompt);
	if (with_tools) {
		if ((fns = calloc((size_t)offered + 1, sizeof(char *))) == NULL)
			return bad(g, "messages", "out of memory");
		for (int k = 0; k < offered; k++)
			fns[k] = g->tools.t[k].function;
		struct chat_tools t = { fns, offered };
		rc = chat_render_tools(fam, cm, n, &t, &prompt, err, sizeof(err));
	} else {
		rc = chat_render(fam, cm, n, &prompt, err, sizeof(err));
	}
	if (rc < 0)
		rc = bad(g, with_tools && !chat_family_has_tools(fam) ? "tools" : "messages", "%s", err);
	else if (strbuf_failed(&prompt))
		rc = bad(g, "messages", "out of memory");
	else
		rc = encode(g, tok, prompt.s ? prompt.s : "", 0);
	strbuf_free(&prompt);
	free(fns);
	return rc;
}

static int
parse_messages(struct gen_params *g, const cJSON *msgs, const struct tokenizer *tok, enum chat_family fam)
{
	int n = cJSON_GetArraySize(msgs), i = 0, rc = 0, with_tools = g->tools.n > 0;
	const cJSON *m;

	if (!cJSON_IsArray(msgs) || n == 0)
		return bad(g, "messages", "messages must be a non-empty array");
	struct chat_message *cm = calloc((size_t)n, sizeof(*cm));
	struct strbuf *texts = calloc((size_t)n, sizeof(*texts));
	if (cm == NULL || texts == NULL) {
		free(cm);
		free(texts);
		return bad(g, "messages", "out of memory");
	}
	cJSON_ArrayForEach (m, msgs) {
		strbuf_init(&texts[i]);
		if ((rc = parse_message(g, m, i, &cm[i], &texts[i])) < 0)
			break;
		with_tools |= cm[i].n_calls > 0 || cm[i].role == ROLE_TOOL;
		i++;
	}
	if (rc == 0)
		rc = render_messages(g, cm, n, with_tools, fam, tok);
	for (int k = 0; k < n; k++) {
		strbuf_free(&texts[k]);
		free((void *)cm[k].calls);
	}
	free(texts);
	free(cm);
	return rc;
}

static int
parse_stop(struct gen_params *g, const cJSON *stop)
{
	const cJSON *it;

	if (stop == NULL || cJSON_IsNull(stop))
		return 0;
	if (cJSON_IsString(stop) && stop->valuestring[0] == '\0')
		return bad(g, "stop", "a stop sequence must be a non-empty string");
	if (cJSON_IsString(stop))
		return (g->stops[g->n_stops++] = strdup(stop->valuestring)) ? 0 : bad(g, "stop", "out of memory");
	if (!cJSON_IsArray(stop) || cJSON_GetArraySize(stop) > GEN_MAX_STOPS)
		return bad(g, "stop", "stop must be a string or an array of at most %d strings", GEN_MAX_STOPS);
	cJSON_ArrayForEach (it, stop) {
		if (!cJSON_IsString(it) || it->valuestring[0] == '\0')
			return bad(g, "stop", "each stop sequence must be a non-empty string");
		if ((g->stops[g->n_stops++] = strdup(it->valuestring)) == NULL)
			return bad(g, "stop", "out of memory");
	}
	return 0;
}

static int
parse_logprobs(struct gen_params *g, const cJSON *j)
{
	if (!g->chat)
		return get_int(g, j, "logprobs", 0, 20, &g->logprobs);
	int want = 0;
	if (get_bool(g, j, "logprobs", &want) < 0)
		return -1;
	int top = 0;
	if (get_int(g, j, "top_logprobs", 0, 20, &top) < 0)
		return -1;
	if (!want && cJSON_GetObjectItem(j, "top_logprobs") != NULL && top > 0)
		return bad(g, "top_logprobs", "top_logprobs needs logprobs: true");
	g->logprobs = want ? top : -1;
	return 0;
}

static int listed(const char *const *names, const char *name);
static const char *const json_schema_fields[] = { "name", "description", "schema", "strict", NULL };

static int is_empty(const cJSON *v);

/* vLLM's extension fields: guided_json (a schema), guided_regex,
 * guided_choice (strings); one shape for the output at most. */
static int
parse_guided(struct gen_params *g, const cJSON *j)
{
	const cJSON *gj = cJSON_GetObjectItem(j, "guided_json"), *gr = cJSON_GetObjectItem(j, "guided_regex");
	const cJSON *gc = cJSON_GetObjectItem(j, "guided_choice"), *c;
	int n = (g->json_mode || g->schema != NULL) + !is_empty(gj) + !is_empty(gr) + !is_empty(gc);
	char why[400];

	if (n > 1)
		return bad(g,
			   !is_empty(gj)   ? "guided_json"
			   : !is_empty(gr) ? "guided_regex"
					   : "guided_choice",
			   "response_format, guided_json, guided_regex and guided_choice each shape the output; send "
			   "one");
	if (!is_empty(gj)) {
		cJSON *parsed = cJSON_IsString(gj) ? cJSON_Parse(gj->valuestring) : NULL;
		if (!cJSON_IsObject(gj) && !cJSON_IsObject(parsed)) {
			cJSON_Delete(parsed);
			return bad(g, "guided_json",
				   "guided_json must be a JSON Schema (an object, or one as a string)");
		}
		int rc = json_schema_compile(parsed != NULL ? parsed : gj, &g->schema, why, sizeof(why));
		cJSON_Delete(parsed);
		return rc < 0 ? bad(g, "guided_json", "guided_json %s", why) : 0;
	}
	if (!is_empty(gr)) {
		if (!cJSON_IsString(gr) || regex_check(gr->valuestring, why, sizeof(why)) < 0)
			return bad(g, "guided_regex", "guided_regex %s", cJSON_IsString(gr) ? why : "must be a string");
		return (g->regex = strdup(gr->valuestring)) != NULL ? 0 : bad(g, "guided_regex", "out of memory");
	}
	if (!is_empty(gc)) {
		const char *choices[64];
		int k = 0;
		if (!cJSON_IsArray(gc) || cJSON_GetArraySize(gc) > 64)
			return bad(g, "guided_choice", "guided_choice must be an array of 1 to 64 strings");
		cJSON_ArrayForEach (c, gc) {
			if (!cJSON_IsString(c) || c->valuestring[0] == '\0')
				return bad(g, "guided_choice", "guided_choice[%d] must be a non-empty string", k);
			choices[k++] = c->valuestring;
		}
		return (g->regex = regex_of_choices(choices, k)) != NULL ? 0 : bad(g, "guided_choice", "out of memory");
	}
	return 0;
}

static int
parse_tools(struct gen_params *g, const cJSON *j)
{
	const char *param = "tools";

	if (tools_parse(cJSON_GetObjectItem(j, "tools"), cJSON_GetObjectItem(j, "tool_choice"),
			cJSON_GetObjectItem(j, "parallel_tool_calls"), &g->tools, g->err, sizeof(g->err), &param) < 0) {
		g->err_param = param;
		return -1;
	}
	if (g->tools.choice == TOOL_CHOICE_REQUIRED || g->tools.choice == TOOL_CHOICE_NAMED) {
		if (g->json_mode || g->schema != NULL || g->regex != NULL)
			return bad(g, "tool_choice",
				   "a forced tool_choice and response_format (or guided_*) cannot both shape the "
				   "output");
		char why[400];
		if ((g->schema = tools_forced_schema(&g->tools, why, sizeof(why))) == NULL)
			return bad(g, "tools", "the tools cannot be forced together: %s", why);
	}
	return 0;
}

/* response_format.json_schema: {name, description?, schema, strict?} */
static int
parse_json_schema(struct gen_params *g, const cJSON *js)
{
	const cJSON *name = cJSON_GetObjectItem(js, "name"), *schema = cJSON_GetObjectItem(js, "schema");
	const cJSON *strict = cJSON_GetObjectItem(js, "strict"), *k;
	char why[400];

	if (!cJSON_IsObject(js))
		return bad(g, "response_format", "response_format.json_schema must be an object");
	cJSON_ArrayForEach (k, js)
		if (!listed(json_schema_fields, k->string))
			return bad(g, "response_format", "response_format.json_schema.%.40s is not a known field",
				   k->string);
	if (!cJSON_IsString(name) || name->valuestring[0] == '\0' || strlen(name->valuestring) > 64 ||
	    strspn(name->valuestring, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
		    strlen(name->valuestring))
		return bad(g, "response_format",
			   "response_format.json_schema.name must be 1-64 letters, digits, _ or -");
	if (strict != NULL && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
		return bad(g, "response_format", "response_format.json_schema.strict must be a boolean");
	if (schema == NULL)
		return bad(g, "response_format", "response_format.json_schema.schema is required");
	/* strict or not, the schema is enforced: one it cannot enforce is refused */
	if (json_schema_compile(schema, &g->schema, why, sizeof(why)) < 0)
		return bad(g, "response_format", "response_format.json_schema.schema %s", why);
	return 0;
}

static int
parse_response_format(struct gen_params *g, const cJSON *rf)
{
	const cJSON *type;

	if (rf == NULL || cJSON_IsNull(rf))
		return 0;
	type = cJSON_GetObjectItem(rf, "type");
	if (!cJSON_IsObject(rf) || !cJSON_IsString(type))
		return bad(g, "response_format", "response_format must be an object with a string type");
	if (strcmp(type->valuestring, "text") == 0)
		return 0;
	if (strcmp(type->valuestring, "json_object") == 0) {
		g->json_mode = 1;
		return 0;
	}
	if (strcmp(type->valuestring, "json_schema") == 0)
		return parse_json_schema(g, cJSON_GetObjectItem(rf, "json_schema"));
	return bad(g, "response_format",
		   "response_format type \"%.40s\" is not supported (text, json_object, json_schema)",
		   type->valuestring);
}

static int
parse_sampling(struct gen_params *g, const cJSON *j)
{
	struct sampler_params *sp = &g->sp;

	return get_float(g, j, "temperature", 0, 2, &sp->temperature) < 0 ||
			       get_float(g, j, "top_p", 1e-9, 1, &sp->top_p) < 0 ||
			       get_int(g, j, "top_k", -1, 1 << 20, &sp->top_k) < 0 ||
			       get_float(g, j, "min_p", 0, 1, &sp->min_p) < 0 ||
			       get_float(g, j, "presence_penalty", -2, 2, &sp->presence_penalty) < 0 ||
			       get_float(g, j, "frequency_penalty", -2, 2, &sp->frequency_penalty) < 0 ||
			       get_float(g, j, "repetition_penalty", 1e-3, 10, &sp->repeat_penalty) < 0
		       ? -1
		       : 0;
}

/* The fields each endpoint reads: OpenAI's, and vLLM's extensions that
 * privai implements.  Any other is refused by name, as vLLM refuses them,
 * unless the server runs with --allow-unknown-fields: a misspelt
 * "temprature" must not silently sample at the default. */
static const char *const common_fields[] = { "model",
					     "max_tokens",
					     "temperature",
					     "top_p",
					     "top_k",
					     "min_p",
					     "presence_penalty",
					     "frequency_penalty",
					     "repetition_penalty",
					     "seed",
					     "n",
					     "stop",
					     "stream",
					     "stream_options",
					     "ignore_eos",
					     "min_tokens",
					     "logprobs",
					     "user",
					     "logit_bias",
					     "best_of",
					     "guided_json",
					     "guided_regex",
					     "guided_choice",
					     "lora",
					     NULL };
static const char *const completion_fields[] = { "prompt", "echo", "suffix", "response_format", NULL };
static const char *const chat_fields[] = {
	"messages",    "max_completion_tokens", "top_logprobs", "response_format", "tools",
	"tool_choice", "parallel_tool_calls",   "functions",    "function_call",   NULL
};

static int
listed(const char *const *names, const char *name)
{
	for (; *names != NULL; names++)
		if (strcmp(*names, name) == 0)
			return 1;
	return 0;
}

#define GEN_MAX_FIELDS 128

static int
check_fields(struct gen_params *g, const cJSON *j)
{
	const cJSON *f;

	if (!cJSON_IsObject(j))
		return bad(g, NULL, "the body must be a JSON object");
	/* a bound first: the check below compares every pair of fields */
	if (cJSON_GetArraySize(j) > GEN_MAX_FIELDS)
		return bad(g, NULL, "the body has %d fields; a request has at most %d", cJSON_GetArraySize(j),
			   GEN_MAX_FIELDS);
	/* cJSON keeps both of a repeated key and reads the first: which one a
	 * client meant is not ours to guess */
	for (f = j->child; f != NULL; f = f->next)
		for (const cJSON *e = j->child; e != f; e = e->next)
			if (strcmp(e->string, f->string) == 0) {
				snprintf(g->param_buf, sizeof(g->param_buf), "%s", f->string);
				bad(g, NULL, "the field \"%.60s\" is given twice", f->string);
				g->err_param = g->param_buf;
				return -1;
			}
	if (g->allow_unknown)
		return 0;
	cJSON_ArrayForEach (f, j) {
		if (listed(common_fields, f->string) || listed(g->chat ? chat_fields : completion_fields, f->string))
			continue;
		snprintf(g->param_buf, sizeof(g->param_buf), "%s", f->string);
		bad(g, NULL,
		    "unknown field \"%.60s\" for %s (the server would ignore it; start it with "
		    "--allow-unknown-fields to let such fields through)",
		    f->string, g->chat ? "/v1/chat/completions" : "/v1/completions");
		g->err_param = g->param_buf;
		return -1;
	}
	return 0;
}

static int
is_empty(const cJSON *v)
{
	return v == NULL || cJSON_IsNull(v) || ((cJSON_IsArray(v) || cJSON_IsObject(v)) && v->child == NULL);
}

#define GEN_MAX_BIAS 1024

/* logit_bias: {"token id": bias in [-100, 100]} for ids of the vocabulary */
static int
parse_logit_bias(struct gen_params *g, const cJSON *lb, const struct tokenizer *tok)
{
	int n = cJSON_GetArraySize(lb), V = tokenizer_n_vocab(tok), i = 0;
	const cJSON *e;

	if (lb == NULL || cJSON_IsNull(lb) || (cJSON_IsObject(lb) && n == 0))
		return 0;
	if (!cJSON_IsObject(lb))
		return bad(g, "logit_bias", "logit_bias must be an object of token id -> bias");
	if (n > GEN_MAX_BIAS)
		return bad(g, "logit_bias", "logit_bias has %d entries; at most %d", n, GEN_MAX_BIAS);
	if ((g->bias_ids = malloc((size_t)n * sizeof(int32_t))) == NULL ||
	    (g->bias = malloc((size_t)n * sizeof(float))) == NULL)
		return bad(g, "logit_bias", "out of memory");
	cJSON_ArrayForEach (e, lb) {
		char *end = NULL;
		long id = strtol(e->string, &end, 10);
		if (e->string[0] == '\0' || *end != '\0' || id < 0 || id >= V)
			return bad(g, "logit_bias", "logit_bias key \"%.40s\" is not a token id in 0..%d", e->string,
				   V - 1);
		if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100)
			return bad(g, "logit_bias", "logit_bias[\"%.40s\"] must be a number in [-100, 100]", e->string);
		g->bias_ids[i] = (int32_t)id;
		g->bias[i++] = (float)e->valuedouble;
	}
	g->n_bias = n;
	g->sp.logit_bias_ids = g->bias_ids;
	g->sp.logit_bias = g->bias;
	g->sp.n_logit_bias = n;
	return 0;
}

/* Fields privai knows but cannot honour yet: refused, never ignored (even
 * with --allow-unknown-fields), unless they ask for nothing. */
static int
check_unsupported(struct gen_params *g, const cJSON *j)
{
	const cJSON *v;

	v = cJSON_GetObjectItem(j, "best_of");
	g->best_of = g->n;
	if (!is_empty(v)) {
		/* the range first: a cast of a double beyond int is undefined */
		if (!cJSON_IsNumber(v) || !(v->valuedouble >= g->n && v->valuedouble <= GEN_MAX_BEST_OF) ||
		    v->valuedouble != floor(v->valuedouble))
			return bad(g, "best_of", "best_of must be a whole number from n (%d) to %d", g->n,
				   GEN_MAX_BEST_OF);
		g->best_of = (int)v->valuedouble;
		if (g->best_of > g->n && g->chat)
			return bad(g, "best_of", "best_of is for /v1/completions; chat has no best_of");
	}
	v = cJSON_GetObjectItem(j, "suffix");
	if (!is_empty(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0')) {
		if (!cJSON_IsString(v))
			return bad(g, "suffix", "suffix must be a string");
		if ((g->suffix = strdup(v->valuestring)) == NULL)
			return bad(g, "suffix", "out of memory");
	}
	/* the deprecated forms of tools and tool_choice */
	if (!is_empty(cJSON_GetObjectItem(j, "functions")))
		return bad(g, "functions", "functions is deprecated and not supported: send tools");
	v = cJSON_GetObjectItem(j, "function_call");
	if (!is_empty(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0))
		return bad(g, "function_call", "function_call is deprecated and not supported: send tool_choice");
	return 0;
}

/* The LoRA adapter a model name picks: NAME, or MODEL:NAME; 0 none. */
static int
adapter_named(const struct gen_params *g, const char *name, const char *model_id)
{
	size_t ml = strlen(model_id);

	if (strncmp(name, model_id, ml) == 0 && name[ml] == ':')
		name += ml + 1;
	return g->find_lora != NULL ? g->find_lora(g->find_lora_arg, name) : 0;
}

/* "model" names the base model or one of its adapters (as vLLM lists
 * them); the "lora" field may name the adapter instead. */
static int
resolve_model(struct gen_params *g, const cJSON *j, const char *model_id)
{
	const cJSON *model = cJSON_GetObjectItem(j, "model"), *lora = cJSON_GetObjectItem(j, "lora");
	const char *name = model != NULL && cJSON_IsString(model) ? model->valuestring : NULL;

	if (model != NULL && !cJSON_IsNull(model) && (name == NULL || strcmp(name, model_id) != 0) &&
	    (name == NULL || (g->adapter = adapter_named(g, name, model_id)) == 0)) {
		g->not_found = 1;
		return bad(g, "model", "the model `%.100s` does not exist; this server serves `%s`%s",
			   name != NULL ? name : "?", model_id,
			   g->find_lora != NULL ? " and its adapters (GET /v1/models)" : "");
	}
	if (lora != NULL && !cJSON_IsNull(lora)) {
		int k = cJSON_IsString(lora) ? adapter_named(g, lora->valuestring, model_id) : 0;
		if (k == 0 || (g->adapter != 0 && g->adapter != k))
			return bad(g, "lora", "lora names no adapter of this server, or another than model does");
		g->adapter = k;
	}
	return 0;
}

void
gen_params_init(struct gen_params *g, int chat)
{
	memset(g, 0, sizeof(*g));
	g->chat = chat;
	g->n = 1;
	g->max_tokens = -1;
	g->logprobs = -1;
	sampler_params_default(&g->sp);
	/* OpenAI's defaults, not the CLI's */
	g->sp.temperature = 1.0f;
	g->sp.top_k = 0;
	g->sp.top_p = 1.0f;
	g->sp.min_p = 0.0f;
}

int
gen_params_parse(struct gen_params *g, const cJSON *j, const struct tokenizer *tok, enum chat_family fam,
		 const char *model_id)
{
	const cJSON *so;
	int seed = -1;

	if (resolve_model(g, j, model_id) < 0)
		return -1;
	if (check_fields(g, j) < 0 || parse_logit_bias(g, cJSON_GetObjectItem(j, "logit_bias"), tok) < 0)
		return -1;
	if (parse_sampling(g, j) < 0 || get_int(g, j, "n", 1, GEN_MAX_N, &g->n) < 0 || check_unsupported(g, j) < 0 ||
	    get_int(g, j, "min_tokens", 0, 1 << 24, &g->min_tokens) < 0 ||
	    get_bool(g, j, "ignore_eos", &g->ignore_eos) < 0 || get_bool(g, j, "stream", &g->stream) < 0 ||
	    (!g->chat && get_bool(g, j, "echo", &g->echo) < 0) || parse_logprobs(g, j) < 0 ||
	    parse_stop(g, cJSON_GetObjectItem(j, "stop")) < 0)
		return -1;
	if (get_int(g, j, "seed", -2147483647L - 1, 2147483647L, &seed) < 0)
		return -1;
	if (g->best_of > g->n && g->stream)
		return bad(g, "best_of", "best_of above n cannot be streamed: the best are known only at the end");
	g->has_seed = cJSON_GetObjectItem(j, "seed") != NULL && !cJSON_IsNull(cJSON_GetObjectItem(j, "seed"));
	g->sp.seed = (uint64_t)(uint32_t)seed;
	if (g->sp.top_k < 0)
		g->sp.top_k = 0; /* -1 means off, as in vLLM */
	const char *mt =
		g->chat && cJSON_GetObjectItem(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
	if (get_int(g, j, mt, 0, 1 << 24, &g->max_tokens) < 0)
		return -1;
	if (g->max_tokens == 0 && !g->echo)
		return bad(g, mt, "%s must be at least 1", mt);
	if ((so = cJSON_GetObjectItem(j, "stream_options")) != NULL && !cJSON_IsNull(so)) {
		if (!cJSON_IsObject(so) || get_bool(g, so, "include_usage", &g->include_usage) < 0)
			return bad(g, "stream_options",
				   "stream_options must be an object with a boolean include_usage");
	}
	if (parse_response_format(g, cJSON_GetObjectItem(j, "response_format")) < 0 || parse_guided(g, j) < 0)
		return -1;
	if (g->chat) {
		if (parse_tools(g, j) < 0)
			return -1;
		return parse_messages(g, cJSON_GetObjectItem(j, "messages"), tok, fam);
	}
	const cJSON *p = cJSON_GetObjectItem(j, "prompt");
	if (p == NULL)
		return bad(g, "prompt", "prompt is required");
	/* echo would show the prefix and suffix run together */
	if (g->suffix != NULL && g->echo)
		return bad(g, "echo", "echo cannot be combined with suffix (fill in the middle)");
	return parse_prompt(g, p, tok);
}

void
gen_params_free(struct gen_params *g)
{
	for (int i = 0; i < g->n_prompts; i++)
		free(g->prompts[i]);
	for (int i = 0; i < g->n_stops; i++)
		free(g->stops[i]);
	free(g->bias_ids);
	free(g->bias);
	json_schema_unref(g->schema);
	g->schema = NULL;
	free(g->regex);
	g->regex = NULL;
	free(g->suffix);
	g->suffix = NULL;
	tools_free(&g->tools);
}
