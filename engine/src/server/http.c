/*
 * HTTP transport: the libmicrohttpd daemon, request bodies (bounded),
 * authentication, routing, the small endpoints, and OpenAI-shaped errors.
 * Generation endpoints live in openai_*.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "privai/status.h"
#include "server/http_guard.h"
#include "server/json_constraint.h"
#include "server/openai.h"
#include "server/server.h"
#include "server/strbuf.h"
#include "thread_sched.h"

struct conn_state {
	struct strbuf body;
	int too_big;
};

int
http_send_json(struct MHD_Connection *c, unsigned status, char *json)
{
	struct MHD_Response *r;
	int rc;

	if (json == NULL)
		return MHD_NO; /* out of memory: drop the connection */
	r = MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(json);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/json");
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

int
http_send_error(struct MHD_Connection *c, unsigned status, const char *type, const char *code, const char *param,
		const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
	cJSON_AddStringToObject(e, "message", msg);
	cJSON_AddStringToObject(e, "type", type);
	if (param != NULL)
		cJSON_AddStringToObject(e, "param", param);
	else
		cJSON_AddNullToObject(e, "param");
	if (code != NULL)
		cJSON_AddStringToObject(e, "code", code);
	else
		cJSON_AddNullToObject(e, "code");
	char *js = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return http_send_json(c, status, js);
}

