/*
 * Running a completion: one scheduler request per choice (prompts x n),
 * tokens turned into text on UTF-8 boundaries, stop sequences found in the
 * text (and held back until they can no longer begin a match), and the
 * result sent whole or as Server-Sent Events the way OpenAI clients parse
 * them.  A client that goes away cancels its requests, which frees their
 * KV blocks.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "privai/status.h"
#include "server/json_constraint.h"
#include "server/json_schema.h"
#include "server/regex_constraint.h"
#include "server/openai.h"
#include "server/server.h"
#include "thread_sched.h"

/* Where a scan of a JSON array's text has got to: the elements at depth
 * 1 that have closed are the calls of tool_choice required. */
struct element_scan {
	size_t pos, start;
	int depth, in_str, esc;
};

/* The next element of the array in t[0..len) to close after st->pos: 1
 * with it at t[*start..*end), or 0 when none has (st keeps the place). */
static int
next_element(const char *t, size_t len, struct element_scan *st, size_t *start, size_t *end)
{
	for (; st->pos < len; st->pos++) {
		char ch = t[st->pos];
		if (st->in_str) {
			if (st->esc)
				st->esc = 0;
			else if (ch == '\\')
				st->esc = 1;
			else if (ch == '"')
				st->in_str = 0;
		} else if (ch == '"') {
			st->in_str = 1;
		} else if (ch == '{' || ch == '[') {
			if (st->depth++ == 1)
				st->start = st->pos;
		} else if ((ch == '}' || ch == ']') && --st->depth == 1) {
			*start = st->start;
			*end = ++st->pos;
			return 1;
		}
	}
	return 0;
}

/* The {"name", "parameters"} element at t[0..len) as a call with a new
 * id; 0, or -1 when it is not one. */
static int
element_call(enum chat_family fam, const char *t, size_t len, struct tool_call *call)
{
	cJSON *o = cJSON_ParseWithLength(t, len);
	const cJSON *name = cJSON_GetObjectItem(o, "name"), *params = cJSON_GetObjectItem(o, "parameters");

	memset(call, 0, sizeof(*call));
	if (cJSON_IsString(name) && cJSON_IsObject(params)) {
		call->arguments = cJSON_PrintUnformatted(params);
		call->name = strdup(name->valuestring);
		call->id = tool_call_new_id(fam);
	}
	cJSON_Delete(o);
	if (call->arguments == NULL || call->name == NULL || call->id == NULL) {
		free(call->id);
		free(call->name);
		cJSON_free(call->arguments);
		return -1;
	}
	return 0;
}

struct choice {
	struct sched_request *r;
	int index, prompt_index;
	struct detok_stream ds;
	struct strbuf text;
	size_t echo_len; /* leading bytes of text that are the echoed prompt */
	size_t *offs;    /* text offset of each generated token */
	size_t *poffs;   /* with echo and logprobs: text offset of each prompt token */
	size_t sent;     /* bytes of text already streamed */
	int seen, lp_sent;
	int no_gen; /* echo with max_tokens 0: the one token generated is dropped */
	enum finish_reason finish;
	int final_sent;
	/* tool calling: what the finished output held */
	int tools_done;
	struct tool_call *calls;
	int n_calls;
	char *stream_call_id; /* a named call streamed as it is written: its id */
	/* required, streamed: each call goes out once its array element has
	 * closed; calls_sent of them have */
	struct element_scan scan;
	int calls_sent, scan_off;
};

struct job {
	struct server *srv;
	struct gen_params g;
	struct choice *ch;
	int n_ch;
	char id[64];
	long created;
	size_t max_stop;
	int prompt_tokens;
	int role_sent, tail_sent;
	struct strbuf pending;
	size_t pending_off;
	double last_taken; /* scheduler_clock() when tokens were last taken */
	int hold;          /* a stream wrote; the next write waits for the interval */
	int wrote;         /* the stream's last read returned bytes */
	struct MHD_Connection *conn;
};

/* ------------------------------------------------------------ text */

void
detok_append(const struct tokenizer *tok, const int32_t *ids, int n, struct strbuf *out, size_t *offs)
{
	struct detok_stream ds = { 0 };
	char piece[64];
	int k;

	for (int i = 0; i < n; i++) {
		if (offs != NULL)
			offs[i] = out->len;
		if ((k = detok_stream_push(&ds, tok, ids[i], piece, sizeof(piece))) > 0)
			strbuf_append(out, piece, (size_t)k);
	}
	if ((k = detok_stream_flush(&ds, piece, sizeof(piece))) > 0)
		strbuf_append(out, piece, (size_t)k);
}

/* Copy s (n bytes) into out, replacing bytes that are not valid UTF-8 with
 * U+FFFD, so a token that is half a character still gives valid JSON. */
