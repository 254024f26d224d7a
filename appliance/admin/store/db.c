/* The admin store: open, migrate, check, back up, restore. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "status.h"
#include "store/db.h"

extern const char *const admin_migrations[];
extern const int admin_n_migrations;

int
db_schema_version(void)
{
	return admin_n_migrations;
}

int
db_exec(sqlite3 *db, const char *sql, char *err)
{
	char *msg = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		app_fail(err, APP_EIO, "%s", msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		return APP_EIO;
	}
	return APP_OK;
}

int
db_step_write(sqlite3 *db, sqlite3_stmt *st, char *err)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	if (rc == SQLITE_DONE)
		return APP_OK;
	if (rc == SQLITE_CONSTRAINT)
		return app_fail(err, APP_EBUSY, "database: %s", sqlite3_errmsg(db));
	return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
}

int
db_write(sqlite3 *db, sqlite3_stmt *st, char *err)
{
	if (st == NULL)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	int rc = db_step_write(db, st, err);
	sqlite3_finalize(st);
	return rc;
}

int64_t
db_int64(sqlite3 *db, const char *sql, int64_t arg, int64_t none)
{
	sqlite3_stmt *st;
	int64_t v = none;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	if (sqlite3_bind_parameter_count(st) > 0)
		sqlite3_bind_int64(st, 1, arg);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

int
db_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret, char *err)
{
	if (sqlite3_prepare_v2(db, sql, -1, ret, NULL) != SQLITE_OK) {
		*ret = NULL;
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	}
	return APP_OK;
}

int
db_user_version(sqlite3 *db)
{
	sqlite3_stmt *st;
	int v = -1;

	if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
		return APP_EIO;
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return v;
}

int
db_integrity_ok(sqlite3 *db, char *err)
{
	sqlite3_stmt *st;
	int ok = 0;

	if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK) {
		app_fail(err, APP_EIO, "%s", sqlite3_errmsg(db));
		return 0;
	}
	if (sqlite3_step(st) == SQLITE_ROW) {
		const char *r = (const char *)sqlite3_column_text(st, 0);
		ok = r != NULL && strcmp(r, "ok") == 0;
		if (!ok)
			app_fail(err, APP_EFORMAT, "integrity check: %s", r ? r : "(no answer)");
	}
	sqlite3_finalize(st);
	return ok;
}

/* Apply migrations user_version+1.. each in its own transaction. */
static int
migrate(sqlite3 *db, const char *path, char *err)
{
	int v = db_user_version(db);
	char sql[64], msg[APP_ERR_LEN];

	if (v < 0)
		return app_fail(err, APP_EIO, "%s: cannot read the schema version: %s", path, sqlite3_errmsg(db));
	if (v > admin_n_migrations)
		return app_fail(err, APP_EUNSUPPORTED,
				"%s: schema version %d is newer than this privai-admin (%d); use a newer binary", path,
				v, admin_n_migrations);
	for (; v < admin_n_migrations; v++) {
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
		if (db_exec(db, "BEGIN IMMEDIATE", msg) < 0 || db_exec(db, admin_migrations[v], msg) < 0 ||
		    db_exec(db, sql, msg) < 0 || db_exec(db, "COMMIT", msg) < 0) {
			/* a failed rollback is undone from the journal at the next open */
			(void)db_rollback(db);
			return app_fail(err, APP_EIO, "%s: migration %d failed: %s", path, v + 1, msg);
		}
	}
	return APP_OK;
}

int
db_open(const char *path, sqlite3 **ret, char *err)
{
	sqlite3 *db = NULL;
	char msg[APP_ERR_LEN];
	int r;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) !=
	    SQLITE_OK) {
		r = app_fail(err, APP_EIO, "%s: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return r;
	}
	sqlite3_busy_timeout(db, 5000);
	/* WAL: readers never block the writer; synchronous FULL: a commit
	 * survives power loss, not only a killed process */
	if (db_exec(db, "PRAGMA journal_mode = WAL", msg) < 0 || db_exec(db, "PRAGMA synchronous = FULL", msg) < 0 ||
	    db_exec(db, "PRAGMA foreign_keys = ON", msg) < 0) {
		sqlite3_close(db);
		return app_fail(err, APP_EIO, "%s: %s", path, msg);
	}
	if ((r = migrate(db, path, err)) < 0) {
		sqlite3_close(db);
		return r;
	}
	*ret = db;
	return APP_OK;
}

void
db_close(sqlite3 *db)
{
	sqlite3_close(db);
}