int
http_client_gone(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	char b;

	if (ci == NULL)
		return 0;
	/* a request's body has been read in full, so a readable socket that
	 * yields 0 bytes (or an error) means the peer closed it */
	ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int
send_text(struct MHD_Connection *c, unsigned status, const char *ctype, char *text)
{
	struct MHD_Response *r;
	int rc;

	if (text == NULL)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static int
authorized(struct server *s, struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	int ok;

	pthread_mutex_lock(&s->keys_mu);
	if (s->keys == NULL)
		ok = 1;
	else
		ok = h != NULL && strncmp(h, "Bearer ", 7) == 0 && api_keys_check(s->keys, h + 7, strlen(h + 7));
	pthread_mutex_unlock(&s->keys_mu);
	return ok;
}

static int
unauthorized(struct MHD_Connection *c)
{
	return http_send_error(c, 401, "authentication_error", "invalid_api_key", NULL,
			       "a valid API key is required (Authorization: Bearer KEY)");
}

/* The paths behind the API key. */
static int
endpoint_known(const char *url)
{
	return strcmp(url, "/v1/models") == 0 || strncmp(url, "/v1/models/", 11) == 0 ||
	       strcmp(url, "/v1/completions") == 0 || strcmp(url, "/v1/chat/completions") == 0 ||
	       strcmp(url, "/v1/embeddings") == 0 || strcmp(url, "/v1/load_lora_adapter") == 0 ||
	       strcmp(url, "/v1/unload_lora_adapter") == 0 || strcmp(url, "/tokenize") == 0 ||
	       strcmp(url, "/detokenize") == 0;
}

static cJSON *
model_object(const struct server *s)
{
	cJSON *m = cJSON_CreateObject();

	cJSON_AddStringToObject(m, "id", s->cfg.model_id);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", (double)s->created);
	cJSON_AddStringToObject(m, "owned_by", "privai");
	cJSON_AddNumberToObject(m, "max_model_len", s->n_ctx);
	return m;
}

/* An adapter as vLLM lists one: its own id, the base model as parent. */
static cJSON *
adapter_object(const struct server *s, int i)
{
	cJSON *m = model_object(s);

	cJSON_ReplaceItemInObject(m, "id", cJSON_CreateString(s->lora_names[i]));
	cJSON_AddStringToObject(m, "parent", s->cfg.model_id);
	cJSON_AddStringToObject(m, "root", s->cfg.model_id);
	return m;
}

static int
handle_models(struct server *s, struct MHD_Connection *c)
{
	cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data");

	cJSON_AddStringToObject(root, "object", "list");
	cJSON_AddItemToArray(data, model_object(s));
	pthread_mutex_lock(&s->lora_mu);
	for (int i = 0; i < ENGINE_MAX_LORA; i++)
		if (s->lora_names[i] != NULL)
			cJSON_AddItemToArray(data, adapter_object(s, i));
	pthread_mutex_unlock(&s->lora_mu);
	char *js = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return http_send_json(c, 200, js);
}

/* GET /v1/models/{id}: the OpenAI SDK's models.retrieve() */
static int
handle_model(struct server *s, struct MHD_Connection *c, const char *id)
{
	int k = server_find_lora(s, id);
	if (k > 0) {
		pthread_mutex_lock(&s->lora_mu);
		cJSON *m = s->lora_names[k - 1] != NULL ? adapter_object(s, k - 1) : model_object(s);
		pthread_mutex_unlock(&s->lora_mu);
		char *js = cJSON_PrintUnformatted(m);
		cJSON_Delete(m);
		return http_send_json(c, 200, js);
	}
	if (strcmp(id, s->cfg.model_id) != 0)
		return http_send_error(c, 404, "not_found_error", "model_not_found", "model",
				       "the model `%.100s` does not exist; this server serves `%s`", id,
				       s->cfg.model_id);
	cJSON *m = model_object(s);
	char *js = cJSON_PrintUnformatted(m);
	cJSON_Delete(m);
	return http_send_json(c, 200, js);
}

static int
handle_tokenize(struct server *s, struct MHD_Connection *c, const char *body, size_t len)
{
	char err[PRIVAI_ERR_LEN];
	int32_t *ids = NULL;
	int n = 0, rc;
	cJSON *j = http_body_object(c, body, len, &rc), *add;
	const cJSON *p = j ? cJSON_GetObjectItem(j, "prompt") : NULL;

	if (j == NULL)
		return rc;
	if (!cJSON_IsString(p)) {
		cJSON_Delete(j);
		return http_send_error(c, 400, "invalid_request_error", NULL, "prompt", "prompt must be a string");
	}
	add = cJSON_GetObjectItem(j, "add_special_tokens");
	int add_bos = add == NULL ? tokenizer_adds_bos(s->tok) : cJSON_IsTrue(add);
	if (tokenizer_encode(s->tok, p->valuestring, strlen(p->valuestring), add_bos, 1, &ids, &n, err) < 0) {
		cJSON_Delete(j);
		return http_send_error(c, 400, "invalid_request_error", NULL, "prompt", "%s", err);
	}
	cJSON_Delete(j);
	cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "tokens");
	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
	cJSON_AddNumberToObject(root, "count", n);
	cJSON_AddNumberToObject(root, "max_model_len", s->n_ctx);
	free(ids);
	char *js = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	rc = http_send_json(c, 200, js);
	return rc;
}

static int
handle_detokenize(struct server *s, struct MHD_Connection *c, const char *body, size_t len)
{
	int V = tokenizer_n_vocab(s->tok), n = 0, rc;
	cJSON *j = http_body_object(c, body, len, &rc);
	const cJSON *t = j ? cJSON_GetObjectItem(j, "tokens") : NULL, *it;

	if (j == NULL)
		return rc;
	if (!cJSON_IsArray(t)) {
		cJSON_Delete(j);
		return http_send_error(c, 400, "invalid_request_error", NULL, "tokens",
				       "tokens must be an array of token ids");
	}
	int32_t *ids = malloc(((size_t)cJSON_GetArraySize(t) + 1) * sizeof(int32_t));
	if (ids == NULL) {
		cJSON_Delete(j);
		return http_send_error(c, 503, "server_error", "out_of_memory", NULL, "out of memory");
	}
	cJSON_ArrayForEach (it, t) {
		double v = it->valuedouble;
		if (!cJSON_IsNumber(it) || v != (double)(int32_t)v || v < 0 || v >= V) {
			free(ids);
			cJSON_Delete(j);
			return http_send_error(c, 400, "invalid_request_error", NULL, "tokens",
					       "tokens[%d] is not a token id in 0..%d", n, V - 1);
		}
		ids[n++] = (int32_t)v;
	}
	cJSON_Delete(j);
	struct strbuf out;
	strbuf_init(&out);
	detok_append(s->tok, ids, n, &out, NULL);
	free(ids);
	char *text = strbuf_take(&out);
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "prompt", text ? text : "");
	free(text);
	char *js = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return http_send_json(c, 200, js);
}