static void
utf8_clean(const char *s, size_t n, struct strbuf *out)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0; i < n;) {
		int len = p[i] < 0x80 ? 1 : (p[i] >> 5) == 6 ? 2 : (p[i] >> 4) == 14 ? 3 : (p[i] >> 3) == 30 ? 4 : 0;
		int ok = len > 0 && i + (size_t)len <= n;
		for (int k = 1; ok && k < len; k++)
			ok = (p[i + k] & 0xC0) == 0x80;
		if (ok) {
			strbuf_append(out, s + i, (size_t)len);
			i += (size_t)len;
		} else {
			strbuf_puts(out, "\xef\xbf\xbd");
			i++;
		}
	}
}

static char *
token_string(const struct tokenizer *tok, int32_t id)
{
	char piece[256];
	struct strbuf b;
	int n = tokenizer_piece(tok, id, 1, piece, sizeof(piece));

	strbuf_init(&b);
	utf8_clean(piece, n > 0 ? (size_t)n : 0, &b);
	strbuf_puts(&b, "");
	return strbuf_take(&b);
}

/* tool_choice required cut short by max_tokens: the calls whose elements
 * closed (what a stream of it sent), no content.  How many, or 0. */
static int
closed_calls(struct job *j, struct choice *c, size_t *content_len)
{
	struct element_scan st = { 0 };
	size_t a, b;
	int n = 0;

	while (c->text.s != NULL && next_element(c->text.s, c->text.len, &st, &a, &b)) {
		struct tool_call *more = realloc(c->calls, (size_t)(n + 1) * sizeof(*more));
		if (more == NULL)
			break;
		c->calls = more;
		if (element_call(j->srv->chat, c->text.s + a, b - a, &c->calls[n]) < 0)
			break;
		n++;
	}
	if (n == 0) {
		free(c->calls);
		c->calls = NULL;
	}
	*content_len = 0;
	return n;
}

/* A finished choice's output read as tool calls; text before them
 * stays the content (without trailing whitespace). */
static void
finish_tools(struct job *j, struct choice *c)
{
	size_t content_len;

	if (c->tools_done || j->g.tools.choice == TOOL_CHOICE_NONE)
		return;
	c->tools_done = 1;
	int n = tools_parse_output(&j->g.tools, j->srv->chat, c->text.s ? c->text.s : "", &c->calls, &content_len);
	if (n <= 0 && j->g.tools.choice == TOOL_CHOICE_REQUIRED && c->finish == FINISH_LENGTH)
		n = closed_calls(j, c, &content_len);
	if (n <= 0)
		return; /* plain text (or out of memory: the text all the same) */
	c->n_calls = n;
	if (j->g.stream && j->g.tools.choice == TOOL_CHOICE_NAMED)
		return; /* the arguments went out as they came */
	if (content_len < c->sent)
		content_len = c->sent; /* already streamed */
	c->text.len = content_len;
	c->text.s[content_len] = '\0';
}

/* Bring the choice up to date with its request; find stop sequences. */
static void
advance(struct job *j, struct choice *c)
{
	struct scheduler *s = j->srv->sched;
	const struct tokenizer *tok = j->srv->tok;
	enum finish_reason f;
	char piece[64];

	if (c->finish != FINISH_NONE)
		return;
	scheduler_lock(s);
	int n = c->r->n_out;
	f = c->r->finish;
	scheduler_unlock(s);
	size_t scan_from = c->text.len > j->max_stop ? c->text.len - j->max_stop : c->echo_len;
	if (scan_from < c->echo_len)
		scan_from = c->echo_len;
	for (; c->seen < n; c->seen++) {
		int32_t id = c->r->out[c->seen];
		c->offs[c->seen] = c->text.len;
		if (c->no_gen || (!c->r->ignore_eos && tokenizer_is_eog(tok, id)))
			continue;
		int k = detok_stream_push(&c->ds, tok, id, piece, sizeof(piece));
		if (k > 0)
			strbuf_append(&c->text, piece, (size_t)k);
	}
	if (f != FINISH_NONE) {
		int k = detok_stream_flush(&c->ds, piece, sizeof(piece));
		if (k > 0)
			strbuf_append(&c->text, piece, (size_t)k);
	}
	for (int i = 0; i < j->g.n_stops && c->text.s != NULL; i++) {
		char *hit =
			memmem(c->text.s + scan_from, c->text.len - scan_from, j->g.stops[i], strlen(j->g.stops[i]));
		if (hit != NULL) {
			c->text.len = (size_t)(hit - c->text.s);
			c->text.s[c->text.len] = '\0';
			scan_from = c->text.len;
			c->finish = FINISH_STOP;
		}
	}
	if (c->finish == FINISH_STOP) {
		scheduler_stop(s, c->r);
		finish_tools(j, c);
		return;
	}
	if (f != FINISH_NONE) {
		c->finish = c->no_gen ? FINISH_LENGTH : f;
		finish_tools(j, c);
	}
}

