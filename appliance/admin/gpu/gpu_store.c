/* A node's GPU inventory: read from NVML, checked, stored. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "gpu/gpu_store.h"
#include "gpu/mig.h"

#define MAX_GPUS_PER_NODE 64

cJSON *
gpu_instances_json(const char *mig_table, const struct nvml_instance *in, int n)
{
	const struct mig_gpu *g = mig_table != NULL ? mig_gpu_find(mig_table) : NULL;
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; a != NULL && i < n; i++) {
		const struct mig_profile *p = g != NULL ? mig_profile_by_id(g, in[i].profile_id) : NULL;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "profile_id", in[i].profile_id);
		if (p != NULL)
			cJSON_AddStringToObject(o, "profile", p->name);
		cJSON_AddNumberToObject(o, "start", in[i].start);
		cJSON_AddNumberToObject(o, "size", in[i].size);
		if (in[i].uuid[0] != '\0')
			cJSON_AddStringToObject(o, "uuid", in[i].uuid);
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

cJSON *
gpu_inventory_json(char *note)
{
	static struct nvml_gpu g[NVML_MAX_GPUS];
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* g is large: one copy, guarded */
	cJSON *a = cJSON_CreateArray();
	int n = 0;

	if (a == NULL)
		return NULL;
	pthread_mutex_lock(&mu);
	if (nvml_inventory(g, NVML_MAX_GPUS, &n, note) != APP_OK)
		n = 0;
	else
		note[0] = '\0';
	for (int i = 0; i < n; i++) {
		const struct mig_gpu *t = mig_gpu_for_device(g[i].name, g[i].memory_bytes);
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "index", g[i].index);
		cJSON_AddStringToObject(o, "uuid", g[i].uuid);
		cJSON_AddStringToObject(o, "name", g[i].name);
		cJSON_AddNumberToObject(o, "memory_bytes", (double)g[i].memory_bytes);
		cJSON_AddStringToObject(o, "pci_bus_id", g[i].pci_bus_id);
		cJSON_AddBoolToObject(o, "mig_supported", g[i].mig_supported && t != NULL);
		cJSON_AddBoolToObject(o, "mig_enabled", g[i].mig_current);
		cJSON_AddItemToObject(o, "instances",
				      gpu_instances_json(t ? t->name : NULL, g[i].inst, g[i].n_instances));
		cJSON_AddItemToArray(a, o);
	}
	pthread_mutex_unlock(&mu);
	return a;
}

/* A string member of 1..max-1 printable characters, or NULL. */
static const char *
str_member(const cJSON *o, const char *name, size_t max)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	const char *s = cJSON_GetStringValue(v);

	if (s == NULL || *s == '\0' || strlen(s) >= max)
		return NULL;
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return NULL;
	return s;
}

static int
num_member(const cJSON *o, const char *name, double lo, double hi, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
	    v->valuedouble != (double)(int64_t)v->valuedouble)
		return APP_EINVAL;
	*out = v->valuedouble;
	return 0;
}

/* Check one reported instance list against the GPU's MIG table. */
static int
instances_ok(const cJSON *inst, const char *table, int gi, char *err)
{
	const struct mig_gpu *t = table != NULL ? mig_gpu_find(table) : NULL;
	const cJSON *e;
	int i = 0;

	if (inst == NULL)
		return 0;
	if (!cJSON_IsArray(inst) || cJSON_GetArraySize(inst) > NVML_MAX_INSTANCES)
		return app_fail(err, APP_EINVAL, "gpus[%d].instances must be an array of at most %d", gi,
				NVML_MAX_INSTANCES);
	cJSON_ArrayForEach (e, inst) {
		double id, start, size;
		const cJSON *uuid = cJSON_GetObjectItemCaseSensitive(e, "uuid");
		if (num_member(e, "profile_id", 0, 64, &id) < 0 || num_member(e, "start", 0, 7, &start) < 0 ||
		    num_member(e, "size", 1, 8, &size) < 0 || (t != NULL && mig_profile_by_id(t, (int)id) == NULL))
			return app_fail(err, APP_EINVAL,
					"gpus[%d].instances[%d] needs a known profile_id, start "
					"0..7 and size 1..8",
					gi, i);
		/* what a placement names and CUDA_VISIBLE_DEVICES takes */
		if (uuid != NULL && (str_member(e, "uuid", 96) == NULL || strncmp(uuid->valuestring, "MIG-", 4) != 0))
			return app_fail(err, APP_EINVAL,
					"gpus[%d].instances[%d].uuid must be a MIG-... UUID under "
					"96 characters",
					gi, i);
		i++;
	}
	return 0;
}

