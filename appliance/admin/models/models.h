/*
 * Model rows shared by the three ways a model arrives: a path on the
 * appliance, an upload (both api/models.c, and api/uploads.c resumable)
 * and a download from a server the admin allows (models/download.c).
 */
#ifndef PRIVAI_ADMIN_MODELS_H
#define PRIVAI_ADMIN_MODELS_H

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdint.h>

#include "models/meta.h"

struct admin;

/* 1-128 of letters, digits, '.', '_', ':', '-', not starting with '.' or
 * '-': safe as a file name and in a URL. */
int model_name_ok(const char *name);

/* Insert a ready model; base_id is the model a LoRA adapter adapts (from
 * model_base_check; 0 for a model).  APP_EBUSY when the name is taken. */
int model_insert(sqlite3 *db, const char *name, const char *path, const char *source, int64_t size, const char *sha256,
		 const struct model_meta *m, int64_t base_id, int64_t now, int64_t *ret_id, char *err);

/* The rules for a file about to become model name: a LoRA adapter (m->lora)
 * names its base (a ready model's name or id) and fits it
 * (model_lora_fits on file), and its name is one an engine serves (no
 * ':'), and the base has fewer than ADAPTERS_MAX; a model names none.
 * *base_id gets the base's id, 0 for a model.  APP_EINVAL, APP_ERANGE or
 * APP_EFORMAT with err saying which rule.  The caller holds the store's
 * mutex. */
int model_base_check(sqlite3 *db, const char *name, const struct model_meta *m, const char *file, const char *base,
		     int64_t *base_id, char *err);
/* The same rules with the base already found: base_id, 0 for none. */
int model_base_fits(sqlite3 *db, const char *name, const struct model_meta *m, const char *file, int64_t base_id,
		    char *err);

/* A ready model's id by its name or id (a name first), and whether it is
 * a LoRA adapter: APP_OK, APP_ENOTFOUND or APP_EIO. */
int model_find(sqlite3 *db, const char *name_or_id, int64_t *id, int *is_adapter);

/* APP_EBUSY with err saying why an insert of name hit a constraint:
 * a model of that name, or an upload that reserves it. */
int model_name_clash(sqlite3 *db, const char *name, char *err);

/* At most this many LoRA adapters adapt one model: what one engine serves
 * (ENGINE_MAX_LORA). */
#define ADAPTERS_MAX 16

/* At most this many uploads are under way at once (api/uploads.c). */
#define UPLOADS_MAX 16

/* The background hasher of models registered by path (models/hash.c):
 * start it, tell it a model was registered, stop it (waits). */
int model_hash_start(struct admin *a, char *err);
void model_hash_kick(struct admin *a);
void model_hash_stop(struct admin *a);

/* 64 lowercase hex digits of a SHA-256, or 0. */
int sha256_hex_ok(const char *s);

/* host or host:port of an http(s) url, lowercased, in out; APP_EINVAL when the
 * url does not parse or has another scheme. */
int model_url_host(const char *url, char *out, size_t size);
/* 1 when host is in the model_url_hosts setting (the caller holds the
 * store's mutex). */
int model_url_host_allowed(sqlite3 *db, const char *host);
/* Insert an 'importing' row for name and download url into the model
 * directory in the background, checking size (when >= 0) and sha (when
 * not NULL or "") before the row is made ready.  pin and secret are for
 * a fetch from the leader (cluster/remote.h); reuse_id > 0 fetches again into
 * that failed row.  base_id > 0: the file must be a LoRA adapter of that
 * model (model_base_fits, when it has arrived).  The caller holds the
 * store's mutex; APP_EBUSY when the name or its file is taken. */
int model_fetch_begin(struct admin *a, const char *name, const char *url, const char *sha, int64_t size,
		      const char *pin, const char *secret, int64_t base_id, int64_t now, int64_t reuse_id,
		      int64_t *ret_id, char *err);
/* Ask a running download of model id to stop; 1 if one was running. */
int model_fetch_cancel(struct admin *a, int64_t id);
/* Stop every download and wait for them (shutdown). */
void model_fetch_shutdown(struct admin *a);

struct model_shape;
/* A ready model's shape for sizing (gpu/sizing.h) and its name: APP_OK,
 * APP_ENOTFOUND (no such ready model), APP_EINVAL (a LoRA adapter, sized
 * with its base) or APP_EIO. */
int model_shape_of(sqlite3 *db, int64_t id, struct model_shape *ret, char *name, size_t name_size);

#endif