/* Bytes of text that can be sent now: all of it once finished, else all but
 * a tail that might still grow into a stop sequence, on a UTF-8 boundary. */
static size_t
sendable(const struct job *j, const struct choice *c)
{
	size_t end = c->text.len;

	if (c->finish != FINISH_NONE)
		return end;
	/* a tool call is sent whole once the output is complete; a forced
	 * one is all call */
	if (j->g.tools.choice == TOOL_CHOICE_AUTO)
		end = tools_hold_from(j->srv->chat, c->text.s ? c->text.s : "", end);
	else if (j->g.tools.choice == TOOL_CHOICE_REQUIRED)
		end = c->sent; /* calls are picked out of the array once it is whole */
	size_t hold = j->max_stop > 0 ? j->max_stop - 1 : 0;
	end = end > hold ? end - hold : 0;
	while (end > c->sent && ((unsigned char)c->text.s[end] & 0xC0) == 0x80)
		end--;
	return end < c->sent ? c->sent : end;
}

/* ------------------------------------------------------------ JSON */

static void
add_top(cJSON *parent, const struct tokenizer *tok, const struct token_logprob *top, int n, int chat)
{
	if (chat) {
		cJSON *arr = cJSON_AddArrayToObject(parent, "top_logprobs");
		for (int k = 0; k < n; k++) {
			cJSON *o = cJSON_CreateObject();
			char *t = token_string(tok, top[k].id);
			cJSON_AddStringToObject(o, "token", t ? t : "");
			cJSON_AddNumberToObject(o, "logprob", top[k].logprob);
			cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
			for (const char *p = t; p && *p; p++)
				cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)*p));
			free(t);
			cJSON_AddItemToArray(arr, o);
		}
		return;
	}
	cJSON *o = cJSON_CreateObject();
	for (int k = 0; k < n; k++) {
		char *t = token_string(tok, top[k].id);
		if (t != NULL && cJSON_GetObjectItemCaseSensitive(o, t) == NULL)
			cJSON_AddNumberToObject(o, t, top[k].logprob);
		free(t);
	}
	cJSON_AddItemToArray(parent, o);
}

/* Logprobs of generated tokens [from, to) (and of the prompt first when
 * echoing in a completion), in the endpoint's shape. */
static cJSON *
logprobs_json(const struct job *j, const struct choice *c, int from, int to, int with_prompt)
{
	const struct tokenizer *tok = j->srv->tok;
	const struct sched_request *r = c->r;
	int ntop = j->g.logprobs, chat = j->g.chat;
	cJSON *lp = cJSON_CreateObject();

	if (chat) {
		cJSON *content = cJSON_AddArrayToObject(lp, "content");
		for (int i = from; i < to; i++) {
			cJSON *o = cJSON_CreateObject();
			char *t = token_string(tok, r->out[i]);
			cJSON_AddStringToObject(o, "token", t ? t : "");
			cJSON_AddNumberToObject(o, "logprob", r->out_logprob[i]);
			cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
			for (const char *p = t; p && *p; p++)
				cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)*p));
			free(t);
			add_top(o, tok, r->out_top + (size_t)i * ntop, ntop, 1);
			cJSON_AddItemToArray(content, o);
		}
		return lp;
	}
	cJSON *tokens = cJSON_AddArrayToObject(lp, "tokens"), *tlp = cJSON_AddArrayToObject(lp, "token_logprobs");
	cJSON *tops = cJSON_AddArrayToObject(lp, "top_logprobs"), *offs = cJSON_AddArrayToObject(lp, "text_offset");
	if (with_prompt) {
		for (int i = 0; i < r->n_prompt; i++) {
			char *t = token_string(tok, r->prompt[i]);
			cJSON_AddItemToArray(tokens, cJSON_CreateString(t ? t : ""));
			free(t);
			if (i == 0) {
				cJSON_AddItemToArray(tlp, cJSON_CreateNull());
				cJSON_AddItemToArray(tops, cJSON_CreateNull());
			} else {
				cJSON_AddItemToArray(tlp, cJSON_CreateNumber(r->prompt_logprob[i]));
				add_top(tops, tok, r->prompt_top + (size_t)i * ntop, ntop, 0);
			}
			cJSON_AddItemToArray(offs, cJSON_CreateNumber(c->poffs != NULL ? (double)c->poffs[i] : 0));
		}
	}
	for (int i = from; i < to && !c->no_gen; i++) {
		char *t = token_string(tok, r->out[i]);
		cJSON_AddItemToArray(tokens, cJSON_CreateString(t ? t : ""));
		free(t);
		cJSON_AddItemToArray(tlp, cJSON_CreateNumber(r->out_logprob[i]));
		add_top(tops, tok, r->out_top + (size_t)i * ntop, ntop, 0);
		cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)c->offs[i]));
	}
	return lp;
}

