/*
 * POST /v1/embeddings: each input becomes a scheduler request that only
 * fills its prompt and pools the final hidden states (mean or last token,
 * L2-normalised), so embeddings share the continuous batcher with
 * generation.  Enabled by serve --embeddings, or by a model whose GGUF
 * says how it pools.
 */
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <sodium.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/status.h"
#include "server/server.h"
#include "server/strbuf.h"

#define EMBED_MAX_INPUTS 256

static const char *const embed_fields[] = { "model", "input", "encoding_format", "dimensions", "user", NULL };

struct embed_job {
	struct sched_request *r[EMBED_MAX_INPUTS];
	int n;
	int tokens;
};

static int
bad(struct MHD_Connection *c, const char *param, const char *msg)
{
	return http_send_error(c, 400, "invalid_request_error", NULL, param, "%s", msg);
}

/* Input i as tokens into a new request; 0, or -1 after replying 400. */
static int
add_input(struct server *s, struct MHD_Connection *c, const cJSON *in, int i, struct embed_job *ej)
{
	char err[PRIVAI_ERR_LEN];
	int32_t *ids = NULL;
	int n = 0;

	if (cJSON_IsString(in)) {
		if (in->valuestring[0] == '\0')
			return http_send_error(c, 400, "invalid_request_error", NULL, "input", "input[%d] is empty", i),
			       -1;
		if (tokenizer_encode(s->tok, in->valuestring, strlen(in->valuestring), tokenizer_adds_bos(s->tok), 0,
				     &ids, &n, err) < 0)
			return http_send_error(c, 400, "invalid_request_error", NULL, "input", "input[%d]: %s", i, err),
			       -1;
	} else if (cJSON_IsArray(in) && cJSON_GetArraySize(in) > 0) {
		const cJSON *t;
		int V = tokenizer_n_vocab(s->tok);
		if ((ids = malloc((size_t)cJSON_GetArraySize(in) * sizeof(int32_t))) == NULL)
			return http_send_error(c, 503, "server_error", "out_of_memory", NULL, "out of memory"), -1;
		cJSON_ArrayForEach (t, in) {
			/* the range first: a cast of a double beyond int32_t is undefined */
			if (!cJSON_IsNumber(t) || !(t->valuedouble >= 0 && t->valuedouble < V) ||
			    t->valuedouble != floor(t->valuedouble)) {
				free(ids);
				return http_send_error(c, 400, "invalid_request_error", NULL, "input",
						       "input[%d] holds something that is not a token id", i),
				       -1;
			}
			ids[n++] = (int32_t)t->valuedouble;
		}
	} else {
		return http_send_error(c, 400, "invalid_request_error", NULL, "input",
				       "input[%d] must be a non-empty string or array of token ids", i),
		       -1;
	}
	if (n >= s->n_ctx) {
		free(ids);
		return http_send_error(c, 400, "invalid_request_error", NULL, "input",
				       "input[%d] has %d tokens; this model's context holds %d", i, n, s->n_ctx - 1),
		       -1;
	}
	struct sched_request *r = sched_request_new(n, 1, -1, 0);
	if (r == NULL || (r->embedding = calloc((size_t)s->n_embd, sizeof(float))) == NULL) {
		free(ids);
		if (r != NULL)
			sched_request_put(s->sched, r);
		return http_send_error(c, 503, "server_error", "out_of_memory", NULL, "out of memory"), -1;
	}
	memcpy(r->prompt, ids, (size_t)n * sizeof(int32_t));
	free(ids);
	r->pooling = s->pooling;
	ej->r[ej->n++] = r;
	ej->tokens += n;
	return 0;
}

static void
embed_free(struct server *s, struct embed_job *ej)
{
	for (int i = 0; i < ej->n; i++) {
		scheduler_cancel(s->sched, ej->r[i]);
		sched_request_put(s->sched, ej->r[i]);
	}
}

static cJSON *
vector_json(const float *e, int n, int base64)
{
	if (base64) { /* little-endian float32, as OpenAI sends it */
		size_t cap = sodium_base64_ENCODED_LEN((size_t)n * sizeof(float), sodium_base64_VARIANT_ORIGINAL);
		char *b = malloc(cap);
		if (b == NULL)
			return NULL;
		sodium_bin2base64(b, cap, (const unsigned char *)e, (size_t)n * sizeof(float),
				  sodium_base64_VARIANT_ORIGINAL);
		cJSON *v = cJSON_CreateString(b);
		free(b);
		return v;
	}
	cJSON *arr = cJSON_CreateArray();
	for (int d = 0; d < n && arr != NULL; d++)
		cJSON_AddItemToArray(arr, cJSON_CreateNumber(e[d]));
	return arr;
}

