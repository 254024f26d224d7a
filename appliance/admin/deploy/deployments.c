/*
 * The deployments table's rules, whoever writes a row (an operator's
 * request, a leader's spec on a member, day 0): serving options checked
 * and rebuilt, an engine port picked, an API key made (deploy/deployments.h).
 */
#include <curl/curl.h>
#include <netinet/in.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "privai/chat.h"
#include "status.h"
#include "strfmt.h"
#include "jsonnum.h"
#include "admin.h"
#include "deploy/deployments.h"

/* int option name in lo..hi, or 0 when absent; -1 naming it in err. */
static int
option_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out, char *err, size_t size)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	*out = 0;
	if (v == NULL)
		return 0;
	if (json_int_in(v, lo, hi, out) != APP_OK) {
		snprintf(err, size, "options.%s must be an integer in %lld..%lld", name, (long long)lo, (long long)hi);
		return APP_EINVAL;
	}
	return 0;
}

int
deploy_options_parse(const cJSON *o, char **ret, char *field, size_t field_size, char *err, size_t size)
{
	static const char *const known[] = { "ctx", "parallel", "batch", "kv_cache_mib", "chat_template", NULL };
	static const struct {
		const char *name;
		int64_t lo, hi;
	} ints[] = {
		{ "ctx", 16, 1 << 20 }, { "parallel", 1, 256 }, { "batch", 1, 8192 }, { "kv_cache_mib", 1, 1 << 20 }
	};
	const cJSON *e;
	int64_t v;

	*ret = NULL;
	snprintf(field, field_size, "options");
	if (!cJSON_IsObject(o)) {
		snprintf(err, size, "options must be an object");
		return APP_EINVAL;
	}
	cJSON_ArrayForEach (e, o) {
		int ok = 0;
		for (int i = 0; known[i] != NULL && !ok; i++)
			ok = strcmp(e->string, known[i]) == 0;
		if (!ok) {
			snprintf(field, field_size, "%.40s", e->string);
			snprintf(err, size, "unknown field '%.40s' in options", e->string);
			return APP_EUNSUPPORTED;
		}
	}
	cJSON *out = cJSON_CreateObject();
	if (out == NULL) {
		snprintf(err, size, "out of memory");
		return APP_ENOMEM;
	}
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		if (option_int(o, ints[i].name, ints[i].lo, ints[i].hi, &v, err, size) < 0) {
			snprintf(field, field_size, "options.%s", ints[i].name);
			cJSON_Delete(out);
			return APP_EINVAL;
		}
		if (v != 0)
			cJSON_AddNumberToObject(out, ints[i].name, (double)v);
	}
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "chat_template");
	if (t != NULL) {
		if (!cJSON_IsString(t) || !chat_template_known(t->valuestring)) {
			char list[256] = "";
			for (const char *const *n = chat_template_names(); *n != NULL; n++)
				msg_fmt(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
					n == chat_template_names() ? "" : ", ", *n);
			snprintf(field, field_size, "options.chat_template");
			snprintf(err, size, "chat_template must be one of %s", list);
			cJSON_Delete(out);
			return APP_EINVAL;
		}
		cJSON_AddStringToObject(out, "chat_template", t->valuestring);
	}
	*ret = cJSON_PrintUnformatted(out);
	cJSON_Delete(out);
	if (*ret == NULL) {
		snprintf(err, size, "out of memory");
		return APP_ENOMEM;
	}
	return 0;
}

static int
port_free(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok, on = 1;

	if (fd < 0)
		return 0;
	/* as the engine binds (libmicrohttpd sets it): a port whose last
	 * connections linger in TIME_WAIT, as kept proxy connections do after
	 * an engine stops, is free; one something listens on is not */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

int
deploy_url_host(const char *url, char *out, size_t size)
{
	CURLU *u = curl_url();
	char *host = NULL;
	int rc = APP_EINVAL;

	if (u != NULL && url != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && strlen(host) < size) {
		snprintf(out, size, "%s", host);
		rc = APP_OK;
	}
	curl_free(host);
	curl_url_cleanup(u);
	return rc;
}

int
deploy_pick_port(struct admin *a)
{
	sqlite3_stmt *st;

	/* an engine's port, or the rendezvous of a split one's ranks */
	if (sqlite3_prepare_v2(a->db,
			       "SELECT 1 FROM deployments WHERE port = ?1 OR json_extract(placement, '$.dist_port') = "
			       "?1",
			       -1, &st, NULL) != SQLITE_OK)
		return APP_EBUSY;
	for (int port = a->cfg.engine_port_lo; port <= a->cfg.engine_port_hi; port++) {
		sqlite3_reset(st);
		sqlite3_bind_int(st, 1, port);
		if (sqlite3_step(st) != SQLITE_ROW && port_free(port)) {
			sqlite3_finalize(st);
			return port;
		}
	}
	sqlite3_finalize(st);
	return APP_EBUSY;
}

int
deploy_key_create(sqlite3 *db, int64_t deployment_id, const char *name, int64_t now, char *ret_key, int64_t *ret_id,
		  char *err)
{
	unsigned char raw[32], h[crypto_hash_sha256_BYTES];
	char hex[65];
	sqlite3_stmt *st;

	if (sodium_init() < 0)
		return app_fail(err, APP_EIO, "libsodium failed to initialise");
	randombytes_buf(raw, sizeof(raw));
	memcpy(ret_key, "sk-", 3);
	sodium_bin2base64(ret_key + 3, DEPLOY_KEY_LEN - 3, raw, sizeof(raw), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof(raw));
	crypto_hash_sha256(h, (const unsigned char *)ret_key, strlen(ret_key));
	sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO deployment_keys (deployment_id, name, key_sha256, created_at) "
			       "VALUES (?, ?, ?, ?)",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	sqlite3_bind_int64(st, 1, deployment_id);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, hex, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 4, now);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return app_fail(err, rc == SQLITE_CONSTRAINT ? APP_ENOTFOUND : APP_EIO, "database: %s",
				sqlite3_errmsg(db));
	*ret_id = sqlite3_last_insert_rowid(db);
	return APP_OK;
}