int
gpu_store_sync(sqlite3 *db, int64_t node_id, const cJSON *gpus, int64_t now, char *err)
{
	const cJSON *g;
	sqlite3_stmt *up = NULL, *del = NULL;
	int i = 0, rc = APP_OK;

	if (!cJSON_IsArray(gpus) || cJSON_GetArraySize(gpus) > MAX_GPUS_PER_NODE)
		return app_fail(err, APP_EINVAL, "gpus must be an array of at most %d GPUs", MAX_GPUS_PER_NODE);
	if (sqlite3_prepare_v2(
		    db,
		    "INSERT INTO gpus (node_id, idx, uuid, name, memory_bytes, pci_bus_id, mig_supported, "
		    "mig_enabled, mig_table, instances, seen_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
		    "?11) ON CONFLICT (uuid) DO UPDATE SET node_id = ?1, idx = ?2, name = ?4, memory_bytes = ?5, "
		    "pci_bus_id = ?6, mig_supported = ?7, mig_enabled = ?8, mig_table = ?9, instances = ?10, "
		    "seen_at = ?11 WHERE gpus.node_id = ?1",
		    -1, &up, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "DELETE FROM gpus WHERE node_id = ?1 AND seen_at IS NULL", -1, &del, NULL) !=
		    SQLITE_OK) {
		rc = app_fail(err, APP_EIO, "store: %s", sqlite3_errmsg(db));
		goto out;
	}
	/* the GPU at an index may have changed: free the indexes first; a GPU
	 * not reported again keeps seen_at NULL and is deleted at the end */
	sqlite3_stmt *clear = NULL;
	if (sqlite3_prepare_v2(db, "UPDATE gpus SET idx = -1 - id, seen_at = NULL WHERE node_id = ?1", -1, &clear,
			       NULL) != SQLITE_OK ||
	    sqlite3_bind_int64(clear, 1, node_id) != SQLITE_OK || sqlite3_step(clear) != SQLITE_DONE) {
		sqlite3_finalize(clear);
		rc = app_fail(err, APP_EIO, "store: %s", sqlite3_errmsg(db));
		goto out;
	}
	sqlite3_finalize(clear);
	cJSON_ArrayForEach (g, gpus) {
		const char *uuid = str_member(g, "uuid", 96), *name = str_member(g, "name", 96);
		const char *bus = str_member(g, "pci_bus_id", 32);
		const cJSON *inst = cJSON_GetObjectItemCaseSensitive(g, "instances");
		double idx, mem;
		if (!cJSON_IsObject(g) || uuid == NULL || name == NULL || num_member(g, "index", 0, 63, &idx) < 0 ||
		    num_member(g, "memory_bytes", 0, 1e15, &mem) < 0) {
			rc = app_fail(err, APP_EINVAL,
				      "gpus[%d] needs uuid and name (strings under 96 characters), "
				      "index 0..63 and memory_bytes",
				      i);
			goto out;
		}
		int mig_sup = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "mig_supported"));
		int mig_on = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "mig_enabled"));
		const struct mig_gpu *t = mig_sup ? mig_gpu_for_device(name, (uint64_t)mem) : NULL;
		if ((rc = instances_ok(inst, t ? t->name : NULL, i, err)) != APP_OK)
			goto out;
		char *inst_text = inst != NULL ? cJSON_PrintUnformatted(inst) : strdup("[]");
		if (inst_text == NULL) {
			rc = app_fail(err, APP_ENOMEM, "out of memory");
			goto out;
		}
		sqlite3_reset(up);
		sqlite3_bind_int64(up, 1, node_id);
		sqlite3_bind_int(up, 2, (int)idx);
		sqlite3_bind_text(up, 3, uuid, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(up, 4, name, -1, SQLITE_TRANSIENT);
		sqlite3_bind_int64(up, 5, (int64_t)mem);
		if (bus != NULL)
			sqlite3_bind_text(up, 6, bus, -1, SQLITE_TRANSIENT);
		else
			sqlite3_bind_null(up, 6);
		sqlite3_bind_int(up, 7, t != NULL);
		sqlite3_bind_int(up, 8, mig_on && t != NULL);
		if (t != NULL)
			sqlite3_bind_text(up, 9, t->name, -1, SQLITE_STATIC);
		else
			sqlite3_bind_null(up, 9);
		sqlite3_bind_text(up, 10, inst_text, -1, free);
		sqlite3_bind_int64(up, 11, now);
		if (sqlite3_step(up) != SQLITE_DONE) {
			rc = app_fail(err, sqlite3_errcode(db) == SQLITE_CONSTRAINT ? APP_EINVAL : APP_EIO,
				      "gpus[%d]: %s", i, sqlite3_errmsg(db));
			goto out;
		}
		if (sqlite3_changes(db) == 0) {
			rc = app_fail(err, APP_EINVAL, "gpus[%d]: GPU %s belongs to another node", i, uuid);
			goto out;
		}
		i++;
	}
	sqlite3_bind_int64(del, 1, node_id);
	if (sqlite3_step(del) != SQLITE_DONE)
		rc = app_fail(err, APP_EIO, "store: %s", sqlite3_errmsg(db));
out:
	sqlite3_finalize(up);
	sqlite3_finalize(del);
	return rc;
}
