/*
 * Model downloads by URL, from hosts the admin lists in the
 * model_url_hosts setting only (http or https, no redirects, so a server
 * cannot send the appliance elsewhere).  The row exists from the start as
 * 'importing' with bytes_done advancing; the file is hashed as it
 * arrives, checked with the GGUF reader, then renamed into place and the
 * row made 'ready', or the row is marked 'failed' with the reason and the
 * partial file removed.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "store/db.h"
#include "models/models.h"
#include "store/settings.h"
#include "deploy/deployments.h"

struct fetch {
	struct admin *a;
	int64_t id;
	char name[160], url[2100], want_sha[65], tmp[PATH_MAX + 64], final[PATH_MAX + 200];
	char pin[128], secret_hdr[128]; /* a fetch from the leader: its key pin and our node secret */
	int64_t want_size;              /* -1: unknown */
	int64_t base_id;                /* > 0: a LoRA adapter of this model */
	int fd;
	crypto_hash_sha256_state h;
	int64_t bytes, last_report_ms;
	atomic_int cancel, done;
	pthread_t thread;
	struct fetch *next;
};

int
model_url_host(const char *url, char *out, size_t size)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL;
	int ok = APP_EINVAL;

	if (u != NULL && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0)) {
		curl_url_get(u, CURLUPART_PORT, &port, 0);
		snprintf(out, size, "%s%s%s", host, port ? ":" : "", port ? port : "");
		for (char *p = out; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		ok = 0;
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return ok;
}

int
model_url_host_allowed(sqlite3 *db, const char *host)
{
	char list[1100];

	settings_get(db, "model_url_hosts", list, sizeof(list));
	for (char *save = NULL, *w = strtok_r(list, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save))
		if (strcasecmp(w, host) == 0)
			return 1;
	return 0;
}

/* The download's end in the audit log (the caller holds the store's mutex). */
static void
audit_download(struct fetch *f, const char *result, const char *key, const char *value)
{
	cJSON *d = cJSON_CreateObject();

	cJSON_AddStringToObject(d, "url", f->url);
	cJSON_AddStringToObject(d, key, value);
	char *js = cJSON_PrintUnformatted(d);
	admin_audit(f->a->db, admin_now(), "system", "model.download", f->name, "", result, js);
	free(js);
	cJSON_Delete(d);
}

static void
set_state(struct fetch *f, const char *state, const char *error)
{
	sqlite3_stmt *st;
	char err[APP_ERR_LEN];

	pthread_mutex_lock(&f->a->db_mu);
	if (sqlite3_prepare_v2(f->a->db, "UPDATE models SET state = ?1, error = ?2, bytes_done = ?3 WHERE id = ?4", -1,
			       &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, state, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, error, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, f->bytes);
		sqlite3_bind_int64(st, 4, f->id);
	}
	/* a failed prepare left st NULL, which db_write reports */
	if (db_write(f->a->db, st, err) != APP_OK)
		log_warn("model %lld: download state %s not recorded: %s", (long long)f->id, state, err);
	if (error != NULL)
		audit_download(f, "refused", "error", error);
	pthread_mutex_unlock(&f->a->db_mu);
}

static size_t
on_data(char *buf, size_t size, size_t n, void *arg)
{
	struct fetch *f = arg;
	size_t len = size * n;

	if (atomic_load(&f->cancel) || f->bytes + (int64_t)len > f->a->cfg.max_upload_bytes)
		return 0;
	crypto_hash_sha256_update(&f->h, (const unsigned char *)buf, len);
	for (size_t off = 0; off < len;) {
		ssize_t w = write(f->fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return 0;
		off += (size_t)w;
	}
	f->bytes += (int64_t)len;
	return len;
}

static int
on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	struct fetch *f = arg;
	int64_t ms = admin_mono_ms();
	if (ms - f->last_report_ms >= 1000) {
		f->last_report_ms = ms;
		set_state(f, "importing", NULL);
	}
	return atomic_load(&f->cancel) ? 1 : 0;
}

/* Download into f->tmp; 0, or -1 with the reason in err. */
static int
download(struct fetch *f, char *err)
{
	char curl_err[CURL_ERROR_SIZE] = "";
	CURL *c = curl_easy_init();

	if (c == NULL)
		return app_fail(err, APP_EIO, "out of memory for libcurl");
	curl_easy_setopt(c, CURLOPT_URL, f->url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L); /* a stalled server is given up on */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 120L);
	curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->a->cfg.max_upload_bytes);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, f);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
	struct curl_slist *h = NULL;
	if (f->secret_hdr[0] != '\0') {
		h = curl_slist_append(NULL, f->secret_hdr);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	}
	if (f->pin[0] != '\0') {
		/* the leader's certificate is self-signed: its key pin is the trust */
		curl_easy_setopt(c, CURLOPT_PINNEDPUBLICKEY, f->pin);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	CURLcode rc = curl_easy_perform(c);
	curl_slist_free_all(h);
	long code = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	if (atomic_load(&f->cancel))
		return app_fail(err, APP_EIO, "cancelled");
	if (rc != CURLE_OK)
		return app_fail(err, APP_EIO, "%s", curl_err[0] ? curl_err : curl_easy_strerror(rc));
	if (code != 200)
		return app_fail(err, APP_EIO, "the server answered %ld, not 200", code);
	return 0;
}

