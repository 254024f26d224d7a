/*
 * LoRA adapters registered or deleted while their base model runs: the
 * engines of its deployments load or unload them through their
 * /v1/load_lora_adapter and /v1/unload_lora_adapter endpoints (the
 * supervisor starts every engine with --lora-dir for each directory models
 * come from), so a new adapter is served without a restart and a deleted
 * one stops being served before its file goes.
 */
#include <curl/curl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "deploy/deployments.h"
#include "deploy/supervisor.h"

#define ENGINE_ANSWER_MAX 2048

struct answer {
	char text[ENGINE_ANSWER_MAX];
	size_t len;
};

static size_t
keep_answer(char *p, size_t size, size_t n, void *arg)
{
	struct answer *ans = arg;
	size_t room = sizeof(ans->text) - 1 - ans->len, take = size * n < room ? size * n : room;

	memcpy(ans->text + ans->len, p, take);
	ans->len += take;
	ans->text[ans->len] = '\0';
	return size * n;
}

/* POST body to the engine on port; the HTTP status (0: no answer, with
 * curl's reason in ans), and what it said in ans. */
static long
engine_post(int port, const char *key, const char *path, const char *body, struct answer *ans)
{
	char url[128], auth[128];
	struct curl_slist *h = NULL;
	long code = 0;
	CURL *c = curl_easy_init();

	ans->len = 0;
	ans->text[0] = '\0';
	if (c == NULL) {
		snprintf(ans->text, sizeof(ans->text), "out of memory");
		return 0;
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, auth);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_answer);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, ans);
	CURLcode rc = curl_easy_perform(c);
	if (rc == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	else
		snprintf(ans->text, sizeof(ans->text), "%s", curl_easy_strerror(rc));
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	sodium_memzero(auth, sizeof(auth));
	return code;
}

/* The engine's error message out of its {"error": {"message"}} answer. */
static const char *
engine_message(const struct answer *ans, char *out, size_t size)
{
	cJSON *j = cJSON_Parse(ans->text);
	const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message");

	msg_fmt(out, size, "%s", cJSON_IsString(m) ? m->valuestring : ans->text);
	cJSON_Delete(j);
	return out;
}

static void
add_failure(cJSON *failed, int64_t id, const char *why)
{
	cJSON *f = cJSON_CreateObject();

	cJSON_AddNumberToObject(f, "deployment", (double)id);
	cJSON_AddStringToObject(f, "error", why);
	cJSON_AddItemToArray(failed, f);
}

cJSON *
deploy_lora_sync(struct admin *a, int64_t base_id, const char *name, const char *path, int load, int *busy)
{
	cJSON *out = cJSON_CreateObject(), *done, *failed, *other, *body = cJSON_CreateObject();
	char key[80], msg[600], said[300], *js;
	sqlite3_stmt *st;
	struct answer ans;
	int port;

	*busy = 0;
	done = cJSON_AddArrayToObject(out, load ? "loaded" : "unloaded");
	failed = cJSON_AddArrayToObject(out, "failed");
	other = cJSON_AddArrayToObject(out, "other_nodes");
	cJSON_AddStringToObject(body, "lora_name", name);
	if (load)
		cJSON_AddStringToObject(body, "lora_path", path);
	js = cJSON_PrintUnformatted(body);
	cJSON_Delete(body);
	if (js == NULL || other == NULL ||
	    sqlite3_prepare_v2(a->db, "SELECT id, node_id IS NOT NULL FROM deployments WHERE model_id = ? ORDER BY id",
			       -1, &st, NULL) != SQLITE_OK) {
		free(js);
		cJSON_Delete(out);
		return NULL;
	}
	sqlite3_bind_int64(st, 1, base_id);
	while (sqlite3_step(st) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0);
		if (sqlite3_column_int(st, 1)) {
			cJSON_AddItemToArray(other, cJSON_CreateNumber((double)id));
			continue;
		}
		/* one not running loads its adapters when it starts */
		if (supervisor_endpoint(a->sup, id, &port, key, sizeof(key)) != 0)
			continue;
		long code =
			engine_post(port, key, load ? "/v1/load_lora_adapter" : "/v1/unload_lora_adapter", js, &ans);
		sodium_memzero(key, sizeof(key));
		if (code == 200) {
			cJSON_AddItemToArray(done, cJSON_CreateNumber((double)id));
		} else if (!load && code == 404) {
			/* it never had it (started before the adapter, loaded nothing) */
			cJSON_AddItemToArray(done, cJSON_CreateNumber((double)id));
		} else {
			*busy |= !load && code == 409;
			msg_fmt(msg, sizeof(msg), "the engine answered %ld: %s", code,
				engine_message(&ans, said, sizeof(said)));
			add_failure(failed, id, code == 0 ? ans.text : msg);
		}
	}
	sqlite3_finalize(st);
	free(js);
	return out;
}
