/*
 * LoRA adapters by name, and vLLM's endpoints that load and unload them
 * while serving (POST /v1/load_lora_adapter {lora_name, lora_path},
 * /v1/unload_lora_adapter {lora_name}).  Loading reads only files under
 * serve --lora-dir (the path is resolved, so neither ".." nor a symbolic
 * link leads out of it); without --lora-dir the endpoints refuse.  An
 * adapter still used by a queued or running request is not unloaded.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "privai/lora.h"
#include "privai/status.h"
#include "server/server.h"

int
server_find_lora(void *server, const char *name)
{
	struct server *s = server;
	int k = 0;

	pthread_mutex_lock(&s->lora_mu);
	for (int i = 0; i < ENGINE_MAX_LORA && k == 0; i++)
		if (s->lora_names[i] != NULL && strcmp(s->lora_names[i], name) == 0)
			k = i + 1;
	pthread_mutex_unlock(&s->lora_mu);
	return k;
}

void
server_free_loras(struct server *s)
{
	for (int i = 0; i < ENGINE_MAX_LORA; i++) {
		lora_free(s->lora_ptr[i]);
		free(s->lora_names[i]);
		s->lora_ptr[i] = NULL;
		s->lora_names[i] = NULL;
	}
}

static int
valid_name(const char *n)
{
	size_t len = strlen(n);

	return len >= 1 && len <= 64 &&
	       strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == len;
}

/* The body's lora_name (and lora_path), checked; NULL after replying. */
static cJSON *
read_body(struct server *s, struct MHD_Connection *c, const char *body, size_t len, int with_path,
	  const char **ret_name, const char **ret_path)
{
	int rc;
	cJSON *j;

	if (s->cfg.n_lora_dirs == 0) {
		http_send_error(c, 400, "invalid_request_error", "runtime_lora_disabled", NULL,
				"adapters are loaded at run time only from a directory: start the server with "
				"--lora-dir DIR");
		return NULL;
	}
	if ((j = http_body_object(c, body, len, &rc)) == NULL)
		return NULL;
	const cJSON *name = cJSON_GetObjectItem(j, "lora_name"), *path = cJSON_GetObjectItem(j, "lora_path");
	if (!cJSON_IsString(name) || !valid_name(name->valuestring)) {
		http_send_error(c, 400, "invalid_request_error", NULL, "lora_name",
				"lora_name must be 1-64 letters, digits, '_', '.' or '-'");
		cJSON_Delete(j);
		return NULL;
	}
	if (with_path && !cJSON_IsString(path)) {
		http_send_error(c, 400, "invalid_request_error", NULL, "lora_path", "lora_path is required");
		cJSON_Delete(j);
		return NULL;
	}
	*ret_name = name->valuestring;
	*ret_path = with_path ? path->valuestring : NULL;
	return j;
}

/* path resolved under one of the --lora-dir directories into out (a
 * relative path: under the first where it exists); 0, or -1 when it is
 * not a file under any. */
static int
resolve_under_one(const char *dir, const char *path, char *out)
{
	char root[PATH_MAX], joined[PATH_MAX * 2];
	size_t n;

	if (realpath(dir, root) == NULL)
		return -1;
	snprintf(joined, sizeof(joined), "%s/%s", root, path);
	if (path[0] == '/')
		snprintf(joined, sizeof(joined), "%s", path);
	if (realpath(joined, out) == NULL)
		return -1;
	n = strlen(root);
	return strncmp(out, root, n) == 0 && (out[n] == '/' || (n == 1 && root[0] == '/')) ? 0 : -1;
}

static int
resolve_under(const struct server_config *cfg, const char *path, char *out)
{
	for (int i = 0; i < cfg->n_lora_dirs; i++)
		if (resolve_under_one(cfg->lora_dirs[i], path, out) == 0)
			return 0;
	return -1;
}

/* Loads and unloads one at a time: they are rare, and two loads of one
 * name must not both pass the check for it. */
static pthread_mutex_t admin_mu = PTHREAD_MUTEX_INITIALIZER;

static int
send_ok(struct MHD_Connection *c, const char *msg)
{
	cJSON *o = cJSON_CreateString(msg);
	char *js = o != NULL ? cJSON_PrintUnformatted(o) : NULL;

	cJSON_Delete(o);
	return http_send_json(c, 200, js);
}

int
api_load_lora(struct server *s, struct MHD_Connection *c, const char *body, size_t len)
{
	const char *name, *path;
	char full[PATH_MAX], err[PRIVAI_ERR_LEN];
	struct lora_adapter *a = NULL;
	cJSON *j = read_body(s, c, body, len, 1, &name, &path);
	int k, rc;

	if (j == NULL)
		return MHD_YES;
	pthread_mutex_lock(&admin_mu);
	if (server_find_lora(s, name) != 0 || strcmp(name, s->cfg.model_id) == 0) {
		rc = http_send_error(c, 409, "invalid_request_error", "lora_exists", "lora_name",
				     "an adapter or model named %s is already served", name);
	} else if (resolve_under(&s->cfg, path, full) < 0) {
		rc = http_send_error(c, 400, "invalid_request_error", NULL, "lora_path",
				     "lora_path must name a file under one of the server's --lora-dir directories");
	} else if (lora_load(full, s->model, 1.0f, &a, err) < 0) {
		rc = http_send_error(c, 400, "invalid_request_error", NULL, "lora_path", "%s", err);
	} else if ((k = scheduler_lora_add(s->sched, a, err)) <= 0) {
		lora_free(a);
		rc = http_send_error(c, 409, "invalid_request_error", NULL, NULL, "%s", err);
	} else {
		pthread_mutex_lock(&s->lora_mu);
		s->lora_names[k - 1] = strdup(name);
		s->lora_ptr[k - 1] = a;
		pthread_mutex_unlock(&s->lora_mu);
		rc = s->lora_names[k - 1] != NULL ? send_ok(c, "Success: LoRA adapter added")
						  : http_send_error(c, 503, "server_error", "out_of_memory", NULL,
								    "out of memory for the adapter's name");
	}
	pthread_mutex_unlock(&admin_mu);
	cJSON_Delete(j);
	return rc;
}

int
api_unload_lora(struct server *s, struct MHD_Connection *c, const char *body, size_t len)
{
	const char *name, *path;
	char err[PRIVAI_ERR_LEN];
	struct lora_adapter *a = NULL;
	cJSON *j = read_body(s, c, body, len, 0, &name, &path);
	int k, rc;

	if (j == NULL)
		return MHD_YES;
	pthread_mutex_lock(&admin_mu);
	if ((k = server_find_lora(s, name)) == 0) {
		rc = http_send_error(c, 404, "not_found_error", "lora_not_found", "lora_name", "no adapter named %s",
				     name);
	} else if ((rc = scheduler_lora_remove(s->sched, k, &a, err)) < 0) {
		rc = http_send_error(c, rc == PRIVAI_EBUSY ? 409 : 404, "invalid_request_error", "lora_in_use",
				     "lora_name", "%s", err);
	} else {
		pthread_mutex_lock(&s->lora_mu);
		free(s->lora_names[k - 1]);
		s->lora_names[k - 1] = NULL;
		s->lora_ptr[k - 1] = NULL;
		pthread_mutex_unlock(&s->lora_mu);
		lora_free(a);
		rc = send_ok(c, "Success: LoRA adapter removed");
	}
	pthread_mutex_unlock(&admin_mu);
	cJSON_Delete(j);
	return rc;
}
