/*
 * The generation endpoints: parsed parameters (openai_params.c) and the
 * run that turns them into scheduler requests and OpenAI-shaped responses,
 * streamed or whole (openai_run.c).
 */
#ifndef PRIVAI_OPENAI_H
#define PRIVAI_OPENAI_H

#include <cjson/cJSON.h>

#include "privai/sampler.h"
#include "privai/tokenizer.h"
#include "server/chat_template.h"
#include "server/strbuf.h"
#include "server/tool_calls.h"

struct json_schema;

#define GEN_MAX_PROMPTS 64
#define GEN_MAX_STOPS 4
#define GEN_MAX_N 16
#define GEN_MAX_BEST_OF 20

struct gen_params {
	int chat;
	int allow_unknown;                             /* --allow-unknown-fields: fields no endpoint reads pass */
	int (*find_lora)(void *arg, const char *name); /* an adapter's number, 0 none; NULL: no adapters */
	void *find_lora_arg;
	int adapter; /* the one the request names (1-based), 0 the base model */
	int stream, include_usage, echo;
	int n;
	int best_of;    /* choices made per prompt (>= n); the n most likely are returned */
	int max_tokens; /* -1: the rest of the context (chat) or 16 (completions) */
	int min_tokens, ignore_eos;
	int logprobs; /* -1: none; else the number of top alternatives */
	int json_mode;
	struct json_schema *schema; /* response_format json_schema, or a forced tool call: owned */
	char *regex;                /* guided_regex or guided_choice as a pattern: owned */
	char *suffix;               /* completions: fill in the middle before this text; owned */
	struct tool_set tools;
	int has_seed;
	struct sampler_params sp;
	int32_t *bias_ids; /* logit_bias (sp points at these) */
	float *bias;
	int n_bias;
	char *stops[GEN_MAX_STOPS];
	int n_stops;
	int32_t *prompts[GEN_MAX_PROMPTS];
	int plen[GEN_MAX_PROMPTS];
	int n_prompts;
	/* on error */
	char err[512];
	const char *err_param; /* a literal, or param_buf */
	char param_buf[64];
	int not_found;
};

void gen_params_init(struct gen_params *g, int chat);
/* 0, or -1 with err/err_param set (not_found for an unknown model). */
int gen_params_parse(struct gen_params *g, const cJSON *j, const struct tokenizer *tok, enum chat_family fam,
		     const char *model_id);
void gen_params_free(struct gen_params *g);

/* Append the text of ids (valid token ids) to out, whole characters only;
 * offs (n entries, or NULL) gets where each token's text starts in out. */
void detok_append(const struct tokenizer *tok, const int32_t *ids, int n, struct strbuf *out, size_t *offs);

#endif