static cJSON *
envelope(const struct job *j, int chunk)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "id", j->id);
	cJSON_AddStringToObject(o, "object",
				j->g.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
	cJSON_AddNumberToObject(o, "created", (double)j->created);
	cJSON_AddStringToObject(o, "model", j->srv->cfg.model_id);
	return o;
}

static void
add_usage(const struct job *j, cJSON *o)
{
	int gen = 0;

	for (int i = 0; i < j->n_ch; i++)
		gen += j->ch[i].no_gen ? 0 : j->ch[i].seen;
	cJSON *u = cJSON_AddObjectToObject(o, "usage");
	cJSON_AddNumberToObject(u, "prompt_tokens", j->prompt_tokens);
	cJSON_AddNumberToObject(u, "completion_tokens", gen);
	cJSON_AddNumberToObject(u, "total_tokens", j->prompt_tokens + gen);
}

/* The calls as OpenAI writes them (with index in a stream's delta). */
static void
add_tool_calls(cJSON *o, const struct choice *c, int with_index, int from)
{
	cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");

	for (int i = from; i < c->n_calls; i++) {
		cJSON *tc = cJSON_CreateObject(), *fn;
		if (with_index)
			cJSON_AddNumberToObject(tc, "index", i);
		cJSON_AddStringToObject(tc, "id", c->calls[i].id);
		cJSON_AddStringToObject(tc, "type", "function");
		fn = cJSON_AddObjectToObject(tc, "function");
		cJSON_AddStringToObject(fn, "name", c->calls[i].name);
		cJSON_AddStringToObject(fn, "arguments", c->calls[i].arguments);
		cJSON_AddItemToArray(arr, tc);
	}
}

static void
add_finish(cJSON *o, const struct job *j, const struct choice *c)
{
	/* OpenAI answers a forced function with stop, a chosen call with tool_calls */
	const char *f = c->n_calls > 0 && c->finish == FINISH_STOP && j->g.tools.choice != TOOL_CHOICE_NAMED
				? "tool_calls"
				: finish_reason_name(c->finish);

	if (f != NULL)
		cJSON_AddStringToObject(o, "finish_reason", f);
	else
		cJSON_AddNullToObject(o, "finish_reason");
}

static double
cumulative_logprob(const struct choice *c)
{
	double sum = 0;

	for (int i = 0; i < c->seen; i++)
		sum += c->r->out_logprob[i];
	return sum;
}

/* best_of > n: each prompt's n choices of highest cumulative logprob, in
 * that order, renumbered; the rest are dropped from the answer. */
static void
select_best(struct job *j, int *order, int *ret_n)
{
	int per = j->g.best_of, n = 0;

	for (int p = 0; p < j->g.n_prompts; p++) {
		int taken[GEN_MAX_BEST_OF] = { 0 };
		double score[GEN_MAX_BEST_OF];
		for (int k = 0; k < per; k++)
			score[k] = cumulative_logprob(&j->ch[p * per + k]);
		for (int rank = 0; rank < j->g.n; rank++) {
			int best = -1;
			for (int k = 0; k < per; k++)
				if (!taken[k] && (best < 0 || score[k] > score[best]))
					best = k;
			if (best < 0)
				break; /* cannot happen: n <= best_of */
			taken[best] = 1;
			j->ch[p * per + best].index = p * j->g.n + rank;
			order[n++] = p * per + best;
		}
	}
	*ret_n = n;
}

static char *
whole_response(struct job *j)
{
	cJSON *o = envelope(j, 0), *choices = cJSON_AddArrayToObject(o, "choices");
	int order[GEN_MAX_PROMPTS * GEN_MAX_BEST_OF], n_order = j->n_ch;

	for (int i = 0; i < j->n_ch; i++)
		order[i] = i;
	if (j->g.best_of > j->g.n)
		select_best(j, order, &n_order);
	for (int oi = 0; oi < n_order; oi++) {
		struct choice *c = &j->ch[order[oi]];
		cJSON *ch = cJSON_CreateObject();
		cJSON_AddNumberToObject(ch, "index", c->index);
		const char *text = c->text.s ? c->text.s : "";
		if (j->g.chat) {
			cJSON *m = cJSON_AddObjectToObject(ch, "message");
			cJSON_AddStringToObject(m, "role", "assistant");
			if (c->n_calls > 0 && text[0] == '\0')
				cJSON_AddNullToObject(m, "content");
			else
				cJSON_AddStringToObject(m, "content", text);
			if (c->n_calls > 0)
				add_tool_calls(m, c, 0, 0);
		} else {
			cJSON_AddStringToObject(ch, "text", text);
		}
		if (j->g.logprobs >= 0)
			cJSON_AddItemToObject(ch, "logprobs", logprobs_json(j, c, 0, c->seen, j->g.echo));
		else
			cJSON_AddNullToObject(ch, "logprobs");
		add_finish(ch, j, c);
		cJSON_AddItemToArray(choices, ch);
	}
	add_usage(j, o);
	char *js = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return js;
}