/* The request's fields, checked; 0, or -1 after replying. */
static int
check_request(struct server *s, struct MHD_Connection *c, const cJSON *j, int *ret_base64)
{
	const cJSON *model = cJSON_GetObjectItem(j, "model"), *fmt = cJSON_GetObjectItem(j, "encoding_format");
	const cJSON *dims = cJSON_GetObjectItem(j, "dimensions"), *f;

	cJSON_ArrayForEach (f, j) {
		int known = 0;
		for (int k = 0; embed_fields[k] != NULL; k++)
			known |= strcmp(embed_fields[k], f->string) == 0;
		if (!known && !s->cfg.allow_unknown_fields)
			return http_send_error(c, 400, "invalid_request_error", NULL, f->string,
					       "unknown field \"%.60s\" for /v1/embeddings", f->string),
			       -1;
	}
	if (model != NULL && !cJSON_IsNull(model) &&
	    (!cJSON_IsString(model) || strcmp(model->valuestring, s->cfg.model_id) != 0))
		return http_send_error(c, 404, "not_found_error", "model_not_found", "model",
				       "the model `%.100s` does not exist; this server serves `%s`",
				       cJSON_IsString(model) ? model->valuestring : "?", s->cfg.model_id),
		       -1;
	*ret_base64 = 0;
	if (fmt != NULL && !cJSON_IsNull(fmt)) {
		if (!cJSON_IsString(fmt) ||
		    (strcmp(fmt->valuestring, "float") != 0 && strcmp(fmt->valuestring, "base64") != 0))
			return bad(c, "encoding_format", "encoding_format must be \"float\" or \"base64\""), -1;
		*ret_base64 = strcmp(fmt->valuestring, "base64") == 0;
	}
	/* a model's embedding has its size; cutting it short is not offered */
	if (dims != NULL && !cJSON_IsNull(dims) && !(cJSON_IsNumber(dims) && dims->valuedouble == s->n_embd))
		return http_send_error(c, 400, "invalid_request_error", NULL, "dimensions",
				       "dimensions can only be this model's, %d", s->n_embd),
		       -1;
	return 0;
}

int
api_embeddings(struct server *s, struct MHD_Connection *c, const char *body, size_t len)
{
	struct embed_job ej = { .n = 0 };
	char err[PRIVAI_ERR_LEN];
	int rc, base64;
	cJSON *j;

	if (s->pooling == SCHED_POOL_NONE)
		return http_send_error(c, 400, "invalid_request_error", "embeddings_disabled", NULL,
				       "this server does not serve embeddings (start it with --embeddings)");
	if ((j = http_body_object(c, body, len, &rc)) == NULL)
		return rc;
	const cJSON *input = cJSON_GetObjectItem(j, "input"), *in;
	if (check_request(s, c, j, &base64) < 0) {
		cJSON_Delete(j);
		return MHD_YES;
	}
	/* one string, one array of ids, or an array of either */
	int many = cJSON_IsArray(input) && cJSON_GetArraySize(input) > 0 &&
		   (cJSON_IsString(input->child) || cJSON_IsArray(input->child));
	if (input == NULL || (many && cJSON_GetArraySize(input) > EMBED_MAX_INPUTS)) {
		cJSON_Delete(j);
		return bad(c, "input", "input is required: a string, token ids, or up to 256 of either");
	}
	int i = 0;
	for (in = many ? input->child : input; in != NULL; in = many ? in->next : NULL)
		if (add_input(s, c, in, i++, &ej) < 0) {
			cJSON_Delete(j);
			embed_free(s, &ej);
			return MHD_YES;
		}
	cJSON_Delete(j);
	for (i = 0; i < ej.n; i++)
		if ((rc = scheduler_submit(s->sched, ej.r[i], err)) < 0) {
			embed_free(s, &ej);
			return http_send_error(c, rc == PRIVAI_EBUSY ? 429 : 503,
					       rc == PRIVAI_EBUSY ? "rate_limit_error" : "service_unavailable", NULL,
					       NULL, "%s", err);
		}
	for (i = 0; i < ej.n; i++) {
		enum finish_reason f = FINISH_NONE;
		while (f == FINISH_NONE) {
			scheduler_wait(s->sched, ej.r[i], 0, 100, &f);
			if (f == FINISH_NONE && http_client_gone(c)) {
				embed_free(s, &ej);
				return MHD_NO;
			}
		}
		if (f != FINISH_STOP) {
			snprintf(err, sizeof(err), "%s",
				 ej.r[i]->error[0] ? ej.r[i]->error : "the request was aborted");
			embed_free(s, &ej);
			return http_send_error(c, 503, "server_error", NULL, NULL, "input[%d]: %s", i, err);
		}
	}
	cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data"), *u;
	cJSON_AddStringToObject(root, "object", "list");
	for (i = 0; i < ej.n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "object", "embedding");
		cJSON_AddNumberToObject(o, "index", i);
		cJSON_AddItemToObject(o, "embedding", vector_json(ej.r[i]->embedding, s->n_embd, base64));
		cJSON_AddItemToArray(data, o);
	}
	cJSON_AddStringToObject(root, "model", s->cfg.model_id);
	u = cJSON_AddObjectToObject(root, "usage");
	cJSON_AddNumberToObject(u, "prompt_tokens", ej.tokens);
	cJSON_AddNumberToObject(u, "total_tokens", ej.tokens);
	embed_free(s, &ej);
	char *js = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return http_send_json(c, 200, js);
}