/* The serving metrics, then the HTTP edge's own. */
static char *
metrics_text(struct server *s)
{
	static const char *reason[DROP_REASONS] = { "header_timeout", "slow_body", "server_full", "client_full" };
	uint64_t drops[DROP_REASONS];
	char *text = serving_metrics_text(&s->metrics, s->sched, s->cfg.model_id);
	struct strbuf out;

	if (text == NULL)
		return NULL;
	strbuf_init(&out);
	strbuf_puts(&out, text);
	free(text);
	http_guard_drops(s->guard, drops);
	strbuf_printf(&out, "# HELP privai:http_connections_dropped_total Connections the server closed to keep slow "
			    "or surplus clients from starving others.\n"
			    "# TYPE privai:http_connections_dropped_total counter\n");
	for (int i = 0; i < DROP_REASONS; i++)
		strbuf_printf(&out, "privai:http_connections_dropped_total{reason=\"%s\"} %llu\n", reason[i],
			      (unsigned long long)drops[i]);
	return strbuf_take(&out);
}

static int
route(struct server *s, struct MHD_Connection *c, const char *url, const char *method, const char *body, size_t len)
{
	int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;

	if (strcmp(url, "/health") == 0) {
		int ok = atomic_load(&s->ready);
		return send_text(c, ok ? 200 : 503, "text/plain", strdup(ok ? "ok\n" : "loading\n"));
	}
	if (strcmp(url, "/metrics") == 0 && get) {
		if (!atomic_load(&s->ready))
			return send_text(c, 503, "text/plain", strdup("loading\n"));
		return send_text(c, 200, "text/plain; version=0.0.4", metrics_text(s));
	}
	const char *model_id = strncmp(url, "/v1/models/", 11) == 0 ? url + 11 : NULL;
	if (!endpoint_known(url))
		return http_send_error(c, 404, "not_found_error", "not_found", NULL, "no such path: %s %s", method,
				       url);
	if (!authorized(s, c))
		return unauthorized(c);
	if (!atomic_load(&s->ready))
		return http_send_error(c, 503, "service_unavailable", "loading", NULL, "the model is still loading");
	if (strcmp(url, "/v1/models") == 0 && get)
		return handle_models(s, c);
	if (model_id != NULL && get)
		return handle_model(s, c, model_id);
	if (!post)
		return http_send_error(c, 405, "invalid_request_error", "method_not_allowed", NULL,
				       "%s does not accept %s", url, method);
	if (strcmp(url, "/v1/completions") == 0)
		return api_completions(s, c, body, len, 0);
	if (strcmp(url, "/v1/chat/completions") == 0)
		return api_completions(s, c, body, len, 1);
	if (strcmp(url, "/v1/embeddings") == 0)
		return api_embeddings(s, c, body, len);
	if (strcmp(url, "/v1/load_lora_adapter") == 0)
		return api_load_lora(s, c, body, len);
	if (strcmp(url, "/v1/unload_lora_adapter") == 0)
		return api_unload_lora(s, c, body, len);
	if (strcmp(url, "/tokenize") == 0)
		return handle_tokenize(s, c, body, len);
	return handle_detokenize(s, c, body, len);
}

static enum MHD_Result
access_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
	       const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct server *s = cls;
	struct conn_state *st = *con_cls;

	if (st == NULL) {
		/* a request's parse and first token: preempt when woken (a hint) */
		(void)thread_sched_defer(0);
		if ((st = calloc(1, sizeof(*st))) == NULL)
			return MHD_NO;
		strbuf_init(&st->body);
		*con_cls = st;
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
		http_guard_headers(c, (cl != NULL && strtoull(cl, NULL, 10) > 0) || te != NULL);
		if (cl != NULL && strtoull(cl, NULL, 10) > s->cfg.max_body)
			st->too_big = 1;
		/* a client without a key gets its 401 before it may send a body */
		if (endpoint_known(url) && !authorized(s, c))
			return unauthorized(c);
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		http_guard_body(c, *upload_data_size);
		if (!st->too_big && st->body.len + *upload_data_size > s->cfg.max_body) {
			st->too_big = 1;
			strbuf_free(&st->body);
		}
		if (!st->too_big)
			strbuf_append(&st->body, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	http_guard_busy(c);
	if (st->too_big)
		return http_send_error(c, 413, "invalid_request_error", "request_too_large", NULL,
				       "the request body exceeds %zu bytes", s->cfg.max_body);
	if (strbuf_failed(&st->body))
		return http_send_error(c, 503, "server_error", "out_of_memory", NULL, "out of memory for the body");
	return (enum MHD_Result)route(s, c, url, method, st->body.s ? st->body.s : "", st->body.len);
}

static void
completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct conn_state *st = *con_cls;

	http_guard_idle(c);
	if (st != NULL) {
		strbuf_free(&st->body);
		free(st);
		*con_cls = NULL;
	}
}