static void
emit_event(struct job *j, cJSON *o)
{
	char *js = cJSON_PrintUnformatted(o);

	cJSON_Delete(o);
	if (js == NULL) {
		j->pending.failed = 1;
		return;
	}
	strbuf_printf(&j->pending, "data: %s\n\n", js);
	free(js);
}

/* A named function's arguments are the output itself, so they stream as
 * written: the first delta carries the call's id, type and name, each
 * one after it the next piece of the arguments (as OpenAI streams them). */
static void
add_argument_delta(struct job *j, struct choice *c, cJSON *d, const char *piece)
{
	cJSON *arr, *tc, *fn;

	if (piece == NULL && c->stream_call_id != NULL)
		return;
	arr = cJSON_AddArrayToObject(d, "tool_calls");
	tc = cJSON_CreateObject();
	cJSON_AddNumberToObject(tc, "index", 0);
	fn = cJSON_CreateObject();
	if (c->stream_call_id == NULL) {
		c->stream_call_id = tool_call_new_id(j->srv->chat);
		cJSON_AddStringToObject(tc, "id", c->stream_call_id ? c->stream_call_id : "call_0");
		cJSON_AddStringToObject(tc, "type", "function");
		cJSON_AddStringToObject(fn, "name", j->g.tools.t[j->g.tools.named].name);
	}
	cJSON_AddStringToObject(fn, "arguments", piece != NULL ? piece : "");
	cJSON_AddItemToObject(tc, "function", fn);
	cJSON_AddItemToArray(arr, tc);
}

/* tool_choice required, streamed: the output is a JSON array of
 * {"name", "parameters"} in either order (decoding is held to it), so
 * each call is sent whole as soon as its element closes rather than all
 * at the end.  An element that does not parse ends the early sending: the
 * calls from there on go out with the finish. */
static void
add_closed_calls(struct job *j, struct choice *c, cJSON *d)
{
	struct tool_call call;
	cJSON *arr = NULL;
	size_t a, b;

	while (!c->scan_off && c->text.s != NULL && next_element(c->text.s, c->text.len, &c->scan, &a, &b)) {
		if (element_call(j->srv->chat, c->text.s + a, b - a, &call) < 0) {
			c->scan_off = 1;
			break;
		}
		if (arr == NULL)
			arr = cJSON_AddArrayToObject(d, "tool_calls");
		cJSON *tc = cJSON_CreateObject(), *fn;
		cJSON_AddNumberToObject(tc, "index", c->calls_sent++);
		cJSON_AddStringToObject(tc, "id", call.id);
		cJSON_AddStringToObject(tc, "type", "function");
		fn = cJSON_AddObjectToObject(tc, "function");
		cJSON_AddStringToObject(fn, "name", call.name);
		cJSON_AddStringToObject(fn, "arguments", call.arguments);
		cJSON_AddItemToArray(arr, tc);
		free(call.id);
		free(call.name);
		cJSON_free(call.arguments);
	}
}

/* One chunk for choice c with its new text (and logprobs), plus its
 * finish_reason when it has finished and everything is out. */
static void
emit_choice_chunk(struct job *j, struct choice *c, size_t end)
{
	cJSON *o = envelope(j, 1), *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
	const char *text = c->text.s ? c->text.s : "";
	char *delta = strndup(text + c->sent, end - c->sent);
	int done = c->finish != FINISH_NONE && end == c->text.len;

	cJSON_AddNumberToObject(ch, "index", c->index);
	if (j->g.chat) {
		cJSON *d = cJSON_AddObjectToObject(ch, "delta");
		if (j->g.tools.choice == TOOL_CHOICE_NAMED)
			add_argument_delta(j, c, d, end > c->sent ? delta : NULL);
		else if (end > c->sent)
			cJSON_AddStringToObject(d, "content", delta ? delta : "");
		if (j->g.tools.choice == TOOL_CHOICE_REQUIRED)
			add_closed_calls(j, c, d);
		if (done && c->n_calls > c->calls_sent && j->g.tools.choice != TOOL_CHOICE_NAMED)
			add_tool_calls(d, c, 1, c->calls_sent);
	} else {
		cJSON_AddStringToObject(ch, "text", delta ? delta : "");
	}
	free(delta);
	if (j->g.logprobs >= 0 && (c->seen > c->lp_sent || (j->g.echo && c->lp_sent == 0 && c->sent == 0)))
		cJSON_AddItemToObject(ch, "logprobs",
				      logprobs_json(j, c, c->lp_sent, c->seen,
						    j->g.echo && c->lp_sent == 0 && c->sent == 0));
	else
		cJSON_AddNullToObject(ch, "logprobs");
	if (done)
		add_finish(ch, j, c);
	else
		cJSON_AddNullToObject(ch, "finish_reason");
	cJSON_AddItemToArray(choices, ch);
	emit_event(j, o);
	c->sent = end;
	c->lp_sent = c->seen;
	c->final_sent = done;
}

