/* Stored MIG layouts applied through NVML, at a change and at boot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "admin.h"
#include "log.h"
#include "store/db.h"
#include "gpu/gpu_store.h"
#include "gpu/mig.h"
#include "gpu/mig_apply.h"
#include "gpu/nvml.h"

struct gpu_row {
	char uuid[96];
	char table[32];
	int mig_enabled;
	char *instances; /* JSON as NVML last reported */
};

static int
load_gpu(sqlite3 *db, int64_t gpu_id, struct gpu_row *g)
{
	sqlite3_stmt *st;
	int found = 0;

	memset(g, 0, sizeof(*g));
	if (sqlite3_prepare_v2(db, "SELECT uuid, mig_table, mig_enabled, instances FROM gpus WHERE id = ?1", -1, &st,
			       NULL) != SQLITE_OK)
		return APP_ENOTFOUND;
	sqlite3_bind_int64(st, 1, gpu_id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		found = 1;
		snprintf(g->uuid, sizeof(g->uuid), "%s", (const char *)sqlite3_column_text(st, 0));
		snprintf(g->table, sizeof(g->table), "%s",
			 sqlite3_column_text(st, 1) ? (const char *)sqlite3_column_text(st, 1) : "");
		g->mig_enabled = sqlite3_column_int(st, 2);
		g->instances = strdup((const char *)sqlite3_column_text(st, 3));
	}
	sqlite3_finalize(st);
	return found && g->instances != NULL ? APP_OK : APP_ENOTFOUND;
}

int
mig_layout_load(sqlite3 *db, int64_t gpu_id, const struct mig_gpu *t, struct mig_instance *in)
{
	sqlite3_stmt *st;
	int n = 0;

	if (sqlite3_prepare_v2(db,
			       "SELECT profile, start_slice FROM gpu_partitions WHERE gpu_id = ?1 "
			       "ORDER BY start_slice",
			       -1, &st, NULL) != SQLITE_OK)
		return 0;
	sqlite3_bind_int64(st, 1, gpu_id);
	while (sqlite3_step(st) == SQLITE_ROW && n < MIG_MAX_INSTANCES) {
		in[n].profile = mig_profile_find(t, (const char *)sqlite3_column_text(st, 0));
		in[n].start = sqlite3_column_int(st, 1);
		n += in[n].profile != NULL;
	}
	sqlite3_finalize(st);
	return n;
}

int
mig_layout_store(sqlite3 *db, int64_t gpu_id, const struct mig_instance *in, int n)
{
	sqlite3_stmt *st = NULL;

	if (db_begin(db) < 0)
		return APP_EIO;
	if (sqlite3_prepare_v2(db, "DELETE FROM gpu_partitions WHERE gpu_id = ?1", -1, &st, NULL) != SQLITE_OK)
		goto fail;
	sqlite3_bind_int64(st, 1, gpu_id);
	if (sqlite3_step(st) != SQLITE_DONE)
		goto fail;
	sqlite3_finalize(st);
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO gpu_partitions (gpu_id, profile, start_slice, state) "
			       "VALUES (?1, ?2, ?3, 'planned')",
			       -1, &st, NULL) != SQLITE_OK)
		goto fail;
	for (int i = 0; i < n; i++) {
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, gpu_id);
		sqlite3_bind_text(st, 2, in[i].profile->name, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 3, in[i].start);
		if (sqlite3_step(st) != SQLITE_DONE)
			goto fail;
	}
	sqlite3_finalize(st);
	return db_commit(db);
fail:
	sqlite3_finalize(st);
	db_rollback(db);
	return APP_EIO;
}

/* Does NVML's reported list (JSON) hold exactly these instances? */
static int
same_layout(const char *reported, const struct nvml_instance *want, int n)
{
	cJSON *a = cJSON_Parse(reported), *e;
	int same = cJSON_IsArray(a) && cJSON_GetArraySize(a) == n;
	cJSON *list = same ? a : NULL;

	cJSON_ArrayForEach (e, list) {
		int id = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "profile_id"));
		int start = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "start"));
		int found = 0;
		for (int i = 0; i < n && !found; i++)
			found = want[i].profile_id == id && want[i].start == start;
		same = same && found;
	}
	cJSON_Delete(a);
	return same;
}

