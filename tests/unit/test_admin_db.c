/*
 * The admin store on a real sqlite file: migrations at open (idempotent,
 * and a newer database refused), WAL and foreign keys on, backup and
 * restore (a bad backup leaves the live data alone), and a writer killed
 * with SIGKILL mid-transaction loses nothing it committed.
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"
#include "status.h"
#include "store/db.h"
#include "dbtestlib.h"

static char dir[256];

static const char *
tmp(const char *name)
{
	static char buf[4][512];
	static int k;

	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static void
test_open_and_migrate(void)
{
	sqlite3 *db;
	char err[APP_ERR_LEN];
	static const char *tables[] = { "users", "sessions",       "api_tokens", "audit_log",   "nodes",
					"gpus",  "gpu_partitions", "models",     "deployments", "settings" };

	CHECK(db_open(tmp("a.db"), &db, err) == 0, "open a new database: %s", err);
	CHECK(db_user_version(db) == db_schema_version() && db_schema_version() >= 1, "migrated to version %d",
	      db_user_version(db));
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		char sql[128];
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='%s'",
			 tables[i]);
		CHECK(sql_count(db, sql) == 1, "table %s exists", tables[i]);
	}
	CHECK(sql_count(db, "PRAGMA foreign_keys") == 1, "foreign keys on");
	sqlite3_stmt *st;
	sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL);
	CHECK(sqlite3_step(st) == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0,
	      "WAL mode");
	sqlite3_finalize(st);
	CHECK(db_exec(db, "INSERT INTO gpus (node_id, idx, uuid, name, memory_bytes) VALUES (99, 0, 'u', 'H100', 1)",
		      err) < 0 &&
		      strstr(err, "FOREIGN KEY"),
	      "a GPU on a missing node is refused: %s", err);
	CHECK(db_exec(db, "INSERT INTO users (name, password_hash, role, created_at) VALUES ('a', 'h', 'root', 0)",
		      err) < 0 &&
		      strstr(err, "CHECK"),
	      "an unknown role is refused: %s", err);
	CHECK(db_exec(db, "INSERT INTO settings VALUES ('k', 'v')", err) == 0, "a write");
	db_close(db);

	CHECK(db_open(tmp("a.db"), &db, err) == 0 && sql_count(db, "SELECT count(*) FROM settings") == 1,
	      "reopening keeps the data and migrates nothing twice");
	/* a database from a newer privai-admin */
	char sql[64];
	snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", db_schema_version() + 1);
	sql_must(db, sql);
	db_close(db);
	CHECK(db_open(tmp("a.db"), &db, err) == APP_EUNSUPPORTED && strstr(err, "newer than this privai-admin"),
	      "a newer schema is refused: %s", err);
	CHECK(db_open("/nonexistent-dir/x.db", &db, err) == APP_EIO && strstr(err, "/nonexistent-dir/x.db"),
	      "an unopenable path is named: %s", err);
}

static void
test_backup_restore(void)
{
	sqlite3 *db;
	char err[APP_ERR_LEN];
	FILE *f;

	CHECK(db_open(tmp("b.db"), &db, err) == 0, "open: %s", err);
	sql_must(db, "INSERT INTO settings VALUES ('mode', 'first')");
	CHECK(db_backup(db, tmp("b.bak"), err) == 0, "backup: %s", err);
	sql_must(db, "UPDATE settings SET value = 'second'; INSERT INTO settings VALUES ('x', 'y')");
	CHECK(sql_count(db, "SELECT count(*) FROM settings") == 2, "changed after the backup");

	/* bad backups: garbage, a truncated copy, a non-privai database */
	f = fopen(tmp("junk.bak"), "w");
	fputs("this is not a database", f);
	fclose(f);
	CHECK(db_restore(db, tmp("junk.bak"), err) < 0, "garbage refused: %s", err);
	sqlite3 *other;
	sqlite3_open(tmp("other.db"), &other);
	sqlite3_exec(other, "CREATE TABLE t(x)", NULL, NULL, NULL);
	sqlite3_close(other);
	CHECK(db_restore(db, tmp("other.db"), err) < 0 && strstr(err, "schema version 0"),
	      "a database that is not privai-admin's is refused: %s", err);
	CHECK(db_restore(db, tmp("missing.bak"), err) < 0, "a missing file is refused: %s", err);
	CHECK(sql_count(db, "SELECT count(*) FROM settings") == 2, "refused restores changed nothing");

	CHECK(db_restore(db, tmp("b.bak"), err) == 0, "restore: %s", err);
	CHECK(sql_count(db, "SELECT count(*) FROM settings WHERE key = 'mode' AND value = 'first'") == 1 &&
		      sql_count(db, "SELECT count(*) FROM settings") == 1,
	      "restore brings back the backed-up rows");
	CHECK(db_integrity_ok(db, err), "integrity after restore");
	db_close(db);
}

/* A child commits rows one transaction at a time and reports each commit
 * on a pipe; it is killed with SIGKILL in the middle of writing.  Every
 * reported row must be there, and the file must be intact. */
static void
test_kill_mid_write(void)
{
	int fd[2];
	char err[APP_ERR_LEN];
	sqlite3 *db;

	CHECK(db_open(tmp("k.db"), &db, err) == 0, "open: %s", err);
	db_close(db);
	if (pipe(fd) != 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		close(fd[0]);
		if (db_open(tmp("k.db"), &db, err) < 0)
			_exit(1);
		for (long i = 1;; i++) {
			char sql[256];
			snprintf(sql, sizeof(sql),
				 "BEGIN; INSERT INTO audit_log (at, actor, action, detail) VALUES (%ld, 'test', "
				 "'write', "
				 "printf('%%.500c', 'x')); COMMIT;",
				 i);
			if (db_exec(db, sql, err) < 0)
				_exit(2);
			if (write(fd[1], &i, sizeof(i)) != sizeof(i))
				_exit(3);
		}
	}
	close(fd[1]);
	long last = 0, v;
	while (last < 200 && read(fd[0], &v, sizeof(v)) == sizeof(v))
		last = v;
	kill(pid, SIGKILL);
	while (read(fd[0], &v, sizeof(v)) == sizeof(v))
		last = v; /* commits reported before the kill landed */
	close(fd[0]);
	waitpid(pid, NULL, 0);
	CHECK(db_open(tmp("k.db"), &db, err) == 0, "reopen after SIGKILL: %s", err);
	CHECK(db_integrity_ok(db, err), "integrity_check ok after SIGKILL: %s", err);
	long have = sql_count(db, "SELECT count(*) FROM audit_log"),
	     max = sql_count(db, "SELECT max(at) FROM audit_log");
	CHECK(last >= 200 && have >= last && max == have, "all %ld committed rows survived (found %ld)", last, have);
	db_close(db);
}

int
main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/privai-admin-db-XXXXXX");
	if (mkdtemp(dir) == NULL) {
		CHECK(0, "cannot make %s", dir);
		return test_summary();
	}
	test_open_and_migrate();
	test_backup_restore();
	test_kill_mid_write();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return test_summary();
}
