/*
 * The OpenAI-compatible HTTP server (libmicrohttpd, one thread per
 * connection so a streaming response may block waiting for tokens).
 *
 * The server starts before the model is loaded so that /health can answer
 * 503 while loading; server_set_ready() attaches the scheduler.
 */
#ifndef PRIVAI_SERVER_H
#define PRIVAI_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "privai/scheduler.h"
#include "privai/tokenizer.h"
#include "server/api_keys.h"
#include "server/metrics.h"
#include "server/chat_template.h"

struct MHD_Daemon;
struct MHD_Connection;

#define SERVER_MAX_LORA_DIRS 16

struct server_config {
	const char *host;               /* listen address, default 127.0.0.1 */
	int port;                       /* 0: any free port (see server_port) */
	const char *api_key_file;       /* NULL: no authentication */
	const char *model_id;           /* the name clients use in "model" */
	size_t max_body;                /* request bodies beyond this get 413 */
	int max_connections;            /* held at once, default 256 */
	int max_connections_per_client; /* from one address; 0: no cap; <0: half of max_connections */
	double header_timeout;          /* seconds a client has to send its request headers, default 10 */
	double min_body_rate;           /* bytes a second a request body must average; 0: no floor */
	int allow_unknown_fields;       /* fields no endpoint reads pass instead of a 400 */
	double stream_interval;         /* seconds: a stream writes at most once in it, tokens that come
					 * meanwhile together; 0: every token at once */
	/* adapters may be loaded at run time from files under these; none: not */
	const char *lora_dirs[SERVER_MAX_LORA_DIRS];
	int n_lora_dirs;
};

struct server {
	struct server_config cfg;
	struct MHD_Daemon *daemon;
	struct http_guard *guard; /* drops slow and surplus connections */
	int port;
	atomic_int ready;
	/* valid once ready */
	struct scheduler *sched;
	struct serving_metrics metrics; /* fed by sched (its observer), read under its lock */
	const struct tokenizer *tok;
	enum chat_family chat;
	struct json_vocab *json_vocab; /* token texts for JSON mode */
	int n_ctx;
	int pooling; /* SCHED_POOL_*: how /v1/embeddings pools; NONE: not served */
	/* LoRA adapters by number - 1 (NULL: none), changed at run time
	 * through /v1/load_lora_adapter when cfg.lora_dirs has any */
	pthread_mutex_t lora_mu;
	char *lora_names[ENGINE_MAX_LORA];
	struct lora_adapter *lora_ptr[ENGINE_MAX_LORA];
	const struct engine_model *model;
	int n_embd;
	long created;
	/* swapped on reload */
	pthread_mutex_t keys_mu;
	struct api_keys *keys;
	atomic_ulong next_id;
};

int server_start(struct server *s, const struct server_config *cfg, char *err);
int server_set_ready(struct server *s, struct scheduler *sched, const struct tokenizer *tok, enum chat_family chat,
		     int n_ctx, char *err);
/* Reread the API key file; the old keys stay on any error. */
int server_reload_keys(struct server *s, char *err);
/* Stop accepting connections (requests in flight continue). */
void server_quiesce(struct server *s);
void server_stop(struct server *s);

/* Response helpers shared by the endpoint files. */
int http_send_json(struct MHD_Connection *c, unsigned status, char *json);
int http_send_error(struct MHD_Connection *c, unsigned status, const char *type, const char *code, const char *param,
		    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The body as a JSON object (http_body.c), or NULL with *rc the result of
 * the 400 sent: not JSON, bytes after the object, or U+0000 in a string. */
struct cJSON *http_body_object(struct MHD_Connection *c, const char *body, size_t len, int *rc);
/* 1 when the client has closed its end of the connection. */
int http_client_gone(struct MHD_Connection *c);

/* Endpoints in openai_*.c */
int api_completions(struct server *s, struct MHD_Connection *c, const char *body, size_t len, int chat);
int api_embeddings(struct server *s, struct MHD_Connection *c, const char *body, size_t len); /* openai_embed.c */
/* lora_admin.c: the adapter a model name picks (1-based; 0 none), and
 * vLLM's endpoints that load and unload adapters at run time */
int server_find_lora(void *server, const char *name);
int api_load_lora(struct server *s, struct MHD_Connection *c, const char *body, size_t len);
int api_unload_lora(struct server *s, struct MHD_Connection *c, const char *body, size_t len);
/* Free every adapter and name (after the scheduler has stopped). */
void server_free_loras(struct server *s);

#endif