static void
record(sqlite3 *db, int64_t gpu_id, const char *state, const char *error)
{
	sqlite3_stmt *st;
	char err[APP_ERR_LEN];

	if (db_prepare(db, "UPDATE gpu_partitions SET state = ?2, error = ?3 WHERE gpu_id = ?1", &st, NULL) == APP_OK) {
		sqlite3_bind_int64(st, 1, gpu_id);
		sqlite3_bind_text(st, 2, state, -1, SQLITE_STATIC);
		if (error != NULL)
			sqlite3_bind_text(st, 3, error, -1, SQLITE_TRANSIENT);
	}
	/* the layout stays as NVML left it; only its report is lost */
	if (db_write(db, st, err) != APP_OK)
		log_warn("GPU %lld: MIG state %s not recorded: %s", (long long)gpu_id, state, err);
}

struct inventory {
	int64_t node_id;
	const cJSON *gpus;
};

static int
store_inventory(sqlite3 *db, void *arg, char *err)
{
	const struct inventory *inv = arg;

	return gpu_store_sync(db, inv->node_id, inv->gpus, admin_now(), err);
}

/* NVML's instances, read again after a change, into the GPU rows. */
static void
refresh_inventory(struct admin *a)
{
	char note[APP_ERR_LEN], err[APP_ERR_LEN];
	cJSON *gpus = gpu_inventory_json(note);

	struct inventory inv = { a->self_node_id, gpus };

	if (gpus != NULL && note[0] == '\0' && db_transaction(a->db, store_inventory, &inv, err) != APP_OK)
		log_warn("the GPUs read again after a MIG change were not stored: %s", err);
	cJSON_Delete(gpus);
}

static int
apply(struct admin *a, int64_t gpu_id, int only_if_different, char *err)
{
	struct nvml_instance want[NVML_MAX_INSTANCES];
	struct mig_instance in[MIG_MAX_INSTANCES];
	struct gpu_row g;
	const struct mig_gpu *t;
	int n, rc;

	if (load_gpu(a->db, gpu_id, &g) < 0) {
		free(g.instances);
		return app_fail(err, APP_ENOTFOUND, "GPU %lld not found", (long long)gpu_id);
	}
	if ((t = mig_gpu_find(g.table)) == NULL) {
		free(g.instances);
		return app_fail(err, APP_EUNSUPPORTED, "GPU %s has no MIG table", g.uuid);
	}
	n = mig_layout_load(a->db, gpu_id, t, in);
	for (int i = 0; i < n; i++)
		want[i] = (struct nvml_instance){ .profile_id = in[i].profile->nvml_id,
						  .start = in[i].start,
						  .size = in[i].profile->size };
	if (only_if_different && same_layout(g.instances, want, n)) {
		free(g.instances);
		record(a->db, gpu_id, "applied", NULL);
		return 1;
	}
	free(g.instances);
	rc = nvml_apply_layout(g.uuid, want, n, err);
	/* after NVML is done, so a report read since shows the change; one
	 * read before is read again when stored (cluster/nodes.h) */
	atomic_fetch_add(&a->gpu_epoch, 1);
	record(a->db, gpu_id, rc == APP_OK ? "applied" : "failed", rc == APP_OK ? NULL : err);
	refresh_inventory(a);
	return rc;
}

int
mig_apply_gpu(struct admin *a, int64_t gpu_id, char *err)
{
	return apply(a, gpu_id, 0, err);
}

void
mig_reapply(struct admin *a, int *applied, int *failed)
{
	int64_t ids[NVML_MAX_GPUS];
	char err[APP_ERR_LEN];
	sqlite3_stmt *st;
	int n = 0;

	*applied = *failed = 0;
	pthread_mutex_lock(&a->db_mu);
	if (sqlite3_prepare_v2(a->db,
			       "SELECT DISTINCT g.id FROM gpus g JOIN gpu_partitions p ON p.gpu_id = g.id "
			       "WHERE g.node_id = ?1 ORDER BY g.id",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, a->self_node_id);
		while (sqlite3_step(st) == SQLITE_ROW && n < NVML_MAX_GPUS)
			ids[n++] = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	for (int i = 0; i < n; i++) {
		int rc = apply(a, ids[i], 1, err);
		if (rc == APP_OK)
			(*applied)++;
		else if (rc < 0)
			(*failed)++;
	}
	pthread_mutex_unlock(&a->db_mu);
}