/* Queue whatever events are ready; returns 1 when some were queued. */
static int
produce(struct job *j)
{
	size_t before = j->pending.len;
	int all_done = 1;

	if (j->g.chat && !j->role_sent) {
		for (int i = 0; i < j->n_ch; i++) {
			cJSON *o = envelope(j, 1), *choices = cJSON_AddArrayToObject(o, "choices"),
			      *ch = cJSON_CreateObject();
			cJSON_AddNumberToObject(ch, "index", i);
			cJSON *d = cJSON_AddObjectToObject(ch, "delta");
			cJSON_AddStringToObject(d, "role", "assistant");
			cJSON_AddStringToObject(d, "content", "");
			cJSON_AddNullToObject(ch, "logprobs");
			cJSON_AddNullToObject(ch, "finish_reason");
			cJSON_AddItemToArray(choices, ch);
			emit_event(j, o);
		}
		j->role_sent = 1;
	}
	for (int i = 0; i < j->n_ch; i++) {
		struct choice *c = &j->ch[i];
		if (c->final_sent)
			continue;
		advance(j, c);
		size_t end = sendable(j, c);
		if (end > c->sent || c->seen > c->lp_sent || c->finish != FINISH_NONE)
			emit_choice_chunk(j, c, end);
		all_done &= c->final_sent;
	}
	if (all_done && !j->tail_sent) {
		if (j->g.include_usage) {
			cJSON *o = envelope(j, 1);
			cJSON_AddArrayToObject(o, "choices");
			add_usage(j, o);
			emit_event(j, o);
		}
		strbuf_puts(&j->pending, "data: [DONE]\n\n");
		j->tail_sent = 1;
	}
	return j->pending.len > before;
}

static void
job_free(struct job *j)
{
	for (int i = 0; i < j->n_ch; i++) {
		struct choice *c = &j->ch[i];
		if (c->r != NULL) {
			scheduler_cancel(j->srv->sched, c->r);
			sched_request_put(j->srv->sched, c->r);
		}
		strbuf_free(&c->text);
		free(c->offs);
		free(c->poffs);
		tool_calls_free(c->calls, c->n_calls);
		free(c->stream_call_id);
	}
	free(j->ch);
	strbuf_free(&j->pending);
	gen_params_free(&j->g);
	free(j);
}

/* Wait a little for any unfinished choice to move.  Tokens are taken no
 * more often than once a stream interval: a small model decodes a token in
 * a tenth of a millisecond, and waking this thread (and the client) for
 * each one takes CPU time from the decoding itself.  The first token and
 * the end are taken as soon as they come; a whole answer with no stop
 * string to look for waits for the end alone.  Returns 0 when the wait
 * ended at its timeout (ms, to notice a client gone) before the interval
 * did: the tokens that came stay for the next write. */
static int
wait_some(struct job *j, int ms, int end_only)
{
	for (int i = 0; i < j->n_ch; i++) {
		struct choice *c = &j->ch[i];
		enum finish_reason f;
		if (c->finish == FINISH_NONE) {
			double not_before = c->seen > 0 ? j->last_taken + j->srv->cfg.stream_interval : 0;
			if (end_only)
				not_before = scheduler_clock() + 3600;
			scheduler_wait_after(j->srv->sched, c->r, c->seen, not_before, ms, &f);
			double now = scheduler_clock();
			if (f == FINISH_NONE && now < not_before)
				return 0;
			j->last_taken = now;
			return 1;
		}
	}
	return 1;
}

static int
tokens_taken(const struct job *j)
{
	for (int i = 0; i < j->n_ch; i++)
		if (j->ch[i].seen > 0)
			return 1;
	return 0;
}

/* A stream's last read: its thread, which may serve the connection's
 * next request, preempts again when it wakes. */
static ssize_t
stream_end(ssize_t how)
{
	(void)thread_sched_defer(0);
	return how;
}

