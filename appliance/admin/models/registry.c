/*
 * The models table's rules, whichever way a model arrives (a path, an
 * upload, a download, a leader's spec on a member, day 0): the name, the
 * digest's form, the insert and why it clashed (models/models.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "strfmt.h"
#include "store/db.h"
#include "models/models.h"
#include "gpu/sizing.h"

int
model_name_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= 128 && s[0] != '.' && s[0] != '-' &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") == n;
}

int
model_name_clash(sqlite3 *db, const char *name, char *err)
{
	/* the reservation trigger's message (schema 6), or a second model */
	if (strstr(sqlite3_errmsg(db), "reserved by an upload") != NULL)
		return app_fail(err, APP_EBUSY, "the name '%s' is reserved by an upload under way", name);
	return app_fail(err, APP_EBUSY, "a model named '%s' exists", name);
}

int
model_find(sqlite3 *db, const char *name_or_id, int64_t *id, int *is_adapter)
{
	sqlite3_stmt *st;
	int rc = APP_ENOTFOUND;
	char *end;
	long long n = strtoll(name_or_id, &end, 10);

	if (sqlite3_prepare_v2(db,
			       "SELECT id, kind = 'lora' FROM models WHERE (name = ?1 OR id = ?2) AND state = 'ready' "
			       "ORDER BY name = ?1 DESC LIMIT 1",
			       -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	sqlite3_bind_text(st, 1, name_or_id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 2, *end == '\0' && end != name_or_id ? n : -1);
	if (sqlite3_step(st) == SQLITE_ROW) {
		*id = sqlite3_column_int64(st, 0);
		*is_adapter = sqlite3_column_int(st, 1);
		rc = APP_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

int
model_base_fits(sqlite3 *db, const char *name, const struct model_meta *m, const char *file, int64_t base_id, char *err)
{
	char path[4096] = "", kind[16] = "", base[160] = "";
	sqlite3_stmt *st;
	int n_adapters = 0, rc;
	size_t n = strlen(name);

	if (!m->lora)
		return base_id <= 0 ? APP_OK
				    : app_fail(err, APP_EINVAL,
					       "base_model is for LoRA adapters; this file is a model (no general.type "
					       "adapter)");
	if (base_id <= 0)
		return app_fail(err, APP_EINVAL, "this file is a LoRA adapter: name the model it adapts in base_model");
	/* the engine serves it by this name, and reads "BASE:NAME" as one */
	if (n > 64 || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
		return app_fail(err, APP_EINVAL,
				"an adapter's name is 1-64 letters, digits, '.', '_' or '-' (the engine serves it by "
				"name, and reads 'base:name' as a base and an adapter)");
	if (sqlite3_prepare_v2(db,
			       "SELECT path, kind, name, (SELECT count(*) FROM models l WHERE l.base_model_id = m.id) "
			       "FROM models m WHERE id = ? AND state = 'ready'",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	sqlite3_bind_int64(st, 1, base_id);
	/* a path that does not fit is taken as no base */
	if (sqlite3_step(st) == SQLITE_ROW &&
	    str_fmt(path, sizeof(path), "%s", (const char *)sqlite3_column_text(st, 0)) == APP_OK) {
		snprintf(kind, sizeof(kind), "%s", (const char *)sqlite3_column_text(st, 1));
		snprintf(base, sizeof(base), "%s", (const char *)sqlite3_column_text(st, 2));
		n_adapters = sqlite3_column_int(st, 3);
	}
	sqlite3_finalize(st);
	if (path[0] == '\0')
		return app_fail(err, APP_EINVAL, "no ready model %lld to adapt", (long long)base_id);
	if (strcmp(kind, "model") != 0)
		return app_fail(err, APP_EINVAL, "'%s' is itself an adapter; an adapter adapts a model", base);
	if (n_adapters >= ADAPTERS_MAX)
		return app_fail(err, APP_ERANGE, "'%s' has %d adapters, the most one engine serves", base, n_adapters);
	char why[APP_ERR_LEN];
	if ((rc = model_lora_fits(file, path, why)) != APP_OK)
		return app_fail(err, rc == APP_EIO ? rc : APP_EFORMAT, "the adapter does not fit '%s': %s", base, why);
	return APP_OK;
}

int
model_base_check(sqlite3 *db, const char *name, const struct model_meta *m, const char *file, const char *base,
		 int64_t *base_id, char *err)
{
	int is_adapter;

	*base_id = 0;
	if (base != NULL && base[0] != '\0' && model_find(db, base, base_id, &is_adapter) != APP_OK)
		return app_fail(err, APP_EINVAL, "no ready model '%s' to adapt", base);
	int rc = model_base_fits(db, name, m, file, *base_id, err);
	if (rc != APP_OK)
		*base_id = 0;
	return rc;
}

int
model_insert(sqlite3 *db, const char *name, const char *path, const char *source, int64_t size, const char *sha256,
	     const struct model_meta *m, int64_t base_id, int64_t now, int64_t *ret_id, char *err)
{
	sqlite3_stmt *st;

	if (m->lora && base_id <= 0)
		return app_fail(err, APP_EINVAL, "'%s' is a LoRA adapter and needs the model it adapts", name);
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO models (name, path, size_bytes, sha256, architecture, parameters, "
			       "quantization, context_length, n_layer, n_head, n_head_kv, head_dim, tokenizer, "
			       "chat_template, source, created_at, n_embd, n_vocab, kv_latent, weight_bytes, state, "
			       "kind, base_model_id, lora_rank, lora_alpha) "
			       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
			       "?18, ?19, ?20, 'ready', ?21, ?22, ?23, ?24)",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, size);
	sqlite3_bind_text(st, 4, sha256, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 5, m->architecture, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 6, m->parameters);
	sqlite3_bind_text(st, 7, m->quantization, -1, SQLITE_TRANSIENT);
	/* an adapter has no shape of its own: those columns stay NULL */
	if (!m->lora) {
		sqlite3_bind_int(st, 8, m->context_length);
		sqlite3_bind_int(st, 9, m->n_layer);
		sqlite3_bind_int(st, 10, m->n_head);
		sqlite3_bind_int(st, 11, m->n_head_kv);
		sqlite3_bind_int(st, 12, m->head_dim);
		sqlite3_bind_int(st, 17, m->n_embd);
		sqlite3_bind_int(st, 18, m->n_vocab);
	}
	sqlite3_bind_text(st, 13, m->tokenizer, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 14, m->chat_template, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 15, source, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 16, now);
	sqlite3_bind_int(st, 19, m->kv_latent);
	sqlite3_bind_int64(st, 20, m->weight_bytes);
	sqlite3_bind_text(st, 21, m->lora ? "lora" : "model", -1, SQLITE_STATIC);
	if (m->lora) {
		sqlite3_bind_int64(st, 22, base_id);
		sqlite3_bind_int(st, 23, m->lora_rank);
		sqlite3_bind_double(st, 24, m->lora_alpha);
	}
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_CONSTRAINT)
		return model_name_clash(db, name, err);
	if (rc != SQLITE_DONE)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	*ret_id = sqlite3_last_insert_rowid(db);
	return APP_OK;
}

int
sha256_hex_ok(const char *s)
{
	return s != NULL && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

int
model_shape_of(sqlite3 *db, int64_t id, struct model_shape *ret, char *name, size_t name_size)
{
	sqlite3_stmt *st;
	int rc = APP_ENOTFOUND;

	if (sqlite3_prepare_v2(db,
			       "SELECT name, coalesce(weight_bytes, size_bytes), n_layer, n_head, n_head_kv, "
			       "head_dim, kv_latent, context_length, kind FROM models WHERE id = ? AND state = 'ready'",
			       -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) == SQLITE_ROW &&
	    str_fmt(name, name_size, "%s", (const char *)sqlite3_column_text(st, 0)) == APP_OK) {
		ret->weight_bytes = (double)sqlite3_column_int64(st, 1);
		ret->layers = sqlite3_column_int(st, 2);
		ret->heads = sqlite3_column_int(st, 3);
		ret->kv_heads = sqlite3_column_int(st, 4);
		ret->head_dim = sqlite3_column_int(st, 5);
		ret->kv_latent = sqlite3_column_int(st, 6);
		ret->max_context = sqlite3_column_int(st, 7);
		rc = strcmp((const char *)sqlite3_column_text(st, 8), "lora") == 0 ? APP_EINVAL : APP_OK;
	}
	sqlite3_finalize(st);
	return rc;
}
