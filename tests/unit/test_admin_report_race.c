/*
 * This node's heartbeat reads its GPUs without the store's mutex, then
 * stores them under it.  A MIG layout applied in between reads the GPUs
 * again and stores the new instances; the heartbeat's older read must not
 * undo that.  Against the recorded NVML double of an HGX H100 node and a
 * real store.
 */
#include <stdatomic.h>
#include <unistd.h>

#include "testlib.h"
#include "dbtestlib.h"
#include "status.h"
#include "admin.h"
#include "cluster/nodes.h"
#include "gpu/mig.h"
#include "gpu/mig_apply.h"
#include "store/db.h"

/* GPU 2's instances as stored: how many, -1 when unreadable. */
static long
stored_instances(sqlite3 *db)
{
	return sql_count(db, "SELECT json_array_length(instances) FROM gpus WHERE idx = 2");
}

/* The heartbeat's order: the report, read before the change, stored after it. */
static int
store_late(struct admin *a, cJSON *report, uint64_t epoch, char *err)
{
	int rc;

	if (db_begin(a->db) < 0)
		return app_fail(err, APP_EIO, "begin: %s", sqlite3_errmsg(a->db));
	rc = node_store_own_report(a, report, epoch, err);
	if (rc == APP_OK ? db_commit(a->db) < 0 : (db_rollback(a->db), 0))
		rc = app_fail(err, APP_EIO, "commit: %s", sqlite3_errmsg(a->db));
	return rc;
}

/* Three instances on GPU 2, through the store and NVML, as the API does. */
static int
apply_three(struct admin *a, char *err)
{
	const struct mig_gpu *t = mig_gpu_find("H100-80GB");
	struct mig_instance in[3] = { { mig_profile_find(t, "3g.40gb"), 0 },
				      { mig_profile_find(t, "2g.20gb"), 4 },
				      { mig_profile_find(t, "1g.10gb"), 6 } };
	int64_t gid = sql_count(a->db, "SELECT id FROM gpus WHERE idx = 2");

	if (mig_layout_store(a->db, gid, in, 3) < 0)
		return app_fail(err, APP_EIO, "layout not stored");
	return mig_apply_gpu(a, gid, err);
}

int
main(void)
{
	static struct admin a;
	char err[APP_ERR_LEN], lib[512], state[64], path[64];
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";

	snprintf(lib, sizeof(lib), "%s/libnvml-double.so", build);
	snprintf(state, sizeof(state), "/tmp/privai-race-%d.state", (int)getpid());
	snprintf(path, sizeof(path), "/tmp/privai-race-%d.db", (int)getpid());
	setenv("PRIVAI_NVML_LIB", lib, 1);
	setenv("PRIVAI_NVML_DOUBLE_STATE", state, 1);
	unlink(state);
	unlink(path);
	a.cfg.sys_root = "/";
	a.cfg.preflight_file = "/nonexistent/preflight.json";
	a.cfg.fabric_socket = "/nonexistent/fabric.sock";
	a.cfg.node_name = "race";
	a.cfg.host = "127.0.0.1";
	a.cfg.advertise_url = "http://127.0.0.1:1";
	pthread_mutex_init(&a.db_mu, NULL);
	if (db_open(path, &a.db, err) != APP_OK) {
		fprintf(stderr, "setup failed: %s\n", err);
		return 1;
	}
	CHECK(node_self_register(&a, err) == APP_OK && stored_instances(a.db) == 0, "registered, no instances: %s",
	      err);

	/* the race: read, change, then store */
	uint64_t epoch = atomic_load(&a.gpu_epoch);
	cJSON *early = node_report_json(&a);
	pthread_mutex_lock(&a.db_mu);
	CHECK(early != NULL && apply_three(&a, err) == APP_OK && stored_instances(a.db) == 3, "applied: %s", err);
	CHECK(atomic_load(&a.gpu_epoch) != epoch, "the change is counted");
	CHECK(store_late(&a, early, epoch, err) == APP_OK, "the early report stored: %s", err);
	CHECK(stored_instances(a.db) == 3, "the early report did not undo the change (%ld instances)",
	      stored_instances(a.db));
	CHECK(sql_count(a.db, "SELECT count(*) FROM gpus") == 8, "eight GPUs still");
	pthread_mutex_unlock(&a.db_mu);
	cJSON_Delete(early);

	/* a report read after the change is stored as it is: the instances go
	 * when NVML loses them (a reboot) */
	epoch = atomic_load(&a.gpu_epoch);
	unlink(state);
	cJSON *late = node_report_json(&a);
	pthread_mutex_lock(&a.db_mu);
	CHECK(late != NULL && store_late(&a, late, epoch, err) == APP_OK && stored_instances(a.db) == 0,
	      "a report from after the change is stored as read (%ld instances): %s", stored_instances(a.db), err);
	pthread_mutex_unlock(&a.db_mu);
	cJSON_Delete(late);

	db_close(a.db);
	unlink(path);
	unlink(state);
	return test_summary();
}