static ssize_t
stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct job *j = cls;

	for (;;) {
		if (j->pending_off < j->pending.len) {
			size_t n = j->pending.len - j->pending_off;
			n = n < max ? n : max;
			memcpy(buf, j->pending.s + j->pending_off, n);
			j->pending_off += n;
			j->wrote = 1;
			return (ssize_t)n;
		}
		if (strbuf_failed(&j->pending))
			return stream_end(MHD_CONTENT_READER_END_WITH_ERROR);
		if (j->tail_sent)
			return stream_end(MHD_CONTENT_READER_END_OF_STREAM);
		j->pending.len = j->pending_off = 0;
		if (!j->hold && produce(j)) {
			/* the interval runs from this write (the first token may
			 * have come before this thread first looked) */
			j->hold = 1;
			j->last_taken = scheduler_clock();
			continue;
		}
		/* a client gone makes the next write fail, which ends the
		 * stream: the look costs a system call, so it is for a wait
		 * that wrote nothing (a long prompt, an interval above the
		 * wait's 100 ms) */
		if (!j->wrote && http_client_gone(j->conn))
			return stream_end(MHD_CONTENT_READER_END_WITH_ERROR);
		j->wrote = 0;
		/* the first token written, later writes wait for a free CPU
		 * rather than stop a forward pass (http.c); a hint */
		if (tokens_taken(j))
			(void)thread_sched_defer(1);
		j->hold = !wait_some(j, 100, 0);
	}
}

static void
stream_free(void *cls)
{
	/* a write that failed ends the stream without a last read */
	(void)thread_sched_defer(0);
	job_free(cls);
}

/* ------------------------------------------------------------ setup */

static int
submit_error(struct MHD_Connection *conn, int rc, const char *err)
{
	if (rc == PRIVAI_EBUSY)
		return http_send_error(conn, 429, "rate_limit_error", "queue_full", NULL, "%s", err);
	if (rc == PRIVAI_EUNAVAIL)
		return http_send_error(conn, 503, "service_unavailable", "shutting_down", NULL, "%s", err);
	if (rc == PRIVAI_ENOMEM)
		return http_send_error(conn, 503, "server_error", "out_of_memory", NULL, "%s", err);
	return http_send_error(conn, 400, "invalid_request_error", NULL, NULL, "%s", err);
}