int
server_start(struct server *s, const struct server_config *cfg, char *err)
{
	struct sockaddr_in sa;

	memset(s, 0, sizeof(*s));
	s->cfg = *cfg;
	if (s->cfg.host == NULL)
		s->cfg.host = "127.0.0.1";
	if (s->cfg.max_body == 0)
		s->cfg.max_body = 4 << 20;
	if (s->cfg.max_connections <= 0)
		s->cfg.max_connections = 256;
	if (s->cfg.max_connections_per_client < 0)
		s->cfg.max_connections_per_client = s->cfg.max_connections / 2;
	if (s->cfg.header_timeout <= 0)
		s->cfg.header_timeout = 10;
	s->created = (long)time(NULL);
	pthread_mutex_init(&s->keys_mu, NULL);
	pthread_mutex_init(&s->lora_mu, NULL);
	if (cfg->api_key_file != NULL) {
		int rc = api_keys_load(cfg->api_key_file, &s->keys, err);
		if (rc < 0)
			return rc;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)cfg->port);
	if (inet_pton(AF_INET, s->cfg.host, &sa.sin_addr) != 1)
		return privai_fail(err, PRIVAI_EINVAL, "--host %s is not an IPv4 address", s->cfg.host);
	struct http_guard_config gc = { .max_total = s->cfg.max_connections,
					.max_per_client = s->cfg.max_connections_per_client,
					.header_timeout = s->cfg.header_timeout,
					.min_body_rate = s->cfg.min_body_rate };
	if ((s->guard = http_guard_new(&gc)) == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "cannot start the connection guard");
	/* libmicrohttpd's own limit leaves room for connections the guard
	 * has dropped but whose threads have not yet closed them */
	unsigned mhd_limit = (unsigned)s->cfg.max_connections + 64 + (unsigned)s->cfg.max_connections / 4;
	s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC, 0,
				     NULL, NULL, access_handler, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
				     MHD_OPTION_CONNECTION_LIMIT, mhd_limit, MHD_OPTION_CONNECTION_TIMEOUT,
				     (unsigned)120, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(512 << 10),
				     MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_NOTIFY_CONNECTION,
				     http_guard_notify, s->guard, MHD_OPTION_END);
	if (s->daemon == NULL) {
		http_guard_free(s->guard);
		s->guard = NULL;
		return privai_fail(err, PRIVAI_EIO, "cannot listen on %s:%d (in use, or not allowed)", s->cfg.host,
				   cfg->port);
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di != NULL ? di->port : cfg->port;
	return PRIVAI_OK;
}

int
server_set_ready(struct server *s, struct scheduler *sched, const struct tokenizer *tok, enum chat_family chat,
		 int n_ctx, char *err)
{
	if ((s->json_vocab = json_vocab_new(tok)) == NULL)
		return privai_fail(err, PRIVAI_ENOMEM, "out of memory for the JSON-mode vocabulary");
	s->sched = sched;
	s->tok = tok;
	s->chat = chat;
	s->n_ctx = n_ctx;
	atomic_store(&s->ready, 1);
	return PRIVAI_OK;
}

int
server_reload_keys(struct server *s, char *err)
{
	struct api_keys *k, *old;
	int rc;

	if (s->cfg.api_key_file == NULL)
		return PRIVAI_OK;
	if ((rc = api_keys_load(s->cfg.api_key_file, &k, err)) < 0)
		return rc;
	pthread_mutex_lock(&s->keys_mu);
	old = s->keys;
	s->keys = k;
	pthread_mutex_unlock(&s->keys_mu);
	api_keys_free(old);
	return PRIVAI_OK;
}

void
server_quiesce(struct server *s)
{
	if (s->daemon != NULL)
		MHD_quiesce_daemon(s->daemon);
}

void
server_stop(struct server *s)
{
	if (s->daemon != NULL)
		MHD_stop_daemon(s->daemon);
	s->daemon = NULL;
	http_guard_free(s->guard);
	s->guard = NULL;
	api_keys_free(s->keys);
	s->keys = NULL;
	json_vocab_free(s->json_vocab);
	s->json_vocab = NULL;
	pthread_mutex_destroy(&s->keys_mu);
	pthread_mutex_destroy(&s->lora_mu);
}