/* Copy src's main database into dst's, all pages in one step. */
static int
copy_db(sqlite3 *dst, sqlite3 *src, char *err)
{
	sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");

	if (b == NULL)
		return app_fail(err, APP_EIO, "backup: %s", sqlite3_errmsg(dst));
	int rc = sqlite3_backup_step(b, -1);
	sqlite3_backup_finish(b);
	if (rc != SQLITE_DONE)
		return app_fail(err, APP_EIO, "backup: %s", sqlite3_errstr(rc));
	return APP_OK;
}

int
db_backup(sqlite3 *db, const char *path, char *err)
{
	char tmp[4096];
	sqlite3 *out = NULL;
	int r;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
		return app_fail(err, APP_EINVAL, "backup path too long");
	unlink(tmp);
	if (sqlite3_open(tmp, &out) != SQLITE_OK) {
		r = app_fail(err, APP_EIO, "%s: %s", path, out ? sqlite3_errmsg(out) : "out of memory");
		sqlite3_close(out);
		unlink(tmp);
		return r;
	}
	r = copy_db(out, db, err);
	if (r == APP_OK && db_exec(out, "PRAGMA journal_mode = DELETE", err) < 0)
		r = APP_EIO;
	sqlite3_close(out);
	if (r == APP_OK && rename(tmp, path) != 0)
		r = app_fail(err, APP_EIO, "%s: cannot rename the backup into place", path);
	if (r != APP_OK)
		unlink(tmp);
	return r;
}

/* Open path read-only and check it is a privai store this binary reads. */
static int
open_checked(const char *path, sqlite3 **ret, char *err)
{
	sqlite3 *in = NULL;
	char msg[APP_ERR_LEN];
	int r = APP_OK;

	if (sqlite3_open_v2(path, &in, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		r = app_fail(err, APP_EIO, "%s: %s", path, in ? sqlite3_errmsg(in) : "out of memory");
		sqlite3_close(in);
		return r;
	}
	int v = db_user_version(in);
	if (v < 0)
		r = app_fail(err, APP_EFORMAT, "%s is not a sqlite database", path);
	else if (!db_integrity_ok(in, msg))
		r = app_fail(err, APP_EFORMAT, "%s: %s", path, msg);
	else if (v < 1 || v > admin_n_migrations)
		r = app_fail(err, APP_EFORMAT, "%s has schema version %d; this privai-admin reads 1..%d", path, v,
			     admin_n_migrations);
	else if (sqlite3_exec(in, "SELECT id, name, role FROM users LIMIT 1", NULL, NULL, NULL) != SQLITE_OK)
		r = app_fail(err, APP_EFORMAT, "%s is a sqlite database but not a privai store (no users table)", path);
	if (r != APP_OK) {
		sqlite3_close(in);
		return r;
	}
	*ret = in;
	return APP_OK;
}

int
db_check_file(const char *path, char *err)
{
	sqlite3 *in;
	int r = open_checked(path, &in, err);

	if (r == APP_OK)
		sqlite3_close(in);
	return r;
}

int
db_restore(sqlite3 *db, const char *path, char *err)
{
	sqlite3 *in = NULL;
	int r = open_checked(path, &in, err);

	if (r != APP_OK)
		return r;
	r = copy_db(db, in, err);
	sqlite3_close(in);
	/* an older backup is brought up to date like any database */
	if (r == APP_OK)
		r = migrate(db, path, err);
	return r;
}

int
db_begin(sqlite3 *db)
{
	return sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? APP_OK : APP_EIO;
}

int
db_commit(sqlite3 *db)
{
	return sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? APP_OK : APP_EIO;
}

int
db_transaction(sqlite3 *db, int (*store_fn)(sqlite3 *db, void *arg, char *err), void *arg, char *err)
{
	int rc;

	if (db_begin(db) != APP_OK)
		return app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	if ((rc = store_fn(db, arg, err)) == APP_OK && db_commit(db) != APP_OK)
		rc = app_fail(err, APP_EIO, "database: %s", sqlite3_errmsg(db));
	if (rc != APP_OK)
		(void)db_rollback(db); /* undone from the journal at the next open if this fails too */
	return rc;
}

int
db_rollback(sqlite3 *db)
{
	if (sqlite3_get_autocommit(db))
		return APP_OK;
	return db_exec(db, "ROLLBACK", NULL);
}

int
db_delete_id(sqlite3 *db, const char *table, int64_t id)
{
	char sql[96];

	snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE id = %lld", table, (long long)id);
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return APP_EIO;
	return sqlite3_changes(db);
}