static int
make_choices(struct job *j, char *err)
{
	struct server *s = j->srv;
	static atomic_ulong seed_counter;
	int per = j->g.best_of; /* choices made per prompt; the best n are kept */
	int n_ch = j->g.n_prompts * per;

	/* the choices are queued at once: more than the queue holds can
	 * never be admitted, and a retry (429) would not help */
	if (n_ch > scheduler_max_queue(s->sched))
		return privai_fail(err, PRIVAI_EINVAL,
				   "this request has %d choices (prompts x best_of); the server queues at most %d at "
				   "once "
				   "(serve --queue)",
				   n_ch, scheduler_max_queue(s->sched));
	j->ch = calloc((size_t)n_ch, sizeof(*j->ch));
	if (j->ch != NULL)
		j->n_ch = n_ch; /* job_free() walks n_ch choices */
	if (j->ch == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
	for (int p = 0; p < j->g.n_prompts; p++) {
		int plen = j->g.plen[p];
		int mt = j->g.max_tokens >= 0 ? j->g.max_tokens : (j->g.chat ? s->n_ctx - plen : 16);
		if (j->g.max_tokens < 0 && mt > s->n_ctx - plen)
			mt = s->n_ctx - plen;
		if (plen >= s->n_ctx || (mt < 1 && !(j->g.echo && j->g.max_tokens == 0)))
			return privai_fail(err, PRIVAI_EINVAL,
					   "this model's maximum context length is %d tokens; the prompt has %d",
					   s->n_ctx, plen);
		int no_gen = mt == 0;
		if (no_gen)
			mt = 1;
		if (j->g.min_tokens > mt)
			return privai_fail(err, PRIVAI_EINVAL, "min_tokens (%d) exceeds max_tokens (%d)",
					   j->g.min_tokens, mt);
		j->prompt_tokens += plen;
		for (int k = 0; k < per; k++) {
			struct choice *c = &j->ch[p * per + k];
			int echo_lp = j->g.echo && j->g.logprobs >= 0;
			c->index = p * per + k;
			c->prompt_index = p;
			c->no_gen = no_gen;
			strbuf_init(&c->text);
			/* tool-call markers are control tokens in some families */
			c->ds.show_special = j->g.tools.choice == TOOL_CHOICE_AUTO;
			/* ranking by best_of needs each token's logprob */
			int lp = j->g.logprobs < 0 && per > j->g.n ? 0 : j->g.logprobs;
			c->r = sched_request_new(plen, mt > 0 ? mt : 1, lp, echo_lp);
			c->offs = calloc((size_t)mt + 1, sizeof(size_t));
			if (c->r == NULL || c->offs == NULL)
				return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
			memcpy(c->r->prompt, j->g.prompts[p], (size_t)plen * sizeof(int32_t));
			c->r->min_tokens = j->g.min_tokens;
			c->r->adapter = j->g.adapter;
			c->r->ignore_eos = j->g.ignore_eos;
			c->r->sampling = j->g.sp;
			if (j->g.n_bias > 0) { /* the request's own copy: it may outlive the job */
				size_t nb = (size_t)j->g.n_bias;
				if ((c->r->bias_ids = malloc(nb * sizeof(int32_t))) == NULL ||
				    (c->r->bias = malloc(nb * sizeof(float))) == NULL)
					return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
				memcpy(c->r->bias_ids, j->g.bias_ids, nb * sizeof(int32_t));
				memcpy(c->r->bias, j->g.bias, nb * sizeof(float));
				c->r->sampling.logit_bias_ids = c->r->bias_ids;
				c->r->sampling.logit_bias = c->r->bias;
			}
			if (j->g.json_mode && (c->r->constraint = json_constraint_new(s->json_vocab)) == NULL)
				return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
			if (j->g.regex != NULL &&
			    (c->r->constraint = regex_constraint_new(s->json_vocab, j->g.regex)) == NULL)
				return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
			if (j->g.schema != NULL &&
			    (c->r->constraint = json_schema_constraint_new(s->json_vocab, j->g.schema, NULL, NULL)) ==
				    NULL)
				return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
			c->r->sampling.seed =
				j->g.has_seed ? j->g.sp.seed + (uint64_t)k
					      : (uint64_t)time(NULL) * 2654435761u + atomic_fetch_add(&seed_counter, 1);
			if (j->g.echo) {
				if (echo_lp && (c->poffs = calloc((size_t)plen, sizeof(size_t))) == NULL)
					return privai_fail(err, PRIVAI_ENOMEM, "out of memory");
				detok_append(s->tok, j->g.prompts[p], plen, &c->text, c->poffs);
				c->echo_len = c->text.len;
			}
		}
	}
	for (int i = 0; i < j->n_ch; i++) {
		int rc = scheduler_submit(s->sched, j->ch[i].r, err);
		if (rc < 0)
			return rc;
	}
	return PRIVAI_OK;
}

int
api_completions(struct server *s, struct MHD_Connection *conn, const char *body, size_t len, int chat)
{
	struct job *j = calloc(1, sizeof(*j));
	char err[PRIVAI_ERR_LEN];
	int rc;

	if (j == NULL)
		return http_send_error(conn, 503, "server_error", "out_of_memory", NULL, "out of memory");
	j->srv = s;
	j->conn = conn;
	j->created = (long)time(NULL);
	strbuf_init(&j->pending);
	snprintf(j->id, sizeof(j->id), "%s-%lx%08lx", chat ? "chatcmpl" : "cmpl", (unsigned long)j->created,
		 (unsigned long)atomic_fetch_add(&s->next_id, 1));
	gen_params_init(&j->g, chat);
	j->g.allow_unknown = s->cfg.allow_unknown_fields;
	cJSON *json = http_body_object(conn, body, len, &rc);
	if (json == NULL) {
		job_free(j);
		return rc;
	}
	j->g.find_lora = server_find_lora;
	j->g.find_lora_arg = s;
	rc = gen_params_parse(&j->g, json, s->tok, s->chat, s->cfg.model_id);
	cJSON_Delete(json);
	if (rc < 0) {
		int st = j->g.not_found ? 404 : 400;
		rc = http_send_error(conn, st, st == 404 ? "not_found_error" : "invalid_request_error",
				     st == 404 ? "model_not_found" : NULL, j->g.err_param, "%s", j->g.err);
		job_free(j);
		return rc;
	}
	for (int i = 0; i < j->g.n_stops; i++)
		if (strlen(j->g.stops[i]) > j->max_stop)
			j->max_stop = strlen(j->g.stops[i]);
	if ((rc = make_choices(j, err)) < 0) {
		rc = submit_error(conn, rc, err);
		job_free(j);
		return rc;
	}
	if (j->g.stream) {
		struct MHD_Response *r =
			MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
		if (r == NULL) {
			job_free(j);
			return MHD_NO;
		}
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		rc = MHD_queue_response(conn, 200, r);
		MHD_destroy_response(r);
		return rc;
	}
	for (;;) {
		int all = 1;
		for (int i = 0; i < j->n_ch; i++) {
			advance(j, &j->ch[i]);
			all &= j->ch[i].finish != FINISH_NONE;
		}
		if (all)
			break;
		if (http_client_gone(conn)) {
			job_free(j);
			return MHD_NO;
		}
		wait_some(j, 100, j->g.n_stops == 0);
	}
	rc = http_send_json(conn, 200, whole_response(j));
	job_free(j);
	return rc;
}
