/*
 * libFuzzer harness for the JSON bodies privai-admin takes from other
 * machines: a joined node's heartbeat report (node_store_report, with
 * its GPUs, host health and engine parts) and a deployment's serving
 * options (deploy_options_parse), checked on a real store.  Any body
 * must be stored or refused with a reason, never crash; each input's
 * changes are rolled back, so every input meets the same store.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "status.h"
#include "cluster/nodes.h"
#include "deploy/deployments.h"
#include "store/db.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sqlite3 *db;
static char path[] = "/tmp/privai-fuzz-store-XXXXXX";

/* libFuzzer has no teardown hook; it ends with exit(), so the store and
 * its WAL files go at exit rather than pile up in /tmp run after run. */
static void
remove_store(void)
{
	static const char *suffix[] = { "", "-wal", "-shm", "-journal" };
	char p[sizeof(path) + 16];

	sqlite3_close(db);
	for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", path, suffix[i]);
		unlink(p);
	}
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char err[APP_ERR_LEN];
	int fd = mkstemp(path);

	if (fd < 0)
		abort();
	close(fd);
	unlink(path);
	atexit(remove_store);
	if (db_open(path, &db, err) != APP_OK ||
	    db_exec(db,
		    "INSERT INTO nodes (id, name, address, state, is_self, joined_at) VALUES "
		    "(2, 'member', '10.0.0.2', 'ready', 0, 1)",
		    err) != APP_OK) {
		fprintf(stderr, "fuzz_admin_json: %s\n", err);
		exit(1);
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[APP_ERR_LEN], field[64], *options = NULL;
	cJSON *j = cJSON_ParseWithLength((const char *)data, size);

	if (j == NULL)
		return 0;
	if (db_begin(db) != APP_OK)
		abort();
	(void)node_store_report(db, 2, j, 1700000000, err);
	if (db_rollback(db) != APP_OK)
		abort();
	if (deploy_options_parse(cJSON_GetObjectItemCaseSensitive(j, "options"), &options, field, sizeof(field), err,
				 sizeof(err)) == 0)
		free(options);
	cJSON_Delete(j);
	return 0;
}