static int
finish(struct fetch *f, char *err)
{
	unsigned char digest[crypto_hash_sha256_BYTES];
	char hex[65];
	struct model_meta m;
	sqlite3_stmt *st;

	crypto_hash_sha256_final(&f->h, digest);
	sodium_bin2hex(hex, sizeof(hex), digest, sizeof(digest));
	if (f->want_size >= 0 && f->bytes != f->want_size)
		return app_fail(err, APP_EIO, "the download has %lld bytes, not %lld", (long long)f->bytes,
				(long long)f->want_size);
	if (f->want_sha[0] != '\0' && strcmp(hex, f->want_sha) != 0)
		return app_fail(err, APP_EIO, "the download's SHA-256 is %s, not %s", hex, f->want_sha);
	if (fsync(f->fd) != 0)
		return app_fail(err, APP_EIO, "fsync: %s", strerror(errno));
	if (model_meta_read(f->tmp, &m, err) != APP_OK)
		return APP_EIO;
	pthread_mutex_lock(&f->a->db_mu);
	int fits = model_base_fits(f->a->db, f->name, &m, f->tmp, f->base_id, err);
	pthread_mutex_unlock(&f->a->db_mu);
	if (fits != APP_OK) {
		model_meta_free(&m);
		return fits;
	}
	if (rename(f->tmp, f->final) != 0) {
		model_meta_free(&m);
		return app_fail(err, APP_EIO, "cannot move the download into place: %s", strerror(errno));
	}
	f->tmp[0] = '\0';
	pthread_mutex_lock(&f->a->db_mu);
	int ok =
		sqlite3_prepare_v2(f->a->db,
				   "UPDATE models SET state = 'ready', error = NULL, size_bytes = ?1, bytes_done = ?1, "
				   "sha256 = ?2, architecture = ?3, parameters = ?4, quantization = ?5, "
				   "context_length = ?6, n_layer = ?7, n_head = ?8, n_head_kv = ?9, head_dim = ?10, "
				   "tokenizer = ?11, chat_template = ?12, n_embd = ?13, n_vocab = ?14, kv_latent = "
				   "?15, weight_bytes = ?16, kind = ?18, lora_rank = ?19, lora_alpha = ?20 WHERE id = "
				   "?17",
				   -1, &st, NULL) == SQLITE_OK;
	if (ok) {
		sqlite3_bind_int64(st, 1, f->bytes);
		sqlite3_bind_text(st, 2, hex, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 3, m.architecture, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 4, m.parameters);
		sqlite3_bind_text(st, 5, m.quantization, -1, SQLITE_TRANSIENT);
		if (!m.lora) { /* an adapter's shape columns stay NULL */
			sqlite3_bind_int(st, 6, m.context_length);
			sqlite3_bind_int(st, 7, m.n_layer);
			sqlite3_bind_int(st, 8, m.n_head);
			sqlite3_bind_int(st, 9, m.n_head_kv);
			sqlite3_bind_int(st, 10, m.head_dim);
			sqlite3_bind_int(st, 13, m.n_embd);
			sqlite3_bind_int(st, 14, m.n_vocab);
		}
		sqlite3_bind_text(st, 11, m.tokenizer, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 12, m.chat_template, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int(st, 15, m.kv_latent);
		sqlite3_bind_int64(st, 16, m.weight_bytes);
		sqlite3_bind_int64(st, 17, f->id);
		sqlite3_bind_text(st, 18, m.lora ? "lora" : "model", -1, SQLITE_STATIC);
		if (m.lora) {
			sqlite3_bind_int(st, 19, m.lora_rank);
			sqlite3_bind_double(st, 20, m.lora_alpha);
		}
		ok = sqlite3_step(st) == SQLITE_DONE;
		sqlite3_finalize(st);
	}
	if (ok)
		audit_download(f, "ok", "sha256", hex);
	if (ok && m.lora) {
		/* the running deployments of its base serve it from now on */
		int busy;
		cJSON *sync = deploy_lora_sync(f->a, f->base_id, f->name, f->final, 1, &busy);
		const cJSON *fail;
		cJSON_ArrayForEach (fail, cJSON_GetObjectItem(sync, "failed"))
			log_warn("adapter %s: deployment %lld did not load it: %s", f->name,
				 (long long)cJSON_GetObjectItem(fail, "deployment")->valuedouble,
				 cJSON_GetObjectItem(fail, "error")->valuestring);
		cJSON_Delete(sync);
	}
	pthread_mutex_unlock(&f->a->db_mu);
	model_meta_free(&m);
	if (!ok) {
		unlink(f->final);
		return app_fail(err, APP_EIO, "database: could not record the model");
	}
	return 0;
}

static void *
fetch_main(void *arg)
{
	struct fetch *f = arg;
	char err[APP_ERR_LEN] = "";

	if (download(f, err) < 0 || finish(f, err) < 0) {
		if (f->tmp[0] != '\0')
			unlink(f->tmp);
		set_state(f, "failed", err);
	}
	close(f->fd);
	atomic_store(&f->done, 1);
	return NULL;
}

int
model_fetch_begin(struct admin *a, const char *name, const char *url, const char *sha, int64_t size, const char *pin,
		  const char *secret, int64_t base_id, int64_t now, int64_t reuse_id, int64_t *ret_id, char *err)
{
	struct fetch *f;
	sqlite3_stmt *st;

	if ((f = calloc(1, sizeof(*f))) == NULL)
		return app_fail(err, APP_ENOMEM, "out of memory");
	f->a = a;
	f->fd = -1;
	f->want_size = size;
	f->base_id = base_id;
	snprintf(f->name, sizeof(f->name), "%s", name);
	snprintf(f->url, sizeof(f->url), "%s", url);
	snprintf(f->want_sha, sizeof(f->want_sha), "%s", sha != NULL ? sha : "");
	snprintf(f->pin, sizeof(f->pin), "%s", pin != NULL ? pin : "");
	if (secret != NULL)
		snprintf(f->secret_hdr, sizeof(f->secret_hdr), "X-Privai-Node-Secret: %s", secret);
	if (str_fmt(f->final, sizeof(f->final), "%s/%s.gguf", a->models_dir, name) != APP_OK ||
	    str_fmt(f->tmp, sizeof(f->tmp), "%s/.download-XXXXXX", a->models_dir) != APP_OK) {
		free(f);
		return app_fail(err, APP_ERANGE, "the model file's path is too long");
	}
	crypto_hash_sha256_init(&f->h);
	if (access(f->final, F_OK) == 0) {
		free(f);
		return app_fail(err, APP_EBUSY, "a file %s.gguf is already in the model directory", name);
	}
	if (reuse_id > 0) {
		/* a failed fetch tried again: the row, and the deployments on it, stay */
		unlink(f->final);
		if (sqlite3_prepare_v2(a->db,
				       "UPDATE models SET state = 'importing', error = NULL, bytes_done = 0, "
				       "created_at = ?2 WHERE id = ?1 AND state = 'failed'",
				       -1, &st, NULL) != SQLITE_OK) {
			free(f);
			return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
		}
		sqlite3_bind_int64(st, 1, reuse_id);
		sqlite3_bind_int64(st, 2, now);
	} else if (access(f->final, F_OK) == 0) {
		free(f);
		return app_fail(err, APP_EBUSY, "a file %s.gguf is already in the model directory", name);
	} else if (sqlite3_prepare_v2(a->db,
				      "INSERT INTO models (name, path, size_bytes, architecture, source, url, "
				      "state, created_at, base_model_id) VALUES (?1, ?2, ?3, '', 'url', ?4, "
				      "'importing', "
				      "?5, ?6)",
				      -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, f->final, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 3, size > 0 ? size : 0);
		sqlite3_bind_text(st, 4, url, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(st, 5, now);
		if (base_id > 0)
			sqlite3_bind_int64(st, 6, base_id);
	} else {
		free(f);
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	}
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE || sqlite3_changes(a->db) != 1) {
		free(f);
		if (rc == SQLITE_CONSTRAINT)
			return model_name_clash(a->db, name, err);
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	}
	f->id = reuse_id > 0 ? reuse_id : sqlite3_last_insert_rowid(a->db);
	if ((f->fd = mkstemp(f->tmp)) < 0 || pthread_create(&f->thread, NULL, fetch_main, f) != 0) {
		app_fail(err, APP_EIO, "cannot start the download: %s", strerror(errno));
		if (f->fd >= 0) {
			close(f->fd);
			unlink(f->tmp);
		}
		if (reuse_id == 0 && db_delete_id(a->db, "models", f->id) < 0)
			log_warn("model %lld: the download never started and its row stays 'importing': %s",
				 (long long)f->id, sqlite3_errmsg(a->db));
		free(f);
		return APP_EIO;
	}
	pthread_mutex_lock(&a->fetch_mu);
	f->next = a->fetches;
	a->fetches = f;
	pthread_mutex_unlock(&a->fetch_mu);
	*ret_id = f->id;
	return APP_OK;
}

int
model_fetch_cancel(struct admin *a, int64_t id)
{
	int running = 0;

	pthread_mutex_lock(&a->fetch_mu);
	for (struct fetch *f = a->fetches; f != NULL; f = f->next)
		if (f->id == id && !atomic_load(&f->done)) {
			atomic_store(&f->cancel, 1);
			running = 1;
		}
	pthread_mutex_unlock(&a->fetch_mu);
	return running;
}

void
model_fetch_shutdown(struct admin *a)
{
	pthread_mutex_lock(&a->fetch_mu);
	struct fetch *list = a->fetches;
	a->fetches = NULL;
	for (struct fetch *f = list; f != NULL; f = f->next)
		atomic_store(&f->cancel, 1);
	pthread_mutex_unlock(&a->fetch_mu);
	while (list != NULL) {
		struct fetch *next = list->next;
		pthread_join(list->thread, NULL);
		free(list);
		list = next;
	}
}
