/*
 * LoRA adapters of a deployment's model, on a member: the leader lists
 * them with each deployment it places here ("model": {"adapters": [...]},
 * leader.c), and the member keeps a copy of each, adapting its own copy
 * of the model: fetched from the leader like the model (with base_model_id
 * set, so it is checked against the local base when it arrives and the
 * running engines load it), and deleted (after its engines unload it)
 * once the leader no longer lists it.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "jsonnum.h"
#include "strfmt.h"
#include "admin.h"
#include "log.h"
#include "store/db.h"
#include "models/models.h"
#include "deploy/deployments.h"
#include "cluster/remote.h"

/* The leader's URL of its model id's file, for this node. */
static int
file_url(const struct membership *ms, int64_t id, char *out, size_t size)
{
	return str_fmt(out, size, "%s/api/v1/nodes/%lld/models/%lld/file", ms->leader, (long long)ms->node_id,
		       (long long)id);
}

/* One listed adapter: fetched when this node has no copy, again a while
 * after a fetch failed.  0, or -1 with why. */
static int
ensure_adapter(struct admin *a, const struct membership *ms, const cJSON *e, int64_t base_id, int64_t now, char *err)
{
	const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
	const cJSON *shav = cJSON_GetObjectItemCaseSensitive(e, "sha256");
	const char *sha = cJSON_GetStringValue(shav);
	int64_t id = 0, size = 0, local = 0, created = 0;
	char url[512], state[16] = "", why[APP_ERR_LEN];
	sqlite3_stmt *st;

	if (json_int_in(cJSON_GetObjectItemCaseSensitive(e, "id"), 1, INT64_C(1) << 53, &id) < 0 ||
	    json_int_in(cJSON_GetObjectItemCaseSensitive(e, "size_bytes"), 1, a->cfg.max_upload_bytes, &size) < 0 ||
	    name == NULL || !model_name_ok(name) || (!cJSON_IsNull(shav) && !sha256_hex_ok(sha)))
		return app_fail(err, APP_EINVAL, "an adapter must have an id, a name, a SHA-256 or null, and a size");
	if (file_url(ms, id, url, sizeof(url)) != APP_OK)
		return app_fail(err, APP_ERANGE, "the leader's URL is too long");
	/* a fetch under way or failed is a row of kind 'model' until the
	 * file is in and checked: found by its URL */
	if (sqlite3_prepare_v2(a->db,
			       "SELECT id, state, created_at FROM models WHERE url = ?1 ORDER BY state = 'ready' DESC "
			       "LIMIT 1",
			       -1, &st, NULL) != SQLITE_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(a->db));
	sqlite3_bind_text(st, 1, url, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW) {
		local = sqlite3_column_int64(st, 0);
		snprintf(state, sizeof(state), "%s", (const char *)sqlite3_column_text(st, 1));
		created = sqlite3_column_int64(st, 2);
	}
	sqlite3_finalize(st);
	int rc = APP_OK;
	if (local == 0)
		rc = model_fetch_begin(a, name, url, sha, size, ms->pin, ms->secret, base_id, now, 0, &local, why);
	else if (strcmp(state, "failed") == 0 && created < now - MEMBER_FETCH_RETRY_S)
		rc = model_fetch_begin(a, name, url, sha, size, ms->pin, ms->secret, base_id, now, local, &local, why);
	if (rc == APP_EBUSY)
		return app_fail(err, APP_EINVAL,
				"adapter '%s': a model of that name is on this node already; the engine serves the "
				"adapter by that name, so rename or delete the other there",
				name);
	return rc == APP_OK ? 0 : app_fail(err, APP_EIO, "cannot fetch adapter '%s': %s", name, why);
}

/* Adapters of base_id fetched from the leader that it lists no more:
 * unloaded from the running engines, then deleted with their files.  One
 * still in use, or still arriving, stays until a later heartbeat. */
static void
drop_unlisted_adapters(struct admin *a, const struct membership *ms, const cJSON *list, int64_t base_id)
{
	char prefix[400], url[512];
	sqlite3_stmt *st;
	int64_t drop[ADAPTERS_MAX];
	char names[ADAPTERS_MAX][160], paths[ADAPTERS_MAX][4200];
	int n = 0;

	if (str_fmt(prefix, sizeof(prefix), "%s/api/v1/nodes/%lld/models/", ms->leader, (long long)ms->node_id) !=
		    APP_OK ||
	    sqlite3_prepare_v2(a->db,
			       "SELECT id, url, name, path FROM models WHERE base_model_id = ?1 AND source = 'url' AND "
			       "state != 'importing' AND substr(url, 1, length(?2)) = ?2",
			       -1, &st, NULL) != SQLITE_OK)
		return;
	sqlite3_bind_int64(st, 1, base_id);
	sqlite3_bind_text(st, 2, prefix, -1, SQLITE_TRANSIENT);
	while (sqlite3_step(st) == SQLITE_ROW && n < ADAPTERS_MAX) {
		const cJSON *e;
		int listed = 0;
		cJSON_ArrayForEach (e, list) {
			int64_t id = 0;
			if (json_int_in(cJSON_GetObjectItemCaseSensitive(e, "id"), 1, INT64_C(1) << 53, &id) == 0 &&
			    file_url(ms, id, url, sizeof(url)) == APP_OK &&
			    strcmp(url, (const char *)sqlite3_column_text(st, 1)) == 0)
				listed = 1;
		}
		if (listed ||
		    str_fmt(paths[n], sizeof(paths[n]), "%s", (const char *)sqlite3_column_text(st, 3)) != APP_OK)
			continue;
		drop[n] = sqlite3_column_int64(st, 0);
		snprintf(names[n], sizeof(names[n]), "%s", (const char *)sqlite3_column_text(st, 2));
		n++;
	}
	sqlite3_finalize(st);
	for (int i = 0; i < n; i++) {
		int busy;
		cJSON *sync = deploy_lora_sync(a, base_id, names[i], NULL, 0, &busy);
		int held = sync == NULL || cJSON_GetArraySize(cJSON_GetObjectItem(sync, "failed")) > 0;
		cJSON_Delete(sync);
		if (held || db_delete_id(a->db, "models", drop[i]) < 0) {
			log_warn("adapter %s: the leader dropped it, but it stays until its engines let it go",
				 names[i]);
			continue;
		}
		unlink(paths[i]);
	}
}

int
member_sync_adapters(struct admin *a, const struct membership *ms, const cJSON *list, int64_t base_id, int64_t now,
		     char *err)
{
	const cJSON *e;
	int rc = 0;

	if (list == NULL)
		return 0; /* a leader from before adapters */
	if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) > ADAPTERS_MAX)
		return app_fail(err, APP_EINVAL, "model.adapters must be an array of at most %d", ADAPTERS_MAX);
	/* the copies are checked against the local base, so it comes first */
	if (db_int64(a->db, "SELECT state = 'ready' FROM models WHERE id = ?1", base_id, 0) != 1)
		return 0;
	drop_unlisted_adapters(a, ms, list, base_id);
	cJSON_ArrayForEach (e, list)
		if (ensure_adapter(a, ms, e, base_id, now, err) < 0)
			rc = -1; /* the others are still fetched */
	return rc;
}
